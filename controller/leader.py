"""Leader election on a coordination.k8s.io Lease, and the fence that keeps a deposed leader from writing.

With several replicas exactly one acts: the one holding the Lease
`karpy-leader-election`. The semantics are client-go's:

- A follower judges expiry by *local observation time*: the monotonic moment
  it last saw the Lease's record change, plus the lease duration. The holder's
  `renewTime` is only written, never compared with the local clock, so clock
  skew between replicas cannot shorten a lease.
- The leader renews every `retry` seconds and leads only until `renew_deadline`
  (2/3 of the lease by default) after the start of its last successful renewal,
  measured on its own monotonic clock. A follower cannot take over before the
  lease duration has passed since it saw that renewal, so the leader stops
  acting `duration - renew_deadline` seconds before anyone else may start.
- `still_leading()` is that deadline check, cheap enough to consult before
  every write. A leader paused (SIGSTOP, a long GC, a frozen VM) and resumed
  finds its deadline behind it on the first check, before it sends anything.
  `FencedClient` and `FencedCloud` consult it for every Kubernetes write and
  every cloud launch or termination, so no loop can write once it is false,
  even in the moment before the election thread notices.
- Losing the Lease calls `on_lost` once; the operator exits non-zero there, as
  controller-runtime does, and the restarted pod campaigns again.

The official client's `kubernetes.leaderelection` was considered and not used:
its renew deadline is counted from the start of each renew attempt rather than
from the last successful renewal (a leader resumed after a pause believes it
leads for another full deadline), it reads wall-clock `time.time()` for every
interval, its `acquire()` loops forever with no way to stop on SIGTERM, and its
`LeaseLock` talks through the client's global default configuration instead of
the ApiClient of the kubeconfig given.

What the fence cannot stop is a write already on the wire, or one paused
between its check and its send; the margin between the renew deadline and the
lease duration is there for those.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket
import sys
import threading
import uuid
from typing import Any, Callable, NoReturn, Sequence

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from karpy.apis.timestamps import rfc3339_micro
from karpy.controller.clock import Clock
from karpy.controller.cloudprovider.types import CloudProvider, Instance, InstanceType, NodeRequest
from karpy.kubeclient.raw import RawClient, path_of

log = logging.getLogger("controller.leader")

LEASE_NAME = "karpy-leader-election"
JITTER = 0.2            # followers spread their attempts over retry * (1 .. 1 + JITTER), as client-go does


class NotLeading(Exception):
    """A write refused because this replica does not hold the Lease, or may no longer count on holding it.

    Not a RuntimeError on purpose: handlers that isolate one failed launch or one bad
    object must not swallow it and carry on writing."""


@dataclasses.dataclass(frozen=True)
class Record:
    """The election record a Lease carries, as far as deciding goes."""

    holder: str
    duration: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, lease: dict[str, Any], *, default_duration: float) -> Record:
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "",
                   duration=float(spec.get("leaseDurationSeconds") or default_duration),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))


@dataclasses.dataclass(frozen=True)
class Observation:
    record: Record
    at: float               # monotonic seconds at which this replica saw `record` first


def observe(previous: Observation | None, record: Record, *, now: float) -> Observation:
    """Pure: an unchanged record keeps the moment it was first seen; a changed one starts the clock again."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def held_by_another(observation: Observation, *, identity: str, now: float) -> bool:
    """Pure: whether someone else holds the lease: named in it, and seen renewing less than a lease ago."""
    holder = observation.record.holder
    return bool(holder) and holder != identity and now < observation.at + observation.record.duration


def leading_at(renewed_at: float | None, *, renew_deadline: float, now: float) -> bool:
    """Pure: a leader leads until `renew_deadline` after the start of its last successful renewal."""
    return renewed_at is not None and now < renewed_at + renew_deadline


def default_identity() -> str:
    """client-go's choice: the host name (the pod's name in a cluster) and a unique suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(self, client: RawClient, clock: Clock, *, namespace: str, name: str = LEASE_NAME,
                 duration: float = 10.0, renew_deadline: float | None = None, retry: float = 2.0,
                 identity: str | None = None, on_lost: Callable[[], None] | None = None) -> None:
        self.renew_deadline = duration * 2 / 3 if renew_deadline is None else renew_deadline
        if not retry < self.renew_deadline < duration:
            raise ValueError(f"leader election needs retry ({retry}) < renew deadline ({self.renew_deadline}) "
                             f"< lease duration ({duration})")
        self.client, self.clock = client, clock
        self.namespace, self.name = namespace, name
        self.duration, self.retry = duration, retry
        self.identity = identity or default_identity()
        self.on_lost = on_lost
        self.leading = threading.Event()
        self._observed: Observation | None = None
        self._renewed_at: float | None = None        # monotonic start of the last successful acquire or renew
        self._lock = threading.Lock()

    @property
    def _path(self) -> str:
        return path_of("coordination.k8s.io/v1", "leases", self.namespace, self.name)

    def still_leading(self) -> bool:
        """Whether this replica may act now: it leads and its renew deadline is ahead. Reads no API."""
        return self.leading.is_set() and leading_at(self._renewed_at, renew_deadline=self.renew_deadline,
                                                    now=self.clock.monotonic())

    def try_acquire(self) -> bool:
        """One attempt to create, renew or take over the Lease. True when this replica holds it now."""
        started = self.clock.monotonic()
        wall = rfc3339_micro(self.clock.now())
        try:
            lease = self.client.request("GET", self._path, timeout=self.renew_deadline)
        except ApiException as e:
            if e.status != 404:
                raise
            record = Record(self.identity, self.duration, wall, wall, 0)
            try:
                self.client.request("POST", path_of("coordination.k8s.io/v1", "leases", self.namespace),
                                    body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                          "metadata": {"name": self.name, "namespace": self.namespace},
                                          "spec": self._spec(record)}, timeout=self.renew_deadline)
            except ApiException as e2:
                if e2.status == 409:            # another replica created it first
                    return False
                raise
            return self._held(record, started)
        self._observed = observe(self._observed, Record.of(lease, default_duration=self.duration),
                                 now=self.clock.monotonic())
        old = self._observed.record
        if held_by_another(self._observed, identity=self.identity, now=self.clock.monotonic()):
            return False
        mine = old.holder == self.identity
        record = Record(self.identity, self.duration, old.acquire_time if mine else wall, wall,
                        old.transitions if mine else old.transitions + 1)
        lease["spec"] = {**(lease.get("spec") or {}), **self._spec(record)}
        try:   # the lease as read, resourceVersion and all: a concurrent writer makes this a 409
            self.client.request("PUT", self._path, body=lease, timeout=self.renew_deadline)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return self._held(record, started)

    def _spec(self, record: Record) -> dict[str, Any]:
        return {"holderIdentity": record.holder, "leaseDurationSeconds": int(record.duration),
                "acquireTime": record.acquire_time, "renewTime": record.renew_time,
                "leaseTransitions": record.transitions}

    def _held(self, record: Record, started: float) -> bool:
        self._observed = Observation(record, started)
        self._renewed_at = started
        return True

    def step(self) -> None:
        """One pass of the election loop. A leader whose renew deadline is behind it (it was paused, or
        renewals failed for too long) stands down before sending anything."""
        if self.leading.is_set() and not self.still_leading():
            self._lose(f"the Lease was not renewed within {self.renew_deadline:.1f}s")
            return
        try:
            acquired = self.try_acquire()
        except Exception as e:  # the election's edge: an unreachable or failing API server is retried
            log.warning("Leader election: renewing lease %s/%s, %s", self.namespace, self.name, e)
            acquired = False
        now = self.clock.monotonic()
        if acquired and not leading_at(self._renewed_at, renew_deadline=self.renew_deadline, now=now):
            acquired = False                    # the renewal itself outlasted the deadline: do not count on it
            if self.leading.is_set():
                self._lose("renewing the Lease took longer than the renew deadline")
                return
        if acquired and not self.leading.is_set():
            log.info("Became leader as %s (lease %s/%s)", self.identity, self.namespace, self.name)
            self.leading.set()
        elif not acquired and self.leading.is_set():
            holder = self._observed.record.holder if self._observed else ""
            if holder and holder != self.identity:
                self._lose(f"the Lease is held by {holder}")
            elif not self.still_leading():
                self._lose(f"the Lease was not renewed within {self.renew_deadline:.1f}s")

    def _lose(self, why: str) -> None:
        with self._lock:
            if not self.leading.is_set():
                return
            self._renewed_at = None
            self.leading.clear()
        log.error("Lost leadership as %s, %s", self.identity, why)
        if self.on_lost is not None:
            self.on_lost()

    def run(self, stop: threading.Event) -> None:
        """Campaign, then renew, until `stop` or until leadership is lost (after which it does not campaign again)."""
        was_leading = False
        while not stop.is_set():
            self.step()
            if was_leading and not self.leading.is_set():
                return
            was_leading = self.leading.is_set()
            stop.wait(self.retry if was_leading else self.retry * (1 + JITTER * random.random()))

    def release(self) -> None:
        """On a clean stop, give the Lease up so a successor need not wait out the lease (client-go's
        ReleaseOnCancel). The fence closes first: nothing this replica still has in flight may write after."""
        if not self.still_leading():
            return
        with self._lock:
            self._renewed_at = None
            self.leading.clear()
        try:
            lease = self.client.request("GET", self._path, timeout=self.retry)
            if ((lease.get("spec") or {}).get("holderIdentity")) != self.identity:
                return
            now = rfc3339_micro(self.clock.now())
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now}
            self.client.request("PUT", self._path, body=lease, timeout=self.retry)
            log.info("Released lease %s/%s", self.namespace, self.name)
        except Exception as e:  # a stop goes on: the lease simply expires
            log.warning("Releasing lease %s/%s, %s", self.namespace, self.name, e)


def exit_process() -> NoReturn:
    """What a replica does once it has lost the Lease: exit at once, non-zero, as controller-runtime does.

    Every thread stops with the process, so nothing half-done carries on; the pod
    restarts and campaigns again with fresh caches."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    os._exit(1)


class FencedClient(RawClient):
    """A RawClient whose writes (every method but GET) go out only while `may_write()` says so."""

    def __init__(self, api_client: ApiClient, may_write: Callable[[], bool]) -> None:
        super().__init__(api_client)
        self.may_write = may_write

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method != "GET" and not self.may_write():
            raise NotLeading(f"not leading: refused {method} {path}")
        return super().request(method, path, **kwargs)


class FencedCloud:
    """A cloud provider whose launches and terminations happen only while `may_act()` says so;
    reads, and anything provider-specific (its catalog, its SQS client), pass straight through."""

    def __init__(self, cloud: CloudProvider, may_act: Callable[[], bool]) -> None:
        self.cloud, self.may_act = cloud, may_act
        self.name = cloud.name

    def _check(self, what: str) -> None:
        if not self.may_act():
            raise NotLeading(f"not leading: refused to {what}")

    def create(self, request: NodeRequest) -> Instance:
        self._check(f"launch node {request.node_name}")
        return self.cloud.create(request)

    def delete(self, provider_id: str) -> None:
        self._check(f"terminate {provider_id}")
        self.cloud.delete(provider_id)

    def get(self, provider_id: str) -> Instance:
        return self.cloud.get(provider_id)

    def list(self) -> Sequence[Instance]:
        return self.cloud.list()

    def instance_types(self, kubelet: object | None = None) -> Sequence[InstanceType]:
        return self.cloud.instance_types(kubelet)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cloud, name)
