"""Expiration: delete karpy nodes older than their provisioner's ttlSecondsUntilExpired.

Termination drains them (PDBs respected) and terminates the instance; pods
that need a node again make provisioning launch a fresh one."""

from __future__ import annotations

import datetime as dt
import logging

from karpy.apis.timestamps import parse_time
from karpy.controller.clock import Clock
from karpy.controller.metrics import count_nodeclaim_disrupted
from karpy.controller.state import ClusterState

log = logging.getLogger("controller.node")


def seconds_left(*, ttl: float | None, created: dt.datetime | None, now: dt.datetime) -> float | None:
    """Pure: seconds until expiry (<= 0: expired), or None when the node never expires."""
    if ttl is None or created is None:
        return None
    return ttl - (now - created).total_seconds()


class Expiration:
    def __init__(self, state: ClusterState, clock: Clock) -> None:
        self.state, self.clock = state, clock

    def reconcile(self) -> float | None:
        again: float | None = None
        provisioners = {p.name: p for p in self.state.live_provisioners()}   # once per pass, not once per node
        for node in self.state.nodes.items():
            owner = self.state.ours(node)
            if owner is None or node["metadata"].get("deletionTimestamp"):
                continue
            provisioner = provisioners.get(owner)
            ttl = provisioner.spec.ttl_seconds_until_expired if provisioner else None
            left = seconds_left(ttl=ttl, created=parse_time(node["metadata"].get("creationTimestamp")), now=self.clock.now())
            if left is None:
                continue
            if left > 0:
                again = left if again is None else min(again, left)
                continue
            name = node["metadata"]["name"]
            log.info("Triggering termination for expired node %s after %ds", name, ttl)
            self.state.delete_node(name)
            count_nodeclaim_disrupted(node, "expired")
        return again
