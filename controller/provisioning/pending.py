"""Which pods wait for capacity: the test, and an index of them kept by the watch.

A batch asks "which pods wait for capacity?" once; with tens of thousands of
pods in the cache, filtering all of them per batch costs more than the answer.
`PendingIndex` is told every pod and capacity-gap event as the informers see
it and keeps the set of provisionable pods up to date, by name and by uid, so
a batch takes its own pods (by the uids the batcher gathered) in time
proportional to the pods that wait. It holds references to the cached
objects, never copies, and each waiting pod's scheduling record (PodInfo),
read as the pod comes to wait (and reread as its status changes), so a batch
of thousands does not parse its pods after it closes.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from karpy.apis.conditions import unschedulable
from karpy.apis.pods import owned_by_daemonset
from karpy.controller.provisioning.scheduling.pods import PodInfo

Obj = dict[str, Any]
Key = tuple[str, str]


def is_provisionable(pod: Obj, gap_reported: bool = False) -> bool:
    """Pending, unbound, not terminating, and marked Unschedulable by kube-scheduler (or reported as a capacity
    gap by the scheduler extender, which is sooner)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp") or status.get("phase", "Pending") != "Pending":
        return False
    if owned_by_daemonset(pod):
        return False
    return gap_reported or unschedulable(pod) is not None


def key_of(obj: Obj) -> Key:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


class PendingIndex:
    """The provisionable pods, kept by `on_pod` and `on_gap_report` (informer handlers).

    `lookup` reads a pod as the pod cache holds it now: each event re-decides its pod from the cache's current
    version under one lock, so two informer threads telling of the same pod in either order leave the answer
    the cache's latest version gives."""

    def __init__(self, lookup: Callable[[str, str], Obj | None]) -> None:
        self._lookup = lookup
        self._lock = threading.Lock()
        self._pods: dict[Key, Obj] = {}
        self._keys: dict[str, Key] = {}          # uid -> the name its pod is indexed under
        self._gaps: dict[Key, str] = {}          # capacity-gap event -> the uid of the pod it reports
        self._gap_counts: dict[str, int] = {}     # pod uid -> how many gap events report it
        self._records: dict[str, PodInfo] = {}    # uid -> the waiting pod's record (see record)

    def pods(self) -> list[Obj]:
        with self._lock:
            return list(self._pods.values())

    def by_uid(self, uids: Iterable[str]) -> list[Obj]:
        """The pods of `uids` that still wait (a pod bound, deleted or replaced meanwhile is left out)."""
        with self._lock:
            return [self._pods[key] for uid in uids if (key := self._keys.get(uid)) is not None]

    def record(self, uid: str) -> PodInfo | None:
        """The record of waiting pod `uid`, read when the watch last told of it; None when it has none (a pod
        with pod (anti-)affinity reads the namespaces' labels, so it is read with the batch; a pod that could
        not be read is read again there, to report why)."""
        with self._lock:
            return self._records.get(uid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def on_pod(self, kind: str, pod: Obj) -> None:
        with self._lock:
            self._decide(key_of(pod))

    def on_gap_report(self, kind: str, event: Obj) -> None:
        involved = event.get("involvedObject") or {}
        key, uid = key_of(event), involved.get("uid")
        with self._lock:
            before = self._gaps.pop(key, None)
            if before is not None:
                self._count(before, -1)
            if kind != "DELETED" and uid:
                self._gaps[key] = uid
                self._count(uid, +1)
            if involved.get("name"):
                self._decide((involved.get("namespace") or "", involved["name"]))

    def _count(self, uid: str, change: int) -> None:
        left = self._gap_counts.get(uid, 0) + change
        if left > 0:
            self._gap_counts[uid] = left
        else:
            self._gap_counts.pop(uid, None)

    def _decide(self, key: Key) -> None:
        pod = self._lookup(*key)
        before = self._pods.pop(key, None)
        record = None
        if before is not None:
            self._keys.pop(before["metadata"].get("uid") or "", None)
            record = self._records.pop(before["metadata"].get("uid") or "", None)
        if pod is not None and is_provisionable(pod, pod["metadata"].get("uid") in self._gap_counts):
            self._pods[key] = pod
            if uid := pod["metadata"].get("uid"):
                self._keys[uid] = key
                record = record.reread(pod) if record is not None and record.uid == uid else None
                if record is None:
                    record = _read(pod)
                if record is not None:
                    self._records[uid] = record


def _read(pod: Obj) -> PodInfo | None:
    """`pod`'s record, or None when it reads the namespaces' labels (pod affinity) or cannot be read."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    if not isinstance(affinity, dict) or affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
        return None
    try:
        return PodInfo.parse(pod)
    except Exception:  # read again with the batch, which reports why
        return None
