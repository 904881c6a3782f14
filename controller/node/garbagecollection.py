"""Garbage collection: terminate cloud instances no NodeClaim or Node accounts for, and give up on claims whose
instance never registered.

An instance launched just before a crash whose claim was then removed, or a
Node deleted by hand without its instance, would run and cost forever. After
a grace period for launches in flight (a claim is written before the cloud
call, but the provider's tag and the claim's status come after it), any
instance of this cluster whose claim and Node are both missing is
terminated. A claim whose Node never became Ready within the registration
timeout (Karpenter's is 15 minutes) is deleted: the launch module's
finalizer then deletes its Node and terminates its instance.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any, Callable

from karpy.apis import launch_record as rec
from karpy.apis.conditions import ready
from karpy.apis.timestamps import parse_time
from karpy.controller.cloudprovider.types import CloudProvider, Instance, InstanceNotFound
from karpy.controller.launch.launcher import Launcher
from karpy.controller.metrics import count_nodeclaim_disrupted
from karpy.controller.state import ClusterState

log = logging.getLogger("controller.node")
LAUNCH_GRACE_SECONDS = 60.0
REGISTRATION_TIMEOUT_SECONDS = 15 * 60.0


def orphans(instances: list[Instance], *, claims: set[str], provider_ids: set[str], node_names: set[str],
            first_seen: dict[str, float], now: float, grace_seconds: float = LAUNCH_GRACE_SECONDS) -> list[str]:
    """Pure: provider ids of instances that neither a claim (by name or recorded providerID) nor a Node accounts
    for, unaccounted for longer than the grace period."""
    return [i.provider_id for i in instances
            if not accounted(i, claims=claims, provider_ids=provider_ids, node_names=node_names)
            and now - first_seen.get(i.provider_id, now) >= grace_seconds]


def accounted(i: Instance, *, claims: set[str], provider_ids: set[str], node_names: set[str]) -> bool:
    return i.provider_id in provider_ids or (bool(i.claim_name) and i.claim_name in claims) or i.node_name in node_names


def unregistered(claim: dict[str, Any], *, node: dict[str, Any] | None, now: dt.datetime, timeout_seconds: float) -> bool:
    """Pure: the claim is older than the registration timeout and its Node never became Ready."""
    if claim["metadata"].get("deletionTimestamp") or (node is not None and (ready(node) or node["metadata"].get("deletionTimestamp"))):
        return False
    created = parse_time(claim["metadata"].get("creationTimestamp"))
    return created is not None and (now - created).total_seconds() >= timeout_seconds


class GarbageCollection:
    def __init__(self, state: ClusterState, cloud: CloudProvider, launcher: Launcher, *,
                 monotonic: Callable[[], float] = time.monotonic,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                 grace_seconds: float = LAUNCH_GRACE_SECONDS,
                 registration_timeout_seconds: float = REGISTRATION_TIMEOUT_SECONDS) -> None:
        self.state, self.cloud, self.launcher = state, cloud, launcher
        self.monotonic, self.now = monotonic, now
        self.grace_seconds, self.registration_timeout_seconds = grace_seconds, registration_timeout_seconds
        self._first_seen: dict[str, float] = {}

    def reconcile(self) -> float | None:
        claims = self.launcher.claims()
        self._give_up_unregistered(claims)
        return self._collect_instances(claims)

    def _give_up_unregistered(self, claims: list[dict[str, Any]]) -> None:
        now = self.now()
        for claim in claims:
            node_name = rec.node_name(claim)
            node = self.state.nodes.get("", node_name) if node_name else None
            if unregistered(claim, node=node, now=now, timeout_seconds=self.registration_timeout_seconds):
                log.info("Deleting %s, whose node did not register within %ds", claim["metadata"]["name"],
                         self.registration_timeout_seconds)
                self.launcher.delete_claim(claim["metadata"]["name"])
                count_nodeclaim_disrupted(claim, "registration_timeout")

    def _collect_instances(self, claims: list[dict[str, Any]]) -> float | None:
        now = self.monotonic()
        instances = list(self.cloud.list())
        names = {c["metadata"]["name"] for c in claims}
        ids = {pid for c in claims if (pid := (c.get("status") or {}).get("providerID")) is not None}
        nodes = self.state.nodes.items()
        ids |= {pid for n in nodes if (pid := (n.get("spec") or {}).get("providerID")) is not None}
        node_names = {n["metadata"]["name"] for n in nodes}
        loose = {i.provider_id for i in instances if not accounted(i, claims=names, provider_ids=ids, node_names=node_names)}
        self._first_seen = {pid: self._first_seen.get(pid, now) for pid in loose}
        for pid in orphans(instances, claims=names, provider_ids=ids, node_names=node_names, first_seen=self._first_seen,
                           now=now, grace_seconds=self.grace_seconds):
            log.info("Garbage collecting instance %s, which no node claim or node accounts for", pid)
            try:
                self.cloud.delete(pid)
            except InstanceNotFound:
                pass
            self._first_seen.pop(pid, None)
        return self.grace_seconds if self._first_seen else None
