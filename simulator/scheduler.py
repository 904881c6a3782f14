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
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Mapping

import yaml
from kubernetes.client.exceptions import ApiException

from karpy.apis.quantity import QuantityError
from karpy.kubeclient import events
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, path_of
from karpy.simulator import fit
from karpy.simulator.fit import PodFacts
from karpy.simulator.store import now_rfc3339
from karpy.simulator.writes import Writes

log = logging.getLogger("simulator.scheduler")
Obj = dict[str, Any]
# kube-scheduler's podInitialBackoffSeconds and podMaxBackoffSeconds: a pod that fit nowhere is tried again on a
# change of the cluster only once its backoff (doubling with each failed try) has passed
INITIAL_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 10.0
# writes (binds, Unschedulable marks) sent in one pass before it ends and the next starts: a pass awaits its
# writes, so without a bound the pods created during a pass that re-marks thousands wait for all of them
PASS_WRITES = 400


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
                 name: str = "default-scheduler", clock: Callable[[], float] = time.monotonic,
                 pass_writes: int = PASS_WRITES) -> None:
        self.client, self.nodes, self.pods = client, nodes, pods
        self._pass_writes = pass_writes
        self.clock = clock
        self.extenders = extenders or []
        self.name = name
        self._reported: dict[str, str] = {}          # pod uid -> the message already written
        self._tried: dict[str, tuple[object, ...]] = {}   # pod uid -> the cluster epoch it last failed in
        self._facts: dict[str, PodFacts | None] = {}      # equivalence key -> the pod parsed (None: it does not parse)
        self._placed: dict[str, tuple[str, PodFacts | None]] = {}   # bound pod uid -> (resourceVersion, parsed)
        self._seen_placed: set[str] = set()
        self._keys: dict[str, tuple[str, str]] = {}       # pending pod uid -> (resourceVersion, equivalence key)
        self._backoff: dict[str, tuple[int, float]] = {}  # pending pod uid -> (failed tries, not to be tried before)
        self._queued: dict[str, float] = {}               # pending pod uid -> when it (last) joined the queue
        self._writes = Writes("scheduler")
        # events inform people, they decide nothing: sent on the side, never awaited by a pass
        self._events = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="scheduler-events")

    def reconcile(self) -> float | None:
        """One pass over the pending pods, highest priority and oldest first. Pods of one equivalence class
        (same requests and constraints) fit the same nodes: once one of them fits nowhere, the rest of the
        class in this pass get its verdict without another evaluation."""
        nodes = [n for n in self.nodes.items() if not n["metadata"].get("deletionTimestamp")]
        cluster = fit.Cluster(fit.NodeState.of(n) for n in nodes)
        pending, placed = [], 0
        for p in self.pods.items():
            spec = p.get("spec") or {}
            if spec.get("nodeName"):
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    facts = self._placed_facts(p)
                    if facts is not None:
                        cluster.place(spec["nodeName"], facts)
                    placed += 1
            elif spec.get("schedulerName", "default-scheduler") == self.name and not p["metadata"].get("deletionTimestamp"):
                pending.append(p)
        epoch = self._epoch(nodes, placed)
        live = {p["metadata"].get("uid", "") for p in pending}
        self._tried = {uid: e for uid, e in self._tried.items() if uid in live}
        self._reported = {uid: m for uid, m in self._reported.items() if uid in live}
        self._keys = {uid: k for uid, k in self._keys.items() if uid in live}
        self._backoff = {uid: b for uid, b in self._backoff.items() if uid in live}
        now = self.clock()
        self._queued = {uid: self._queued.get(uid, now) for uid in live}
        again: float | None = None                        # when the first pod backing off may be tried again
        self._placed = {uid: f for uid, f in self._placed.items() if uid in self._seen_placed}
        self._seen_placed = set()
        by_name = {n["metadata"]["name"]: n for n in nodes}
        static: dict[str, dict[str, list[str]]] = {}      # class -> node -> reasons that do not change in a pass
        failed: dict[str, str] = {}                      # class -> the message of the pod of it that fit nowhere
        writes = self._writes.count
        # kube-scheduler's active queue: highest priority first, then the pod that joined the queue first; a
        # pod that failed joins it again when its backoff ends, behind the pods that came while it waited
        for pod in sorted(pending, key=lambda p: (-(p.get("spec") or {}).get("priority", 0),
                                                  self._queued[p["metadata"].get("uid", "")], p["metadata"].get("creationTimestamp", ""))):
            if self._writes.count - writes >= self._pass_writes:
                again = 0.0                 # the rest in the next pass, with the pods that came meanwhile
                break
            uid = pod["metadata"].get("uid", "")
            if self._tried.get(uid) == epoch:
                continue                    # nothing changed since it last failed
            not_before = self._backoff.get(uid, (0, 0.0))[1]
            if not_before > now:
                again = min(again if again is not None else not_before - now, not_before - now)
                continue                    # backing off: the change is looked at when the backoff ends
            key = self._key_of(pod)
            if key in failed:
                self._unschedulable(pod, failed[key])
                self._failed(uid, epoch, now)
                continue
            facts = self._facts_of(key, pod)
            if facts is None:
                message = f"0/{len(nodes)} nodes are available: the pod's resource requests do not parse."
            else:
                static_of_class = static.setdefault(key, {n: fit.static_reasons(facts, state) for n, state in cluster.nodes.items()})
                node, reason = self._schedule(pod, facts, cluster, static_of_class, by_name)
                if node is not None:
                    cluster.place(node, facts)
                    placed += 1
                    continue
                if reason is None:
                    continue                 # the bind failed; the next pass tries again
                message = reason
            failed[key] = message
            self._unschedulable(pod, message)
            self._failed(uid, epoch, now)
        self._writes.flush()
        return again

    def _failed(self, uid: str, epoch: tuple[object, ...], now: float) -> None:
        self._tried[uid] = epoch
        tries = self._backoff.get(uid, (0, 0.0))[0] + 1
        self._backoff[uid] = (tries, now + min(INITIAL_BACKOFF_SECONDS * 2 ** (tries - 1), MAX_BACKOFF_SECONDS))
        self._queued[uid] = self._backoff[uid][1]

    def _key_of(self, pod: Obj) -> str:
        meta = pod["metadata"]
        uid, version = meta.get("uid", ""), meta.get("resourceVersion", "")
        cached = self._keys.get(uid)
        if cached is None or cached[0] != version:
            cached = self._keys[uid] = (version, fit.equivalence_key(pod))
        return cached[1]

    def _facts_of(self, key: str, pod: Obj) -> PodFacts | None:
        if key not in self._facts:
            if len(self._facts) > 10_000:
                self._facts.clear()
            self._facts[key] = self._parse(pod)
        return self._facts[key]

    def _placed_facts(self, pod: Obj) -> PodFacts | None:
        """A bound pod parsed once per version of it (thousands are bound; few change between passes)."""
        meta = pod["metadata"]
        uid, version = meta.get("uid", ""), meta.get("resourceVersion", "")
        self._seen_placed.add(uid)
        cached = self._placed.get(uid)
        if cached is None or cached[0] != version:
            cached = self._placed[uid] = (version, self._parse(pod))
        return cached[1]

    @staticmethod
    def _parse(pod: Obj) -> PodFacts | None:
        try:
            return fit.PodFacts.of(pod)
        except (QuantityError, ValueError, TypeError):
            return None

    @staticmethod
    def _epoch(nodes: list[Obj], placed: int) -> tuple[object, ...]:
        """What a retry depends on: the nodes as they are, and how many pods hold their capacity."""
        return tuple(sorted((n["metadata"]["name"], n["metadata"].get("resourceVersion")) for n in nodes)), placed

    # --- one pod ------------------------------------------------------------------------------
    def _schedule(self, pod: Obj, facts: PodFacts, cluster: fit.Cluster, static: dict[str, list[str]],
                  by_name: dict[str, Obj]) -> tuple[str | None, str | None]:
        """(the node it was bound to, None) or (None, the FailedScheduling message); (None, None) when the
        bind itself failed."""
        reasons: collections.Counter[str] = collections.Counter()
        feasible = []
        for name, state in cluster.nodes.items():
            why = cluster.reasons(facts, state, static=static[name])
            if why:
                reasons.update(why)
            else:
                feasible.append(state)
        scores = {n.name: _least_allocated(facts, n) for n in feasible}
        binder = None
        if feasible and self.extenders:
            kept, failed_by_extenders, binder = self._extend(pod, [by_name[n.name] for n in feasible], scores)
            names = {n["metadata"]["name"] for n in kept}
            feasible = [n for n in feasible if n.name in names]
            reasons.update(failed_by_extenders.values())
        if not feasible:
            return None, fit.unschedulable_message(len(cluster.nodes), reasons)
        best = max(feasible, key=lambda n: (scores.get(n.name, 0), [-ord(c) for c in n.name]))
        if binder is None:
            # kube-scheduler's binding cycle runs apart from its scheduling cycle: the pod is assumed on the
            # node at once, and a bind that fails is forgotten (the next pass sees the pod pending again)
            self._writes.submit(lambda: self._bind(pod, best.name, None))
            return best.name, None
        if self._bind(pod, best.name, binder):
            return best.name, None
        return None, None

    # --- extenders ----------------------------------------------------------------------------
    def _call(self, extender: Mapping[str, Any], verb: str, args: Mapping[str, Any]) -> Any:
        url = f"{extender['urlPrefix'].rstrip('/')}/{verb}"
        timeout = _seconds(extender.get("httpTimeout", "30s"))
        request = urllib.request.Request(url, data=json.dumps(args).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:  # the configured extender
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

    def _unschedulable(self, pod: Obj, message: str) -> None:
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


def _least_allocated(pod: PodFacts, node: fit.NodeState) -> int:
    """kube-scheduler's default score: the share of cpu and memory left after the pod, 0..100."""
    shares = [1 - (node.requested.get(r, 0) + pod.requests.get(r, 0)) / node.allocatable[r]
              for r in ("cpu", "memory") if node.allocatable.get(r)]
    return int(100 * sum(shares) / len(shares)) if shares else 0


def _seconds(text: Any) -> float:
    if isinstance(text, (int, float)):
        return float(text)
    text = str(text)
    for suffix, factor in (("ms", 0.001), ("s", 1), ("m", 60)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)
