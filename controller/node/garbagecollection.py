"""Garbage collection: terminate cloud instances no Node accounts for.

An instance launched just before a crash, whose Node was never made (or was
removed by hand), would run and cost forever. After a grace period for
launches in flight, any instance of this cluster whose node name has no
Node is terminated.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from karpy.controller.cloudprovider.types import CloudProvider, InstanceNotFound
from karpy.controller.state import ClusterState

log = logging.getLogger("controller.node")
LAUNCH_GRACE_SECONDS = 60.0


def orphans(instances: dict[str, str], node_names: set[str], first_seen: dict[str, float], now: float) -> list[str]:
    """Pure: provider ids of instances (id -> node name) without a Node for longer than the grace period."""
    return [pid for pid, name in instances.items() if name not in node_names and now - first_seen.get(pid, now) >= LAUNCH_GRACE_SECONDS]


class GarbageCollection:
    def __init__(self, state: ClusterState, cloud: CloudProvider, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.state, self.cloud, self.monotonic = state, cloud, monotonic
        self._first_seen: dict[str, float] = {}

    def reconcile(self) -> float | None:
        now = self.monotonic()
        instances = {i.provider_id: i.node_name for i in self.cloud.list()}
        names = {n["metadata"]["name"] for n in self.state.nodes.items()}
        for pid, name in instances.items():
            if name not in names:
                self._first_seen.setdefault(pid, now)
        self._first_seen = {pid: t for pid, t in self._first_seen.items() if pid in instances and instances[pid] not in names}
        for pid in orphans(instances, names, self._first_seen, now):
            log.info("Garbage collecting instance %s, which no node accounts for", pid)
            try:
                self.cloud.delete(pid)
            except InstanceNotFound:
                pass
            self._first_seen.pop(pid, None)
        return LAUNCH_GRACE_SECONDS if self._first_seen else None
