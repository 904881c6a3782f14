"""Expiration: delete karpy nodes older than their provisioner's ttlSecondsUntilExpired, or than their NodeClaim's
expireAfter.

A Provisioner's node expires as in v0.16: deleted, then drained gracefully (PDBs respected). A NodePool's node
expires as in v1, forcefully: at its NodeClaim's creationTimestamp plus the claim's spec.expireAfter (stamped
from the NodePool's template at launch; the template's own value for a node without a claim) it is deleted,
whatever budgets or do-not-disrupt say; its terminationGracePeriod bounds the drain (controller/termination/).
Pods that need a node again make provisioning launch a fresh one."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Mapping

from karpy.apis import labels as wk
from karpy.apis.timestamps import parse_time
from karpy.apis.v1.disruption.expiration import expires_at
from karpy.apis.v1.duration import DurationError
from karpy.controller.clock import Clock
from karpy.controller.inflight import is_leaving
from karpy.controller.metrics import count_nodeclaim_disrupted
from karpy.controller.state import ClusterState

log = logging.getLogger("controller.node")


def seconds_left(*, ttl: float | None, created: dt.datetime | None, now: dt.datetime) -> float | None:
    """Pure: seconds until expiry (<= 0: expired), or None when the node never expires."""
    if ttl is None or created is None:
        return None
    return ttl - (now - created).total_seconds()


def claim_seconds_left(claim: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Pure: seconds until a NodeClaim expires (<= 0: expired), None for `Never`. Raises DurationError."""
    created = parse_time(claim["metadata"].get("creationTimestamp"))
    at = expires_at(created_at=created, expire_after=(claim.get("spec") or {}).get("expireAfter") or "Never") \
        if created is not None else None
    return None if at is None else (at - now).total_seconds()


class Expiration:
    def __init__(self, state: ClusterState, clock: Clock) -> None:
        self.state, self.clock = state, clock

    def reconcile(self) -> float | None:
        again: float | None = None
        provisioners = {p.name: p for p in self.state.live_provisioners()}   # once per pass, not once per node
        nodes = [n for n in self.state.nodes.items() if self.state.ours(n) and not is_leaving(n)]
        now = self.clock.now()
        for node in nodes:
            name = node["metadata"]["name"]
            provisioner = provisioners.get(self.state.ours(node) or "")
            ttl = provisioner.spec.ttl_seconds_until_expired if provisioner else None
            claim = self.state.claim_of(name) if (node["metadata"].get("labels") or {}).get(wk.NODEPOOL) else None
            try:
                left = claim_seconds_left(claim, now) if claim is not None else \
                    seconds_left(ttl=ttl, created=parse_time(node["metadata"].get("creationTimestamp")), now=now)
            except DurationError as e:
                log.error("Reading the expireAfter of node %s's claim, %s; it does not expire", name, e)
                continue
            if left is None:
                continue
            if left > 0:
                again = left if again is None else min(again, left)
                continue
            if claim is not None:
                log.info("Deleting expired nodeclaim %s (node %s), expireAfter %s", claim["metadata"]["name"], name,
                         claim["spec"].get("expireAfter"))
            else:
                log.info("Triggering termination for expired node %s after %ds", name, ttl)
            self.state.delete_node(name)
            count_nodeclaim_disrupted(node, "expired")
        return again
