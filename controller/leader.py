"""Leader election on a coordination.k8s.io Lease: with several replicas, exactly one acts.

The holder renews every `retry` seconds; a lease not renewed for `duration`
seconds may be taken over (optimistic concurrency decides races), so a
replacement leads within `duration` + `retry` seconds of a crash.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid

from kubernetes.client.exceptions import ApiException

from karpy.controller.clock import Clock, parse_time
from karpy.kubeclient.raw import RawClient, path_of

log = logging.getLogger("controller.leader")


def _micro(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, client: RawClient, clock: Clock, *, namespace: str, name: str = "karpy-leader-election",
                 duration: float = 10.0, retry: float = 2.0, identity: str | None = None) -> None:
        self.client, self.clock = client, clock
        self.namespace, self.name = namespace, name
        self.duration, self.retry = duration, retry
        self.identity = identity or f"karpy-{uuid.uuid4().hex[:8]}"
        self.leading = threading.Event()

    def try_acquire(self) -> bool:
        """One round: create, renew or take over the lease. Returns whether this replica leads."""
        path = path_of("coordination.k8s.io/v1", "leases", self.namespace)
        now = self.clock.now()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration), "renewTime": _micro(now)}
        try:
            lease = self.client.get(f"{path}/{self.name}")
        except ApiException as e:
            if e.status != 404:
                raise
            try:
                self.client.create(path, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                          "metadata": {"name": self.name, "namespace": self.namespace},
                                          "spec": {**spec, "acquireTime": _micro(now)}})
                return self._became(True)
            except ApiException as e2:
                if e2.status == 409:
                    return self._became(False)
                raise
        held = lease.get("spec") or {}
        renewed = parse_time(held.get("renewTime"))
        expired = renewed is None or (now - renewed).total_seconds() > float(held.get("leaseDurationSeconds") or self.duration)
        if held.get("holderIdentity") != self.identity and not expired:
            return self._became(False)
        if held.get("holderIdentity") != self.identity:
            spec["acquireTime"] = _micro(now)
        lease["spec"] = {**held, **spec}
        try:
            self.client.request("PUT", f"{path}/{self.name}", body=lease)
            return self._became(True)
        except ApiException as e:
            if e.status == 409:
                return self._became(False)
            raise

    def _became(self, leading: bool) -> bool:
        if leading and not self.leading.is_set():
            log.info("Became leader as %s", self.identity)
            self.leading.set()
        elif not leading and self.leading.is_set():
            log.error("Lost leadership as %s", self.identity)
            self.leading.clear()
        return leading

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.try_acquire()
            except (ApiException, OSError) as e:
                log.warning("Leader election: %s", e)
                self._became(False)
            stop.wait(self.retry)
