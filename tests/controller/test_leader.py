"""Leader election on a Lease: one leader; expiry judged by when a replica saw the lease change, not by the
holder's clock; a leader past its renew deadline stands down before writing anything; a fenced client
writes nothing once leadership may be gone."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from karpy.controller.clock import FakeClock
from karpy.controller.leader import (
    FencedClient,
    LeaderElector,
    NotLeading,
    Observation,
    Record,
    held_by_another,
    leading_at,
    observe,
)
from karpy.kubeclient.raw import path_of
from tests.builders import pod
from tests.controller.conftest import Env

pytestmark = pytest.mark.slow      # starts the local cluster

LEASE = path_of("coordination.k8s.io/v1", "leases", "default", "karpy-leader-election")
RECORD = Record("first", 10, "2024-01-01T00:00:00.000000Z", "2024-01-01T00:00:00.000000Z", 0)


def clocks(*skews: float) -> list[FakeClock]:
    """Clocks of replicas whose wall time differs by `skews` seconds; their monotonic clocks advance together."""
    base = dt.datetime.now(dt.timezone.utc)
    return [FakeClock(base + dt.timedelta(seconds=s)) for s in skews]


def step(seconds: float, *cs: FakeClock) -> None:
    for c in cs:
        c.step(seconds)


def test_an_unchanged_record_keeps_the_moment_it_was_first_seen() -> None:
    seen = observe(None, RECORD, now=100.0)
    assert observe(seen, RECORD, now=105.0) == Observation(RECORD, 100.0)
    renewed = Record("first", 10, RECORD.acquire_time, "2024-01-01T00:00:02.000000Z", 0)
    assert observe(seen, renewed, now=105.0) == Observation(renewed, 105.0)


@pytest.mark.parametrize(("identity", "now", "held"), [
    pytest.param("second", 109.9, True, id="another-holder-seen-renewing-within-a-lease"),
    pytest.param("second", 110.0, False, id="another-holder-silent-for-a-lease"),
    pytest.param("first", 105.0, False, id="held-by-me"),
])
def test_held_by_another_counts_from_local_observation(identity: str, now: float, held: bool) -> None:
    assert held_by_another(Observation(RECORD, 100.0), identity=identity, now=now) is held


def test_an_empty_holder_is_free_at_once() -> None:
    released = dataclasses.replace(RECORD, holder="")
    assert held_by_another(Observation(released, 100.0), identity="second", now=100.0) is False


@pytest.mark.parametrize(("renewed_at", "now", "leading"), [
    pytest.param(100.0, 106.9, True, id="before-the-deadline"),
    pytest.param(100.0, 107.0, False, id="at-the-deadline"),
    pytest.param(None, 100.0, False, id="never-renewed"),
])
def test_leading_ends_at_the_renew_deadline(renewed_at: float | None, now: float, leading: bool) -> None:
    assert leading_at(renewed_at, renew_deadline=7.0, now=now) is leading


def test_one_leader_and_failover_after_the_lease_expires(env: Env) -> None:
    a, b = clocks(0, 0)
    first = LeaderElector(env.client, a, namespace="default", identity="first", duration=10)
    second = LeaderElector(env.client, b, namespace="default", identity="second", duration=10)
    first.step()
    second.step()
    assert first.still_leading() and not second.still_leading()
    step(5, a, b)
    first.step()                                               # renewed
    step(1, a, b)
    second.step()                                              # sees the renewal now
    step(8, a, b)
    second.step()
    assert not second.still_leading()                          # seen renewing 8 s ago: still held
    step(2.5, a, b)                                            # first silent for 10.5 s since second saw it
    second.step()
    assert second.still_leading()
    assert env.client.get(LEASE)["spec"]["holderIdentity"] == "second"
    assert env.client.get(LEASE)["spec"]["leaseTransitions"] == 1


def test_a_renew_time_from_a_skewed_clock_does_not_shorten_the_lease(env: Env) -> None:
    behind, follower_clock = clocks(-60, 0)                    # the leader's wall clock runs a minute slow
    leader = LeaderElector(env.client, behind, namespace="default", identity="slow-clock", duration=10)
    follower = LeaderElector(env.client, follower_clock, namespace="default", identity="follower", duration=10)
    leader.step()
    follower.step()
    step(5, behind, follower_clock)
    follower.step()                                            # renewTime is 65 s old by its clock, seen 5 s ago
    assert not follower.still_leading()
    assert env.client.get(LEASE)["spec"]["holderIdentity"] == "slow-clock"
    step(5.5, behind, follower_clock)
    follower.step()
    assert follower.still_leading()


def test_a_leader_past_its_renew_deadline_stands_down_without_writing(env: Env) -> None:
    (clock,) = clocks(0)
    lost: list[str] = []
    leader = LeaderElector(env.client, clock, namespace="default", identity="paused", duration=10,
                           on_lost=lambda: lost.append("lost"))
    leader.step()
    assert leader.still_leading()
    version = env.client.get(LEASE)["metadata"]["resourceVersion"]
    clock.step(7)                                              # "paused" past 2/3 of the lease since its renewal
    assert not leader.still_leading()                          # the fence closes before the thread notices
    leader.step()
    assert lost == ["lost"] and not leader.leading.is_set()
    assert env.client.get(LEASE)["metadata"]["resourceVersion"] == version     # it did not renew on resume


def test_a_fenced_client_writes_only_while_leading(env: Env) -> None:
    (clock,) = clocks(0)
    elector = LeaderElector(env.client, clock, namespace="default", identity="writer", duration=10)
    fenced = FencedClient(env.kube.api_client, elector.still_leading)
    pods = path_of("v1", "pods", "default")
    with pytest.raises(NotLeading):
        fenced.create(pods, pod("before-leading"))
    elector.step()
    fenced.create(pods, pod("while-leading"))
    clock.step(7)
    with pytest.raises(NotLeading):
        fenced.create(pods, pod("after-the-deadline"))
    assert fenced.get(path_of("v1", "pods", "default", "while-leading"))["metadata"]["name"] == "while-leading"
    names = [p["metadata"]["name"] for p in env.client.get(pods)["items"]]
    assert "before-leading" not in names and "after-the-deadline" not in names


def test_a_released_lease_is_taken_over_at_once(env: Env) -> None:
    a, b = clocks(0, 0)
    first = LeaderElector(env.client, a, namespace="default", identity="first", duration=10)
    second = LeaderElector(env.client, b, namespace="default", identity="second", duration=10)
    first.step()
    second.step()
    first.release()
    assert not first.still_leading()
    second.step()
    assert second.still_leading()
