"""Leader election on a Lease: with two replicas exactly one acts; the other takes over when it stops."""

from __future__ import annotations

import datetime as dt

from karpy.controller.clock import FakeClock
from karpy.controller.leader import LeaderElector
from tests.controller.conftest import Env


def test_one_leader_and_failover_after_the_lease_expires(env: Env) -> None:
    clock = FakeClock(dt.datetime.now(dt.timezone.utc))
    first = LeaderElector(env.client, clock, namespace="default", identity="first", duration=10)
    second = LeaderElector(env.client, clock, namespace="default", identity="second", duration=10)
    assert first.try_acquire() is True
    assert second.try_acquire() is False
    clock.step(5)
    assert first.try_acquire() is True                       # renewed
    clock.step(8)
    assert second.try_acquire() is False                     # renewed 8 s ago: still held
    clock.step(3)                                            # first stopped renewing 11 s ago
    assert second.try_acquire() is True
    assert first.try_acquire() is False
    assert not first.leading.is_set() and second.leading.is_set()
