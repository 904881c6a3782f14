"""Workload controllers: Deployment -> ReplicaSet -> Pods, StatefulSet, DaemonSet, Job, and PDB status.

Each pass reads the informers' caches, compares what each workload wants
with what exists, and makes the difference through the API server. Pods
carry a controller ownerReference, so deleting a workload removes them.
"""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
import json
import logging
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from karpy.apis.conditions import ready
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, now_rfc3339, path_of
from karpy.simulator import disruption, fit

_PLURALS = {"Deployment": "deployments", "ReplicaSet": "replicasets", "StatefulSet": "statefulsets",
            "DaemonSet": "daemonsets", "Job": "jobs"}

log = logging.getLogger("simulator.workloads")
Obj = dict[str, Any]
ORPHAN_GRACE_SECONDS = 3.0      # a new owner may not be in the cache yet


def owner_ref(obj: Obj) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def controller_uid(obj: Obj) -> str | None:
    return next((r.get("uid") for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)


def by_controller(objects: list[Obj]) -> dict[str, list[Obj]]:
    """Objects grouped by the uid of their controller, so each workload finds its own in one lookup."""
    out: dict[str, list[Obj]] = {}
    for obj in objects:
        uid = controller_uid(obj)
        if uid is not None:
            out.setdefault(uid, []).append(obj)
    return out


def template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


# --- status, as the real controllers write it (what `kubectl wait` and `kubectl rollout status` read) ---------
def conditions(current: list[Obj] | None, wanted: list[tuple[str, str, str, str]], *, update_time: bool = False) -> list[Obj]:
    """`wanted` (type, status, reason, message) as conditions; an unchanged one keeps its timestamps, so a
    controller pass that changes nothing writes nothing."""
    now = now_rfc3339()
    before = {c.get("type"): c for c in current or []}
    out = []
    for kind, status, reason, message in wanted:
        old = before.get(kind) or {}
        same = old.get("status") == status
        condition = {"type": kind, "status": status,
                     "lastTransitionTime": old.get("lastTransitionTime", now) if same else now,
                     "reason": reason, "message": message}
        if update_time:
            unchanged = same and old.get("reason") == reason and old.get("message") == message
            condition["lastUpdateTime"] = old.get("lastUpdateTime", now) if unchanged else now
        out.append(condition)
    return out


def _scaled(value: Any, total: int) -> int:
    """An intOrString like maxUnavailable: `2`, or `25%` of `total` rounded down."""
    if isinstance(value, str) and value.endswith("%"):
        return int(total * int(value[:-1]) // 100)
    return int(value or 0)


def deployment_status(d: Obj, owned: list[Obj], current: Obj | None) -> dict[str, Any]:
    """The Deployment controller's status: counts over its ReplicaSets, and Available / Progressing."""
    spec, meta = d.get("spec") or {}, d["metadata"]
    replicas = int(spec.get("replicas", 1))
    statuses = [rs.get("status") or {} for rs in owned]
    total = sum(s.get("replicas", 0) for s in statuses)
    available = sum(s.get("availableReplicas", 0) for s in statuses)
    ready_count = sum(s.get("readyReplicas", 0) for s in statuses)
    updated = ((current or {}).get("status") or {}).get("replicas", 0) if current else 0
    strategy = spec.get("strategy") or {}
    max_unavailable = 0 if strategy.get("type") == "Recreate" or replicas == 0 else \
        _scaled((strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%"), replicas)
    name = (current or {}).get("metadata", {}).get("name", meta["name"])
    if available >= replicas - max_unavailable:
        availability = ("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        availability = ("Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
    if current is not None and updated == replicas and total == replicas and available >= replicas:
        progress = ("Progressing", "True", "NewReplicaSetAvailable", f'ReplicaSet "{name}" has successfully progressed.')
    else:
        progress = ("Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.')
    status: dict[str, Any] = {
        "observedGeneration": meta.get("generation", 1), "replicas": total, "updatedReplicas": updated,
        "readyReplicas": ready_count, "availableReplicas": available, "unavailableReplicas": max(0, replicas - available),
        "conditions": conditions((d.get("status") or {}).get("conditions"), [availability, progress], update_time=True),
    }
    return status


def replica_status(owner: Obj, active: list[Obj]) -> dict[str, Any]:
    """A ReplicaSet's or StatefulSet's status over its live pods."""
    meta = owner["metadata"]
    ready_count = sum(1 for p in active if ready(p))
    status: dict[str, Any] = {"replicas": len(active), "readyReplicas": ready_count, "availableReplicas": ready_count,
                              "observedGeneration": meta.get("generation", 1)}
    if owner["kind"] == "ReplicaSet":
        status["fullyLabeledReplicas"] = len(active)
    else:                     # one revision: every pod runs the current template
        revision = f"{meta['name']}-{template_hash((owner.get('spec') or {}).get('template') or {})}"
        status.update({"currentReplicas": len(active), "updatedReplicas": len(active), "currentRevision": revision,
                       "updateRevision": revision, "collisionCount": 0})
    return status


def _job_counts(pods: list[Obj]) -> tuple[int, int]:
    phases = [(p.get("status") or {}).get("phase") for p in pods]
    return phases.count("Succeeded"), phases.count("Failed")


def job_wants(job: Obj, pods: list[Obj]) -> int:
    """Active pods the Job wants: its parallelism, no more than the completions still missing, none once done."""
    spec = job.get("spec") or {}
    succeeded, failed = _job_counts(pods)
    if failed > int(spec.get("backoffLimit", 6)):
        return 0
    parallelism = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
    completions = spec.get("completions")
    if completions is None:                    # work queue: done when any pod succeeded
        return 0 if succeeded else parallelism
    return max(0, min(parallelism, int(completions) - succeeded))


def job_status(job: Obj, pods: list[Obj]) -> dict[str, Any]:
    """The Job controller's status: counts, start and completion times, and Complete / Failed."""
    spec, before = job.get("spec") or {}, job.get("status") or {}
    succeeded, failed = _job_counts(pods)
    active = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    status: dict[str, Any] = {"active": len(active), "ready": sum(1 for p in active if ready(p)), "succeeded": succeeded,
                              "failed": failed, "startTime": before.get("startTime") or now_rfc3339()}
    completions = spec.get("completions")
    done = succeeded >= int(completions) if completions is not None else succeeded > 0 and not active
    wanted = []
    if done:
        wanted.append(("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods"))
        status["completionTime"] = before.get("completionTime") or now_rfc3339()
    elif failed > int(spec.get("backoffLimit", 6)):
        wanted.append(("Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    if wanted:
        status["conditions"] = conditions(before.get("conditions"), wanted)
    return status


class Workloads:
    def __init__(self, client: RawClient, informers: dict[str, Informer]) -> None:
        self.client = client
        self.i = informers
        # Expectations: pods this controller created or deleted that the cache has not shown yet,
        # so a pass on a stale cache does not create or delete them twice.
        self._created: dict[str, dict[str, float]] = {}     # owner uid -> pod name -> give up at
        self._deleted: dict[str, float] = {}                 # namespace/name -> give up at
        self._on_node: dict[str, dict[str, float]] = {}      # daemonset uid -> node -> give up at
        self._pool = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="workloads")
        self._missing: dict[str, float] = {}                 # object whose controller is not in the cache -> since

    def reconcile(self) -> float | None:
        now = time.monotonic()
        pods = self.i["pods"].items()
        if self._deleted or any(self._created.values()):   # expectations to settle against the cache
            seen = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}
            self._deleted = {k: t for k, t in self._deleted.items() if t > now and k in seen}
            for uid in list(self._created):
                self._created[uid] = {n: t for n, t in self._created[uid].items() if t > now and n not in seen}
            if self._deleted:
                pods = [p for p in pods if f"{p['metadata']['namespace']}/{p['metadata']['name']}" not in self._deleted]
        owned_pods = by_controller(pods)
        replicasets = self.i["replicasets"].items()
        owned_sets = by_controller(replicasets)
        for d in self.i["deployments"].items():
            self._deployment(d, owned_sets.get(d["metadata"]["uid"], []))
        for rs in replicasets:
            self._replicas(rs, owned_pods.get(rs["metadata"]["uid"], []), "replicas", ordinal=False)
        for sts in self.i["statefulsets"].items():
            self._replicas(sts, owned_pods.get(sts["metadata"]["uid"], []), "replicas", ordinal=True)
        for job in self.i["jobs"].items():
            self._replicas(job, owned_pods.get(job["metadata"]["uid"], []), "parallelism", ordinal=False)
        nodes = self.i["nodes"].items()
        for ds in self.i["daemonsets"].items():
            self._daemonset(ds, owned_pods.get(ds["metadata"]["uid"], []), nodes)
        for pdb in self.i["poddisruptionbudgets"].items():
            self._pdb(pdb, pods, replicasets)
        self._collect_orphans(now, {"replicasets": owned_sets, "pods": owned_pods})
        return None

    def _collect_orphans(self, now: float, owned: dict[str, dict[str, list[Obj]]]) -> None:
        """The garbage collector's other half: objects whose controller is gone go too (a controller
        working from a stale cache can create one after its owner was deleted). `owned` is, per plural,
        the objects by their controller's uid: owners still there are one lookup each."""
        owners = {o["metadata"]["uid"] for plural in ("deployments", "replicasets", "statefulsets", "daemonsets", "jobs")
                  for o in self.i[plural].items()}
        missing: dict[str, float] = {}
        orphaned = ((obj, plural) for plural, groups in owned.items() for uid, objects in groups.items() if uid not in owners
                    for obj in objects)
        for obj, plural in orphaned:
            ref = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if ref is None or ref.get("kind") not in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
                continue
            key = f"{plural}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            first = missing[key] = self._missing.get(key, now)
            if now - first >= ORPHAN_GRACE_SECONDS and not obj["metadata"].get("deletionTimestamp"):
                meta = obj["metadata"]
                self._write(f"deleting orphan {key}", self.client.delete,
                            path_of(obj.get("apiVersion", "v1"), plural, meta["namespace"], meta["name"]))
        self._missing = missing

    # --- helpers ---------------------------------------------------------------------------------
    def _write(self, action: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except ApiException as e:
            if e.status not in (404, 409):
                log.warning("%s: %s", action, e.reason)

    def _status(self, obj: Obj, plural: str, status: dict[str, Any]) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        meta = obj["metadata"]
        self._write(f"status of {plural} {meta['name']}", self.client.patch,
                    path_of(obj["apiVersion"], plural, meta.get("namespace"), meta["name"], "status"), {"status": status})

    def _create_pod(self, owner: Obj, name: str | None, node_name: str | None = None) -> None:
        template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
        meta = template.get("metadata") or {}
        pod_meta: dict[str, Any] = {"namespace": owner["metadata"]["namespace"], "labels": dict(meta.get("labels") or {}),
                                    "annotations": dict(meta.get("annotations") or {}), "ownerReferences": [owner_ref(owner)]}
        if name:
            pod_meta["name"] = name
        else:
            pod_meta["generateName"] = f"{owner['metadata']['name']}-"
        spec = template.get("spec") or {}
        if owner["kind"] == "DaemonSet":
            spec["tolerations"] = fit.daemon_pod_tolerations(spec)
        if node_name:
            spec["nodeName"] = node_name
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}
        try:
            created = self.client.create(path_of("v1", "pods", pod_meta["namespace"]), body)
        except ApiException as e:
            if e.status not in (404, 409):
                log.warning("creating a pod for %s %s: %s", owner["kind"], owner["metadata"]["name"], e.reason)
            return
        key = f"{pod_meta['namespace']}/{created['metadata']['name']}"
        self._created.setdefault(owner["metadata"]["uid"], {})[key] = time.monotonic() + 10

    def _still_there(self, owner: Obj) -> bool:
        """An uncached read of `owner` before creating what it controls, as the real controllers recheck
        (RecheckDeletionTimestamp): the cache may still hold an owner that was just deleted, and its
        dependents, deleted with it, would come back as orphans that land on nodes until collected."""
        meta = owner["metadata"]
        try:
            fresh = self.client.get(path_of(owner.get("apiVersion", "v1"), _PLURALS[owner["kind"]], meta["namespace"], meta["name"]))
        except ApiException as e:
            if e.status != 404:
                log.warning("reading %s %s: %s", owner["kind"], meta["name"], e.reason)
            return False                               # gone, or unknown: the next sync decides
        return fresh["metadata"].get("uid") == meta.get("uid") and not fresh["metadata"].get("deletionTimestamp")

    def _in_flight(self, owner: Obj) -> int:
        """Pods created for `owner` that the cache does not show yet."""
        return len(self._created.get(owner["metadata"]["uid"], {}))

    def _delete_pod(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self._deleted[f"{meta['namespace']}/{meta['name']}"] = time.monotonic() + 10
        self._write(f"deleting pod {meta['name']}", self.client.delete, path_of("v1", "pods", meta["namespace"], meta["name"]))

    # --- controllers ---------------------------------------------------------------------------------
    def _deployment(self, d: Obj, owned: list[Obj]) -> None:
        spec, meta = d.get("spec") or {}, d["metadata"]
        if meta.get("deletionTimestamp"):
            return
        wanted = f"{meta['name']}-{template_hash(spec.get('template') or {})}"
        replicas = int(spec.get("replicas", 1))
        current = next((rs for rs in owned if rs["metadata"]["name"] == wanted), None)
        if current is None:
            if not self._still_there(d):
                return                                 # deleted: the cache has not caught up
            template = copy.deepcopy(spec.get("template") or {})
            template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = wanted.rsplit("-", 1)[1]
            body = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": wanted, "namespace": meta["namespace"], "labels": dict(template["metadata"]["labels"]),
                                 "ownerReferences": [owner_ref(d)]},
                    "spec": {"replicas": replicas, "selector": spec.get("selector") or {}, "template": template}}
            self._write(f"creating replicaset {wanted}", self.client.create, path_of("apps/v1", "replicasets", meta["namespace"]), body)
        elif (current.get("spec") or {}).get("replicas") != replicas:
            self._write(f"scaling replicaset {wanted}", self.client.patch,
                        path_of("apps/v1", "replicasets", meta["namespace"], wanted), {"spec": {"replicas": replicas}})
        for rs in owned:
            if rs["metadata"]["name"] != wanted and (rs.get("spec") or {}).get("replicas"):
                self._write(f"scaling down {rs['metadata']['name']}", self.client.patch,
                            path_of("apps/v1", "replicasets", meta["namespace"], rs["metadata"]["name"]), {"spec": {"replicas": 0}})
        self._status(d, "deployments", deployment_status(d, owned, current))

    def _replicas(self, owner: Obj, pods: list[Obj], field: str, *, ordinal: bool) -> None:
        """`pods` are the ones `owner` controls."""
        meta, spec = owner["metadata"], owner.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        plural = _PLURALS[owner["kind"]]
        mine = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        active = [p for p in mine if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        want = int(spec.get(field, 1) if spec.get(field) is not None else 1)
        if owner["kind"] == "Job":
            want = job_wants(owner, mine)
        if ordinal:
            names = {p["metadata"]["name"] for p in active}
            absent = [f"{meta['name']}-{i}" for i in range(want) if f"{meta['name']}-{i}" not in names]
            for name in absent if absent and self._still_there(owner) else []:
                self._create_pod(owner, name)
            for p in active:
                suffix = p["metadata"]["name"].rsplit("-", 1)[-1]
                if not suffix.isdigit() or int(suffix) >= want:
                    self._delete_pod(p)
        else:
            missing = want - len(active) - self._in_flight(owner)
            if missing > 0 and self._still_there(owner):   # side by side, as the ReplicaSet controller's slow-start batches do
                list(self._pool.map(lambda _: self._create_pod(owner, None), range(missing)))
            if len(active) > want:
                # unscheduled first, then not ready, then the newest
                victims = sorted(active, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), ready(p),
                                                       p["metadata"].get("creationTimestamp", "")), reverse=False)
                for p in victims[:len(active) - want]:
                    self._delete_pod(p)
        if owner["kind"] == "Job":
            self._status(owner, plural, job_status(owner, mine))
        else:
            self._status(owner, plural, replica_status(owner, active))

    def _daemonset(self, ds: Obj, pods: list[Obj], nodes: list[Obj]) -> None:
        """`pods` are the ones `ds` controls. Where a daemon pod goes is fit.daemon_placement's answer, the
        DaemonSet controller's rule, not kube-scheduler's: a node that should run one and has none gets one,
        a node that may no longer keep one loses it. Pods of a node that is gone are the kubelets' pod-GC's job."""
        meta, spec = ds["metadata"], ds.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        template_spec = (spec.get("template") or {}).get("spec") or {}
        mine = {(p.get("spec") or {}).get("nodeName"): p for p in pods if not p["metadata"].get("deletionTimestamp")}
        desired = misscheduled = 0
        for node in nodes:
            name = node["metadata"]["name"]
            if node["metadata"].get("deletionTimestamp"):
                continue
            placement = fit.daemon_placement(template_spec, fit.NodeState.of(node))
            desired += placement.should_run
            if name in mine:
                self._on_node.get(meta["uid"], {}).pop(name, None)     # the creation is seen: a later one is news
                misscheduled += not placement.should_run
                if not placement.should_continue:
                    self._delete_pod(mine[name])
            elif placement.should_run and not self._created_on(ds, name):
                self._create_pod(ds, None, node_name=name)
                self._on_node.setdefault(meta["uid"], {})[name] = time.monotonic() + 10
        ready_count = sum(1 for p in mine.values() if ready(p))
        self._status(ds, "daemonsets", {"desiredNumberScheduled": desired, "currentNumberScheduled": len(mine) - misscheduled,
                                        "updatedNumberScheduled": len(mine), "numberReady": ready_count,
                                        "numberAvailable": ready_count, "numberUnavailable": max(0, desired - ready_count),
                                        "numberMisscheduled": misscheduled, "observedGeneration": meta.get("generation", 1)})

    def _created_on(self, ds: Obj, node: str) -> bool:
        return self._on_node.get(ds["metadata"]["uid"], {}).get(node, 0) > time.monotonic()

    def _pdb(self, pdb: Obj, pods: list[Obj], replicasets: list[Obj]) -> None:
        replicas = {rs["metadata"]["uid"]: int((rs.get("spec") or {}).get("replicas", 1)) for rs in replicasets}
        counts = disruption.budget_status(pdb, pods, replicas).as_status()
        self._status(pdb, "poddisruptionbudgets", {**counts, "observedGeneration": pdb["metadata"].get("generation", 1)})

