"""Termination: a karpy node being deleted is cordoned, drained through the Eviction API, its
instance terminated, and only then is the `karpenter.sh/termination` finalizer removed.

Each step is safe to repeat after a crash: cordoning sets a value, evictions
of gone pods are 404s, a terminated instance answers InstanceNotFound. Pods
are evicted, never deleted, so PodDisruptionBudgets hold (a 429 means wait);
daemonset and mirror pods are left to go with the node; a pod annotated
`karpenter.sh/do-not-evict` holds the node until it is gone.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from karpy.apis import labels as wk
from karpy.apis.pods import evictable, object_key
from karpy.controller.cloudprovider.types import CloudProvider, InstanceNotFound
from karpy.controller.metrics import NODES_TERMINATED
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.termination")
EVICTIONS = Counter("karpy_evictions_total", "Evictions requested while draining", ["result"])


def termination_reason(node: dict[str, Any]) -> str:
    """Pure: why a node went, as far as the node itself tells: emptiness marks it before deleting it."""
    annotations = node["metadata"].get("annotations") or {}
    return "emptiness" if annotations.get(wk.EMPTINESS_TIMESTAMP) else "deletion"


@dataclasses.dataclass(frozen=True)
class DrainPlan:
    """What draining a node needs now. Computed by `plan_drain`; performs nothing."""

    evict: tuple[dict[str, Any], ...]        # pods to ask to leave
    waiting: int                             # pods still on their way out
    blocked_by: str | None                   # a do-not-evict pod holding the node


def plan_drain(pods: list[dict[str, Any]]) -> DrainPlan:
    """Pure: which pods to evict, how many are still leaving, and what blocks the drain."""
    candidates = [p for p in pods if evictable(p)]
    for p in candidates:
        if (p["metadata"].get("annotations") or {}).get(wk.DO_NOT_EVICT) == "true":
            return DrainPlan((), len(candidates), object_key(p))
    leaving = [p for p in candidates if p["metadata"].get("deletionTimestamp")]
    return DrainPlan(tuple(p for p in candidates if not p["metadata"].get("deletionTimestamp")), len(leaving), None)


class Terminator:
    def __init__(self, state: ClusterState, cloud: CloudProvider) -> None:
        self.state, self.cloud = state, cloud
        self._announced: set[str] = set()

    def reconcile(self) -> float | None:
        """Advance every deleting karpy node one step; returns when to look again."""
        again: float | None = None
        for node in self.state.nodes.items():
            meta = node["metadata"]
            if meta.get("deletionTimestamp") and wk.TERMINATION_FINALIZER in (meta.get("finalizers") or []):
                wait = self._terminate(node)
                if wait is not None:
                    again = wait if again is None else min(again, wait)
        return again

    def _terminate(self, node: dict[str, Any]) -> float | None:
        name = node["metadata"]["name"]
        client = self.state.client
        try:
            # 1. cordon, so nothing new lands here
            if not (node.get("spec") or {}).get("unschedulable"):
                client.patch(path_of("v1", "nodes", name=name), {"spec": {"unschedulable": True}})
                log.info("Cordoned node %s", name)
            # 2. drain through the Eviction API
            plan = plan_drain(self.state.pods_on(name))
            if plan.blocked_by:
                if name not in self._announced:
                    log.info("Cannot drain node %s, pod %s has %s", name, plan.blocked_by, wk.DO_NOT_EVICT)
                    events.record(client, node, reason="FailedDraining", component="karpy", event_type="Warning",
                                  message=f"pod {plan.blocked_by} has {wk.DO_NOT_EVICT}")
                    self._announced.add(name)
                return 5.0
            for pod in plan.evict:
                self._evict(pod)
            if plan.evict or plan.waiting:
                return 1.0
            # 3. terminate the instance; the finalizer stays until the provider says it is gone
            provider_id = (node.get("spec") or {}).get("providerID")
            if provider_id:
                try:
                    self.cloud.delete(provider_id)
                    return 0.5
                except InstanceNotFound:
                    pass
            # 4. let the node go
            finalizers = [f for f in node["metadata"].get("finalizers") or [] if f != wk.TERMINATION_FINALIZER]
            client.patch(path_of("v1", "nodes", name=name),
                         [{"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]},
                          {"op": "replace", "path": "/metadata/finalizers", "value": finalizers}], "application/json-patch+json")
            NODES_TERMINATED.inc(termination_reason(node), self.state.ours(node) or "")
            self._announced.discard(name)
            log.info("Deleted node %s", name)
            return None
        except ApiException as e:
            if e.status == 404:
                return None                     # already gone: the goal is met
            if e.status in (409, 422):
                return 0.2                      # the node changed under us: look again
            raise

    def _evict(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        try:
            self.state.client.create(path_of("v1", "pods", meta["namespace"], meta["name"], "eviction"), body)
            EVICTIONS.labels("evicted").inc()
        except ApiException as e:
            if e.status == 429:
                EVICTIONS.labels("blocked").inc()   # a PodDisruptionBudget says wait; retried on the next pass
            elif e.status == 500:
                # e.g. a pod under two budgets, which the Eviction API refuses; the pod stays (never
                # deleted past its budgets), the node's other pods still go, and the next pass retries
                EVICTIONS.labels("failed").inc()
                log.error("Failed to evict pod %s/%s, %s", meta["namespace"], meta["name"], e.reason)
            elif e.status != 404:
                raise
