"""Node repair (the NodeRepair feature gate): a NodePool's node whose Ready condition has been False or Unknown
for 30 minutes is deleted forcefully, and provisioning launches a replacement for its pods.

Karpenter v1's node health controller: the node's termination time is recorded as now (the
`karpenter.sh/nodeclaim-termination-timestamp` annotation), so termination deletes its pods at once, past
PDBs and do-not-disrupt, instead of waiting on a kubelet that does not answer. Nothing is repaired while
more than 20% of the NodePool's nodes (rounded up, as a PDB's percentage is) are unhealthy: a fault that
wide is the cluster's, and replacing nodes would not fix it; a NodeRepairBlocked event says so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from typing import Any, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.timestamps import parse_time, rfc3339
from karpy.apis.v1.labels import NODECLAIM_TERMINATION_TIMESTAMP
from karpy.controller.clock import Clock
from karpy.controller.metrics import UNKNOWN, KarpenterCounter
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.node.health")
TOLERATION = dt.timedelta(minutes=30)        # the AWS provider's repair policy for Ready False / Unknown
ALLOWED_UNHEALTHY_PERCENT = 20
BLOCKED_REQUEUE_SECONDS = 300.0
UNHEALTHY_DISRUPTED = KarpenterCounter(
    "karpenter_nodeclaims_unhealthy_disrupted_total",
    "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, "
    "the owning nodepool, and the image ID.", ["condition", "nodepool", "capacity_type", "image_id"])


def unhealthy_since(node: Mapping[str, Any]) -> dt.datetime | None:
    """Pure: when `node`'s Ready condition turned False or Unknown (its creation, when the condition names no
    transition), or None when it is Ready (or reports no Ready condition)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") in ("False", "Unknown"):
            return parse_time(condition.get("lastTransitionTime")) or \
                parse_time((node.get("metadata") or {}).get("creationTimestamp"))
    return None


def pool_healthy(nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Pure: at most 20% of `nodes` (rounded up: one of three may be unhealthy) are unhealthy."""
    unhealthy = sum(1 for n in nodes if unhealthy_since(n) is not None)
    return unhealthy <= math.ceil(len(nodes) * ALLOWED_UNHEALTHY_PERCENT / 100)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What to do about one node. decide() computes it; it performs nothing."""

    repair: bool = False
    blocked: str | None = None            # why a due repair waits
    requeue_after: float | None = None


def decide(node: Mapping[str, Any], *, pool_is_healthy: bool, now: dt.datetime) -> Verdict:
    """Pure: repair `node` now, wait for its toleration to run out, or hold off because too much of its NodePool
    is unhealthy (`pool_is_healthy`: pool_healthy of the pool's nodes, counted once per pass)."""
    since = unhealthy_since(node)
    if since is None:
        return Verdict()
    due = since + TOLERATION
    if now < due:
        return Verdict(requeue_after=(due - now).total_seconds())
    if not pool_is_healthy:
        return Verdict(blocked=f"more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the nodepool",
                       requeue_after=BLOCKED_REQUEUE_SECONDS)
    return Verdict(repair=True)


class Repair:
    def __init__(self, state: ClusterState, clock: Clock) -> None:
        self.state, self.clock = state, clock

    def reconcile(self) -> float | None:
        """Repair every NodePool node unhealthy past its toleration; returns when the next one would be due."""
        by_pool: dict[str, list[dict[str, Any]]] = {}
        for node in self.state.nodes.items():
            pool = (node["metadata"].get("labels") or {}).get(wk.NODEPOOL)
            if pool:
                by_pool.setdefault(pool, []).append(node)
        again: float | None = None
        now = self.clock.now()
        for pool, nodes in by_pool.items():
            healthy = pool_healthy(nodes)
            for node in nodes:
                verdict = decide(node, pool_is_healthy=healthy, now=now)
                if verdict.blocked:
                    events.record(self.state.client, node, reason="NodeRepairBlocked", component="karpy",
                                  event_type="Warning", message=verdict.blocked)
                if verdict.repair:
                    self._repair(node, pool, now)
                if verdict.requeue_after is not None:
                    again = verdict.requeue_after if again is None else min(again, verdict.requeue_after)
        return again

    def _repair(self, node: Mapping[str, Any], pool: str, now: dt.datetime) -> None:
        """Record the termination time as now (a node already being deleted has its drain cut short too), then delete."""
        meta = node["metadata"]
        name = meta["name"]
        path = path_of("v1", "nodes", name=name)
        recorded = parse_time((meta.get("annotations") or {}).get(NODECLAIM_TERMINATION_TIMESTAMP))
        try:
            # the termination time first: a crash between the two writes leaves a node the next pass deletes
            if recorded is None or recorded > now:
                self.state.client.patch(path, {"metadata": {"annotations": {NODECLAIM_TERMINATION_TIMESTAMP: rfc3339(now)}}})
            if meta.get("deletionTimestamp"):
                return
            self.state.client.delete(path)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        labels = node["metadata"].get("labels") or {}
        UNHEALTHY_DISRUPTED.inc("ready", pool, labels.get(wk.CAPACITY_TYPE, UNKNOWN), UNKNOWN)
        log.info("Deleting unhealthy node %s (Ready has not been True for %s)", name, TOLERATION)
