"""Emptiness: delete karpy nodes that ran no workload for ttlSecondsAfterEmpty.

A NodePool's node (WhenEmpty's consolidateAfter) annotated `karpenter.sh/do-not-disrupt: "true"` (or
v1alpha5's do-not-consolidate) stays past its TTL, as v1's Emptiness method passes over it; and a pass
deletes no more of a NodePool's nodes than its budgets allow for `Empty`.

Draining and terminating belong to controller/termination; this only decides *when*."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.conditions import initialized
from karpy.apis.pods import busy
from karpy.apis.timestamps import parse_time, rfc3339
from karpy.apis.v1.disruption.budgets import PassBudgets
from karpy.apis.v1.disruption.do_not_disrupt import node_hold
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.controller.clock import Clock
from karpy.controller.inflight import is_leaving
from karpy.controller.metrics import count_nodeclaim_disrupted
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.node")
BUDGET_RECHECK_SECONDS = 60.0      # how long a node held past its TTL waits before emptiness looks again


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What reconcile() should do next. decide() computes it; it performs nothing."""

    mark: str | None = None               # write this emptiness timestamp
    unmark: bool = False                  # remove the emptiness timestamp
    delete: bool = False                  # the TTL has run out
    requeue_after: float | None = None    # look again in this many seconds


def decide(*, ttl: float | None, initialized: bool, busy: bool, marked_at: dt.datetime | None, now: dt.datetime) -> Verdict:
    """Pure: same inputs, same verdict; no API call, no clock read, no log line."""
    if ttl is None or not initialized:
        return Verdict()
    if busy:
        return Verdict(unmark=marked_at is not None)
    if marked_at is None:
        return Verdict(mark=rfc3339(now), requeue_after=ttl)
    left = ttl - (now - marked_at).total_seconds()
    return Verdict(delete=True) if left <= 0 else Verdict(requeue_after=left)


class Emptiness:
    def __init__(self, state: ClusterState, clock: Clock) -> None:
        self.state, self.clock = state, clock

    def reconcile(self) -> float | None:
        again: float | None = None
        provisioners = self.state.live_provisioners()
        ttls = {p.name: p.spec.ttl_seconds_after_empty for p in provisioners}   # read once per pass, not per node
        nodes = self.state.nodes.items()
        budgets = PassBudgets({p.name: p.node_pool for p in provisioners if isinstance(p, NodePoolProvisioner)},
                              nodes, self.clock.now(), ("Empty",))
        for node in nodes:
            ttl = self._ttl(node, ttls)
            if ttl is None:
                continue                               # not ours, terminating, or emptiness is off for its provisioner
            wait = self._reconcile_node(node, ttl, budgets)
            if wait is not None:
                again = wait if again is None else min(again, wait)
        return again

    def _ttl(self, node: dict[str, Any], ttls: dict[str, int | None]) -> int | None:
        """The TTL that applies to `node`; None when it is not karpy's or is terminating."""
        owner = self.state.ours(node)
        if owner is None or is_leaving(node):
            return None
        return ttls.get(owner)

    def _reconcile_node(self, node: dict[str, Any], ttl: int, budgets: PassBudgets) -> float | None:
        """Safe to run any number of times, from any state, including after a crash. The node's pods come
        from the cache's by-node index, so a pass costs the pods on TTL'd nodes, not every pod per node."""
        name = node["metadata"]["name"]
        annotations = node["metadata"].get("annotations") or {}
        v = decide(ttl=ttl, initialized=initialized(node), busy=busy(self.state.pods_on(name)),
                   marked_at=parse_time(annotations.get(wk.EMPTINESS_TIMESTAMP)), now=self.clock.now())
        nodepool = (node["metadata"].get("labels") or {}).get(wk.NODEPOOL)
        if v.delete and nodepool:
            held = node_hold(annotations, "Empty") or budgets.take(nodepool, "Empty")
            if held is not None:
                log.debug("Not deleting empty node %s past its TTL: %s", name, held.describe())
                # a budget opens when a node goes or a window ends: look again then, or after a while
                wait = (held.until - self.clock.now()).total_seconds() if held.until else BUDGET_RECHECK_SECONDS
                v = dataclasses.replace(v, delete=False, requeue_after=max(min(wait, BUDGET_RECHECK_SECONDS), 1.0))
        try:
            if v.mark or v.unmark:                     # a null value removes the key
                self.state.client.patch(path_of("v1", "nodes", name=name),
                                        {"metadata": {"annotations": {wk.EMPTINESS_TIMESTAMP: v.mark}}})
                log.info("Added TTL to empty node %s" if v.mark else "Removed emptiness TTL from node %s", name)
            if v.delete:
                log.info("Triggering termination after %ds for empty node %s", ttl, name)
                count_nodeclaim_disrupted(node, "empty", consolidation_policy="WhenEmpty")
                self.state.delete_node(name)
        except ApiException as e:
            if e.status != 404:                        # already gone: the goal is met
                raise
        return v.requeue_after
