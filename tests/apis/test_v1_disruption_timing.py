"""Go durations, consolidateAfter and the Consolidatable condition (ported from Karpenter v1's
nodeclaim/disruption consolidation suite), and expiry with a terminationGracePeriod (its
termination suite's force-delete rules), over frozen times."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from karpy.apis.v1.disruption.consolidatable import condition_change, consolidatability, nodeclaim_consolidatability
from karpy.apis.v1.disruption.expiration import (
    PodDrainStep,
    expired,
    expires_at,
    forced_grace_period_seconds,
    needs_force_delete,
    nodeclaim_expires_at,
    nodeclaim_termination_time,
    pod_delete_at,
    pod_drain_step,
    termination_time,
)
from karpy.apis.v1.duration import DurationError, parse_duration, parse_nillable_duration
from karpy.apis.v1.nodeclaim import NodeClaim
from karpy.apis.v1.nodepool import NodePool
from tests.simulator.test_v1_validation import nodeclaim, nodepool

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def minutes(n: float) -> dt.timedelta:
    return dt.timedelta(minutes=n)


# Go durations


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("0", dt.timedelta(0), id="bare-zero"),
    pytest.param("0s", dt.timedelta(0), id="zero-seconds"),
    pytest.param("30s", dt.timedelta(seconds=30), id="seconds"),
    pytest.param("720h", dt.timedelta(hours=720), id="expire-default"),
    pytest.param("1h30m", dt.timedelta(minutes=90), id="compound"),
    pytest.param("1.5h", dt.timedelta(minutes=90), id="fraction"),
    pytest.param("2h0m0s", dt.timedelta(hours=2), id="go-printed"),
    pytest.param("300ms", dt.timedelta(milliseconds=300), id="milliseconds"),
    pytest.param("1500us", dt.timedelta(microseconds=1500), id="microseconds"),
    pytest.param("-5m", -dt.timedelta(minutes=5), id="negative"),
])
def test_go_durations_read_as_go_reads_them(text: str, expected: dt.timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "1d", "h", "1h 30m", "invalid-format", "1..5h", ".", "Never"])
def test_what_go_rejects_is_rejected_with_the_value_named(text: str) -> None:
    with pytest.raises(DurationError, match=f'invalid duration "{text}"'):
        parse_duration(text)


def test_never_is_no_duration() -> None:
    assert parse_nillable_duration("Never") is None
    assert parse_nillable_duration("10m") == minutes(10)


# consolidateAfter


INITIALIZED = NOW - dt.timedelta(hours=1)


def test_consolidatable_once_consolidate_after_has_passed_since_the_last_pod_event() -> None:
    before = consolidatability(consolidate_after="30s", initialized_at=INITIALIZED, last_pod_event_time=NOW, now=NOW)
    assert (before.consolidatable, before.at, before.requeue_after_seconds(NOW)) == (
        False, NOW + dt.timedelta(seconds=30), 30.0)
    later = NOW + minutes(1)
    after = consolidatability(consolidate_after="30s", initialized_at=INITIALIZED, last_pod_event_time=NOW, now=later)
    assert (after.consolidatable, after.requeue_after_seconds(later)) == (True, None)


def test_without_pod_events_the_clock_starts_at_initialization() -> None:
    at_init = consolidatability(consolidate_after="30s", initialized_at=NOW, last_pod_event_time=None, now=NOW)
    assert (at_init.consolidatable, at_init.at) == (False, NOW + dt.timedelta(seconds=30))
    assert consolidatability(consolidate_after="30s", initialized_at=NOW, last_pod_event_time=None,
                             now=NOW + minutes(1)).consolidatable


def test_a_recent_pod_event_takes_the_condition_away() -> None:
    verdict = consolidatability(consolidate_after="10m", initialized_at=INITIALIZED,
                                last_pod_event_time=NOW - minutes(4), now=NOW)
    assert (verdict.consolidatable, verdict.at) == (False, NOW + minutes(6))
    assert "consolidateAfter 10m not yet elapsed" in verdict.why


def test_exactly_consolidate_after_later_is_consolidatable() -> None:
    assert consolidatability(consolidate_after="10m", initialized_at=INITIALIZED,
                             last_pod_event_time=NOW - minutes(10), now=NOW).consolidatable


def test_never_disables_consolidation() -> None:
    verdict = consolidatability(consolidate_after="Never", initialized_at=INITIALIZED, last_pod_event_time=None, now=NOW)
    assert (verdict.consolidatable, verdict.at, verdict.requeue_after_seconds(NOW)) == (False, None, None)
    assert verdict.why == "consolidation is disabled (consolidateAfter: Never)"


def test_an_uninitialized_nodeclaim_is_not_consolidatable() -> None:
    verdict = consolidatability(consolidate_after="0s", initialized_at=None, last_pod_event_time=None, now=NOW)
    assert (verdict.consolidatable, verdict.why) == (False, "nodeclaim isn't initialized")


def test_zero_consolidate_after_is_consolidatable_at_once() -> None:
    assert consolidatability(consolidate_after="0s", initialized_at=NOW, last_pod_event_time=NOW, now=NOW).consolidatable


# expireAfter


def test_a_nodeclaim_expires_expire_after_past_its_creation() -> None:
    created = NOW - dt.timedelta(hours=720)
    assert expires_at(created_at=created, expire_after="720h") == NOW
    assert expired(created_at=created, expire_after="720h", now=NOW - dt.timedelta(seconds=1)) is False
    assert expired(created_at=created, expire_after="720h", now=NOW) is True


def test_never_does_not_expire() -> None:
    assert expires_at(created_at=NOW, expire_after="Never") is None
    assert expired(created_at=NOW - dt.timedelta(days=3650), expire_after="Never", now=NOW) is False


# terminationGracePeriod


DELETED = NOW - minutes(10)


def pod(*, grace: int | None = 30, deleting: dt.datetime | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": "web-1", "namespace": "default"}
    if deleting is not None:
        meta["deletionTimestamp"] = deleting.strftime("%Y-%m-%dT%H:%M:%SZ")
    spec: dict[str, object] = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def test_the_termination_time_is_the_deletion_plus_the_grace_period_to_the_second() -> None:
    assert termination_time(deletion_timestamp=DELETED, termination_grace_period="1h") == DELETED + dt.timedelta(hours=1)
    assert termination_time(deletion_timestamp=DELETED, termination_grace_period="90.5s") == DELETED + minutes(1.5)
    assert termination_time(deletion_timestamp=DELETED, termination_grace_period=None) is None


def test_a_pod_is_deleted_once_its_grace_period_would_outlast_the_deadline() -> None:
    deadline = NOW + dt.timedelta(seconds=300)
    long_grace = pod(grace=600)                      # delete-at was 5 minutes ago
    assert pod_delete_at(long_grace, deadline) == NOW - dt.timedelta(seconds=300)
    assert needs_force_delete(long_grace, deadline=deadline, now=NOW) is True
    assert pod_drain_step(long_grace, deadline=deadline, now=NOW) == PodDrainStep("delete", grace_period_seconds=300)


def test_a_pod_with_time_left_is_evicted_and_told_when_it_would_be_deleted() -> None:
    deadline = NOW + dt.timedelta(seconds=300)
    assert pod_drain_step(pod(grace=30), deadline=deadline, now=NOW) == PodDrainStep(
        "evict", force_at=NOW + dt.timedelta(seconds=270))


def test_at_the_delete_at_moment_itself_the_pod_is_still_evicted() -> None:
    deadline = NOW + dt.timedelta(seconds=30)
    assert needs_force_delete(pod(grace=30), deadline=deadline, now=NOW) is False
    assert needs_force_delete(pod(grace=30), deadline=deadline, now=NOW + dt.timedelta(microseconds=1)) is True


def test_a_terminating_pod_is_deleted_again_when_its_deletion_ends_after_the_deadline() -> None:
    deadline = NOW + minutes(1)
    assert needs_force_delete(pod(deleting=NOW + minutes(2)), deadline=deadline, now=NOW) is True
    assert needs_force_delete(pod(deleting=NOW + minutes(1)), deadline=deadline, now=NOW) is False


def test_without_a_deadline_nothing_is_forced() -> None:
    assert pod_drain_step(pod(grace=600), deadline=None, now=NOW) == PodDrainStep("evict")


def test_a_pod_naming_no_grace_period_has_the_api_servers_30_seconds() -> None:
    assert pod_drain_step(pod(grace=None), deadline=NOW, now=NOW - dt.timedelta(seconds=31)) == PodDrainStep(
        "evict", force_at=NOW - dt.timedelta(seconds=30))
    assert pod_drain_step(pod(grace=None), deadline=NOW, now=NOW - dt.timedelta(seconds=29)) == PodDrainStep(
        "delete", grace_period_seconds=29)


def test_a_forced_grace_period_is_what_is_left_and_never_below_one_second() -> None:
    assert forced_grace_period_seconds(deadline=NOW + dt.timedelta(seconds=42.9), now=NOW) == 42
    assert forced_grace_period_seconds(deadline=NOW, now=NOW) == 1
    assert forced_grace_period_seconds(deadline=NOW - minutes(5), now=NOW) == 1


# read off the objects


def claim(*, initialized: str | None = "2026-11-27T11:00:00Z", last_pod_event: str | None = None,
          consolidatable: str | None = None, **metadata: Any) -> NodeClaim:
    raw = nodeclaim(expireAfter="720h", terminationGracePeriod="1h")
    raw["metadata"].update(metadata)
    conditions: list[dict[str, Any]] = []
    if initialized is not None:
        conditions.append({"type": "Initialized", "status": "True", "lastTransitionTime": initialized})
    if consolidatable is not None:
        conditions.append({"type": "Consolidatable", "status": consolidatable,
                           "lastTransitionTime": "2026-11-27T11:00:00Z"})
    raw["status"] = {"conditions": conditions, **({"lastPodEventTime": last_pod_event} if last_pod_event else {})}
    return NodeClaim.model_validate(raw)


POOL = NodePool.model_validate(nodepool(disruption={"consolidateAfter": "30m"}))


def test_consolidatability_reads_the_nodeclaim_and_nodepool() -> None:
    since_init = nodeclaim_consolidatability(claim(), POOL, NOW)                       # initialized an hour ago
    assert (since_init.consolidatable, since_init.at) == (True, NOW - minutes(30))
    recent = nodeclaim_consolidatability(claim(last_pod_event="2026-11-27T11:50:00Z"), POOL, NOW)
    assert (recent.consolidatable, recent.at) == (False, NOW + minutes(20))
    assert nodeclaim_consolidatability(claim(initialized=None), POOL, NOW).why == "nodeclaim isn't initialized"


@pytest.mark.parametrize(("current", "consolidatable", "expected"), [
    pytest.param(None, True, "set", id="mark"),
    pytest.param("True", True, None, id="already-marked"),
    pytest.param("True", False, "clear", id="unmark"),
    pytest.param(None, False, None, id="already-clear"),
])
def test_the_condition_changes_only_when_it_is_wrong(current: str | None, consolidatable: bool,
                                                     expected: str | None) -> None:
    recent = "2026-11-27T11:50:00Z" if not consolidatable else None
    nc = claim(consolidatable=current, last_pod_event=recent)
    assert condition_change(nc, nodeclaim_consolidatability(nc, POOL, NOW)) == expected


def test_a_nodeclaim_expires_from_its_creation_timestamp() -> None:
    assert nodeclaim_expires_at(claim(creationTimestamp="2026-11-01T00:00:00Z")) == dt.datetime(
        2026, 12, 1, 0, 0, tzinfo=UTC)
    assert nodeclaim_expires_at(claim()) is None                                       # not created yet


def test_a_deleted_nodeclaims_termination_time_is_recorded_once() -> None:
    deleted = claim(deletionTimestamp="2026-11-27T10:00:00Z")
    assert nodeclaim_termination_time(deleted) == dt.datetime(2026, 11, 27, 11, 0, tzinfo=UTC)
    recorded = claim(deletionTimestamp="2026-11-27T10:00:00Z",
                     annotations={"karpenter.sh/nodeclaim-termination-timestamp": "2026-11-27T10:30:00Z"})
    assert nodeclaim_termination_time(recorded) == dt.datetime(2026, 11, 27, 10, 30, tzinfo=UTC)
    assert nodeclaim_termination_time(claim()) is None
