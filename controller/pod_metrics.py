"""How long pods wait, under Karpenter v1's names: from creation until bound, and until running and ready.

Fed by the pod watch (`PodTimings.on_pod`): a pod seen unbound (or not yet ready) is remembered by uid, and its
wait is observed once, when the watch shows it bound (ready), from the PodScheduled (Ready) condition's
lastTransitionTime; a pod that goes away first is forgotten. Pods already bound or ready when first seen
(say, after a restart) are not observed: their wait did not happen under this process's eyes, as in v1.
`waits` is pure; the class holds the memory and the metrics.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Mapping

from prometheus_client import Histogram, Summary

from karpy.apis.timestamps import parse_time

Obj = dict[str, Any]
# v1's DurationBuckets (controller-runtime's, with longer ones for singleton controllers)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
                    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60, 120, 150,
                    300, 450, 600)
BOUND_SECONDS = Histogram("karpenter_pods_bound_duration_seconds", "The time from pod creation until the pod is bound.",
                          buckets=DURATION_BUCKETS)
# v1 serves a summary with quantiles; Python's client serves a summary's _sum and _count only
STARTUP_SECONDS = Summary("karpenter_pods_startup_duration_seconds", "The time from pod creation until the pod is running.")
REMEMBERED = 100_000          # pods waiting at once that are remembered; past that the oldest are forgotten


@dataclasses.dataclass(frozen=True)
class Waits:
    """What a pod's object says of its waits: seconds from creation until bound and until ready (None: not yet)."""

    bound_seconds: float | None
    ready_seconds: float | None


def _true_since(pod: Mapping[str, Any], kind: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return str(c.get("lastTransitionTime") or "") or None
    return None


def waits(pod: Mapping[str, Any]) -> Waits:
    """Pure: the pod's waits as its conditions tell them (PodScheduled for bound, Ready for started)."""
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    bound, ready = parse_time(_true_since(pod, "PodScheduled")), parse_time(_true_since(pod, "Ready"))
    if created is None:
        return Waits(None, None)
    bound_seconds = max((bound - created).total_seconds(), 0.0) if bound is not None and \
        (pod.get("spec") or {}).get("nodeName") else None
    running = (pod.get("status") or {}).get("phase") == "Running"
    ready_seconds = max((ready - created).total_seconds(), 0.0) if ready is not None and running else None
    return Waits(bound_seconds, ready_seconds)


class PodTimings:
    def __init__(self) -> None:
        self._unbound: dict[str, None] = {}        # uid -> seen unbound (insertion-ordered: oldest first)
        self._unstarted: dict[str, None] = {}      # uid -> seen not yet running and ready
        self._lock = threading.Lock()

    def on_pod(self, kind: str, pod: Obj) -> None:
        """A watch event: remember a pod that waits, observe its wait once it ends, forget a pod that went."""
        uid = pod["metadata"].get("uid")
        if not uid:
            return
        if kind == "DELETED" or pod["metadata"].get("deletionTimestamp") or \
                (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            with self._lock:
                self._unbound.pop(uid, None)
                self._unstarted.pop(uid, None)
            return
        seen = waits(pod)
        with self._lock:
            for memory, seconds, metric in ((self._unbound, seen.bound_seconds, BOUND_SECONDS),
                                            (self._unstarted, seen.ready_seconds, STARTUP_SECONDS)):
                if seconds is None:
                    memory.setdefault(uid, None)
                    while len(memory) > REMEMBERED:
                        memory.pop(next(iter(memory)))
                elif uid in memory:
                    del memory[uid]
                    metric.observe(seconds)
