"""The local cluster's kube-scheduler: filters, scores and binds pending pods; calls extenders.

Filters as kube-scheduler's default plugins do: node ready and schedulable,
taints, nodeSelector and required node affinity, resources, host ports,
required pod (anti-)affinity and DoNotSchedule topology spread. Nodes that
pass are scored (least allocated), then offered to the extenders of a
KubeSchedulerConfiguration (filter, prioritize, bind, with kube-scheduler's
JSON). A pod that fits nowhere gets `PodScheduled=False, reason=Unschedulable`
with kube-scheduler's message (`0/3 nodes are available: 3 Insufficient cpu.`)
and is tried again when nodes or pods change.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import urllib.error
import urllib.request
from typing import Any, Mapping

import yaml
from kubernetes.client.exceptions import ApiException

from karpy.apis.conditions import ready
from karpy.apis.pods import pod_requests
from karpy.apis.quantity import QuantityError
from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources, share
from karpy.apis.selectors import LabelSelector, Taint, untolerated
from karpy.kubeclient import events
from karpy.kubeclient.raw import Informer, RawClient, path_of
from karpy.simulator.store import now_rfc3339

log = logging.getLogger("simulator.scheduler")
Obj = dict[str, Any]
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def load_extenders(path: str | None, *, url_prefix: str | None = None) -> list[dict[str, Any]]:
    """The `extenders` of a KubeSchedulerConfiguration file (none without a file). `url_prefix` replaces the
    address of each (a cluster's Service name means nothing on a laptop)."""
    if not path:
        return []
    with open(path, encoding="utf-8") as f:
        config = yaml.safe_load(f) or {}
    extenders = [dict(e) for e in config.get("extenders") or []]
    if url_prefix:
        for extender in extenders:
            extender["urlPrefix"] = url_prefix
    return extenders


class Scheduler:
    def __init__(self, client: RawClient, nodes: Informer, pods: Informer, *, extenders: list[dict[str, Any]] | None = None,
                 name: str = "default-scheduler") -> None:
        self.client, self.nodes, self.pods = client, nodes, pods
        self.extenders = extenders or []
        self.name = name
        self._reported: dict[str, str] = {}          # pod uid -> the message already written
        self._tried: dict[str, tuple[object, ...]] = {}   # pod uid -> the cluster epoch it last failed in
        self._writes = Writes()
        # events inform people, they decide nothing: sent on the side, never awaited by a pass
        self._events = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="scheduler-events")

    def reconcile(self) -> float | None:
        nodes = [n for n in self.nodes.items() if not n["metadata"].get("deletionTimestamp")]
        pods = self.pods.items()
        used: dict[str, Resources] = collections.defaultdict(Resources)
        ports: dict[str, set[tuple[str, int]]] = collections.defaultdict(set)
        placed: list[tuple[Obj, str]] = []
        pending = []
        for p in pods:
            spec = p.get("spec") or {}
            if spec.get("nodeName"):
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    used[spec["nodeName"]] = used[spec["nodeName"]] + self._requests(p)
                    ports[spec["nodeName"]] |= self._ports(p)
                    placed.append((p, spec["nodeName"]))
            elif spec.get("schedulerName", "default-scheduler") == self.name and not p["metadata"].get("deletionTimestamp"):
                pending.append(p)
        by_name = {n["metadata"]["name"]: n for n in nodes}
        epoch = self._epoch(nodes, placed)
        failed_kinds: set[str] = set()      # pods like one that fit nowhere in this pass fit nowhere either
        for pod in sorted(pending, key=lambda p: (-(p.get("spec") or {}).get("priority", 0), p["metadata"].get("creationTimestamp", ""))):
            uid = pod["metadata"].get("uid", "")
            if self._tried.get(uid) == epoch:
                continue                    # nothing changed since it last failed
            kind = _kind(pod)
            if kind in failed_kinds and uid in self._reported:
                self._tried[uid] = epoch
                continue
            node = self._schedule(pod, nodes, by_name, used, ports, placed)
            if node is not None:
                used[node] = used[node] + self._requests(pod)
                ports[node] |= self._ports(pod)
                placed.append((pod, node))
            else:
                failed_kinds.add(kind)
                self._tried[uid] = epoch
        self._writes.flush()
        return None

    @staticmethod
    def _epoch(nodes: list[Obj], placed: list[tuple[Obj, str]]) -> tuple[object, ...]:
        """What a retry depends on: the nodes as they are, and which pods hold their capacity."""
        return (tuple(sorted((n["metadata"]["name"], n["metadata"].get("resourceVersion")) for n in nodes)),
                len(placed), hash(frozenset(p["metadata"].get("uid") for p, _ in placed)))

    # --- one pod ------------------------------------------------------------------------------
    def _requests(self, pod: Obj) -> Resources:
        try:
            return pod_requests(pod.get("spec") or {})
        except QuantityError:
            return Resources()

    @staticmethod
    def _ports(pod: Obj) -> set[tuple[str, int]]:
        return {(p.get("protocol", "TCP"), int(p["hostPort"])) for c in (pod.get("spec") or {}).get("containers") or []
                for p in c.get("ports") or [] if p.get("hostPort")}

    def _schedule(self, pod: Obj, nodes: list[Obj], by_name: dict[str, Obj], used: dict[str, Resources],
                  ports: dict[str, set[tuple[str, int]]], placed: list[tuple[Obj, str]]) -> str | None:
        reasons: collections.Counter[str] = collections.Counter()
        feasible = []
        requests = self._requests(pod)
        for node in nodes:
            why = self._filter(pod, requests, node, used, ports, placed, by_name)
            if why is None:
                feasible.append(node)
            else:
                reasons[why] += 1
        scores = {n["metadata"]["name"]: self._score(requests, n, used) for n in feasible}
        failed_by_extenders: dict[str, str] = {}
        if feasible and self.extenders:
            feasible, failed_by_extenders, binder = self._extend(pod, feasible, scores)
            for why in failed_by_extenders.values():
                reasons[why] += 1
        else:
            binder = None
        if not feasible:
            self._unschedulable(pod, len(nodes), reasons)
            return None
        best = max(feasible, key=lambda n: (scores.get(n["metadata"]["name"], 0), [-ord(c) for c in n["metadata"]["name"]]))
        target = best["metadata"]["name"]
        if self._bind(pod, target, binder):
            return target
        return None

    def _filter(self, pod: Obj, requests: Resources, node: Obj, used: dict[str, Resources],
                ports: dict[str, set[tuple[str, int]]], placed: list[tuple[Obj, str]], by_name: dict[str, Obj]) -> str | None:
        spec, nspec = pod.get("spec") or {}, node.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        tolerations = spec.get("tolerations") or []
        if not ready(node):
            return "node(s) were not ready"    # kube-scheduler reports the not-ready taint; the effect is the same
        if nspec.get("unschedulable") and untolerated(tolerations, [UNSCHEDULABLE_TAINT]):
            return "node(s) were unschedulable"
        taints = [Taint.parse(t) for t in nspec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
        if blocked := untolerated(tolerations, taints):
            t = blocked[0]
            return f"node(s) had untolerated taint {{{t.key}: {t.value}}}" if t.value else f"node(s) had untolerated taint {{{t.key}: }}"
        if not Requirements.from_labels(spec.get("nodeSelector")).allows_labels(labels):
            return "node(s) didn't match Pod's node affinity/selector"
        terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
                 .get("nodeSelectorTerms") or [])
        try:
            if terms and not any(Requirements.from_node_selector_requirements(t.get("matchExpressions") or []).allows_labels(labels)
                                 for t in terms):
                return "node(s) didn't match Pod's node affinity/selector"
        except (ValueError, KeyError):
            return "node(s) didn't match Pod's node affinity/selector"
        allocatable = Resources.parse((node.get("status") or {}).get("allocatable"))
        short = requests.exceeding(allocatable - used.get(node["metadata"]["name"], Resources()))
        if short:
            return f"Insufficient {short[0]}"
        if self._ports(pod) & ports.get(node["metadata"]["name"], set()):
            return "node(s) didn't have free ports for the requested pod ports"
        return self._inter_pod(pod, node, placed, by_name)

    def _inter_pod(self, pod: Obj, node: Obj, placed: list[tuple[Obj, str]], by_name: dict[str, Obj]) -> str | None:
        spec = pod.get("spec") or {}
        affinity = spec.get("affinity") or {}
        namespace = pod["metadata"].get("namespace", "default")
        labels = node["metadata"].get("labels") or {}

        def matching(term: Mapping[str, Any]) -> list[str]:
            selector = LabelSelector.parse(term.get("labelSelector"))
            namespaces = set(term.get("namespaces") or []) or {namespace}
            key = term.get("topologyKey", "")
            return [by_name[n]["metadata"].get("labels", {}).get(key, "") for p, n in placed
                    if n in by_name and (p["metadata"].get("namespace") in namespaces or term.get("namespaceSelector") == {})
                    and selector.matches(p["metadata"].get("labels") or {})]

        for term in (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []:
            domains = matching(term)
            self_match = LabelSelector.parse(term.get("labelSelector")).matches(pod["metadata"].get("labels") or {})
            if (domains or not self_match) and labels.get(term.get("topologyKey", "")) not in domains:
                return "node(s) didn't match pod affinity rules"
        for term in (affinity.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []:
            if labels.get(term.get("topologyKey", "")) in matching(term):
                return "node(s) didn't match pod anti-affinity rules"
        for c in spec.get("topologySpreadConstraints") or []:
            if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                continue
            key = c.get("topologyKey", "")
            if key not in labels:
                return "node(s) didn't match pod topology spread constraints (missing required label)"
            selector = LabelSelector.parse(c.get("labelSelector") or {})
            counts: collections.Counter[str] = collections.Counter(
                {n["metadata"].get("labels", {}).get(key): 0 for n in by_name.values() if key in (n["metadata"].get("labels") or {})})
            for p, n in placed:
                if n in by_name and p["metadata"].get("namespace") == namespace and selector.matches(p["metadata"].get("labels") or {}):
                    domain = by_name[n]["metadata"].get("labels", {}).get(key)
                    if domain is not None:
                        counts[domain] += 1
            self_count = 1 if selector.matches(pod["metadata"].get("labels") or {}) else 0
            if counts[labels[key]] + self_count - min(counts.values(), default=0) > int(c.get("maxSkew", 1)):
                return "node(s) didn't match pod topology spread constraints"
        return None

    @staticmethod
    def _score(requests: Resources, node: Obj, used: dict[str, Resources]) -> int:
        """Least allocated: the share of cpu and memory left after the pod, 0..100."""
        allocatable = Resources.parse((node.get("status") or {}).get("allocatable"))
        total = used.get(node["metadata"]["name"], Resources()) + requests
        shares = [1 - share(total.get(r, 0), allocatable[r]) for r in ("cpu", "memory") if allocatable.get(r, 0) > 0]
        return int(100 * sum(shares) / len(shares)) if shares else 0

    # --- extenders ----------------------------------------------------------------------------
    def _call(self, extender: Mapping[str, Any], verb: str, args: Mapping[str, Any]) -> Any:
        url = f"{extender['urlPrefix'].rstrip('/')}/{verb}"
        timeout = _seconds(extender.get("httpTimeout", "30s"))
        request = urllib.request.Request(url, data=json.dumps(args).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (configured extender)
            return json.loads(response.read())

    def _extend(self, pod: Obj, feasible: list[Obj], scores: dict[str, int]) -> tuple[list[Obj], dict[str, str], Mapping[str, Any] | None]:
        failed: dict[str, str] = {}
        binder = None
        for ext in self.extenders:
            if not feasible:
                break
            cache_capable = bool(ext.get("nodeCacheCapable"))
            try:
                if ext.get("filterVerb"):
                    args: dict[str, Any] = {"Pod": pod}
                    if cache_capable:
                        args["NodeNames"] = [n["metadata"]["name"] for n in feasible]
                    else:
                        args["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": feasible}
                    result = self._call(ext, ext["filterVerb"], args)
                    if result.get("Error"):
                        raise ValueError(result["Error"])
                    names = set(result.get("NodeNames") or []) if cache_capable else \
                        {n["metadata"]["name"] for n in (result.get("Nodes") or {}).get("items") or []}
                    for name, why in {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}.items():
                        failed[name] = why
                    feasible = [n for n in feasible if n["metadata"]["name"] in names]
                if ext.get("prioritizeVerb") and feasible:
                    args = {"Pod": pod}
                    if cache_capable:
                        args["NodeNames"] = [n["metadata"]["name"] for n in feasible]
                    else:
                        args["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": feasible}
                    for host in self._call(ext, ext["prioritizeVerb"], args) or []:
                        # kube-scheduler scales extender scores (0..10) to its own range (0..100) times the weight
                        scores[host["Host"]] = scores.get(host["Host"], 0) + int(host["Score"]) * 10 * int(ext.get("weight", 1))
                if ext.get("bindVerb"):
                    binder = ext
            except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as e:
                if ext.get("ignorable"):
                    log.debug("extender %s ignored: %s", ext.get("urlPrefix"), e)
                    continue
                failed = {n["metadata"]["name"]: f"extender error: {e}" for n in feasible}
                feasible = []
        return feasible, failed, binder

    # --- writes -------------------------------------------------------------------------------
    def _bind(self, pod: Obj, node: str, binder: Mapping[str, Any] | None) -> bool:
        meta = pod["metadata"]
        try:
            if binder is not None:
                result = self._call(binder, binder["bindVerb"], {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                                "PodUID": meta["uid"], "Node": node})
                if result and result.get("Error"):
                    log.info("Extender could not bind %s/%s: %s", meta["namespace"], meta["name"], result["Error"])
                    return False
            else:
                self.client.bind(meta["namespace"], meta["name"], node)
        except ApiException as e:
            if e.status not in (404, 409):
                log.warning("binding %s/%s to %s: %s", meta["namespace"], meta["name"], node, e.reason)
            return False
        except (urllib.error.URLError, OSError, ValueError) as e:
            log.warning("extender bind of %s/%s failed: %s", meta["namespace"], meta["name"], e)
            return False
        self._reported.pop(meta.get("uid", ""), None)
        log.info("Bound %s/%s to %s", meta["namespace"], meta["name"], node)
        self._events.submit(events.record, self.client, pod, reason="Scheduled", component=self.name,
                            message=f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}")
        return True

    def _unschedulable(self, pod: Obj, total: int, reasons: collections.Counter[str]) -> None:
        detail = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items(), key=lambda kv: kv[0]))
        message = f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."
        meta = pod["metadata"]
        if self._reported.get(meta.get("uid", "")) == message:
            return
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                           "lastTransitionTime": now_rfc3339()})
        self._reported[meta.get("uid", "")] = message

        def write() -> None:
            try:
                self.client.patch(path_of("v1", "pods", meta["namespace"], meta["name"], "status"), {"status": {"conditions": conditions}})
                self._events.submit(events.record, self.client, pod, reason="FailedScheduling", message=message,
                                    component=self.name, event_type="Warning")
            except ApiException as e:
                if e.status not in (404, 409):
                    log.warning("marking %s/%s unschedulable: %s", meta["namespace"], meta["name"], e.reason)

        self._writes.submit(write)


class Writes:
    """Status writes that do not decide anything, sent side by side and awaited once per pass."""

    def __init__(self, parallelism: int = 16) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(parallelism, thread_name_prefix="scheduler-writes")
        self._pending: list[concurrent.futures.Future[None]] = []

    def submit(self, fn: Any) -> None:
        self._pending.append(self._pool.submit(fn))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        concurrent.futures.wait(pending)


def _kind(pod: Obj) -> str:
    """Everything about a pod that decides where it fits."""
    spec = pod.get("spec") or {}
    return json.dumps([spec.get(k) for k in ("containers", "initContainers", "overhead", "nodeSelector", "affinity", "tolerations",
                                             "topologySpreadConstraints")] + [pod["metadata"].get("labels"),
                                                                            pod["metadata"].get("namespace")], sort_keys=True)


def _seconds(text: Any) -> float:
    if isinstance(text, (int, float)):
        return float(text)
    text = str(text)
    for suffix, factor in (("ms", 0.001), ("s", 1), ("m", 60)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)
