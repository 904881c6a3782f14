"""NodePool disruption budgets, ported from Karpenter v1's pkg/apis/v1/nodepool_budgets_test.go, plus the
budget mapping of the disruption controller (allowed minus nodes already leaving)."""

from __future__ import annotations

import datetime as dt

import pytest

from karpy.apis.v1.disruption.budgets import (
    MAX_ALLOWED,
    REASONS,
    Allowance,
    BudgetError,
    BudgetNode,
    active_until,
    allowed_by_reason,
    allowed_disruptions,
    budget_hold,
    budget_mapping,
    cron_expression,
    is_active,
    next_hit,
    scaled_nodes,
)
from karpy.apis.v1.disruption.hold import Hold
from karpy.apis.v1.nodepool import Budget, Disruption

UTC = dt.timezone.utc
# the middle of the year 2000, as the upstream suite's fake clock
NOW = dt.datetime(2000, 6, 15, 12, 30, 30, tzinfo=UTC)


@pytest.fixture
def budgets() -> list[Budget]:
    every_minute = "* * * * *"
    return [
        Budget(nodes="10", schedule=every_minute, duration="1h"),
        Budget(nodes="100", schedule=every_minute, duration="1h"),
        Budget(nodes="100%", schedule=every_minute, duration="1h"),
        Budget(reasons=["Drifted", "Underutilized"], nodes="15", schedule=every_minute, duration="1h"),
        Budget(reasons=["Drifted"], nodes="5", schedule=every_minute, duration="1h"),
        Budget(reasons=["Underutilized", "Drifted", "Empty"], nodes="0", schedule="@weekly", duration="1h"),
    ]


def by_reason(budgets: list[Budget], reason: str, *, node_count: int = 100, now: dt.datetime = NOW) -> Allowance:
    return allowed_by_reason(budgets, now=now, node_count=node_count, reason=reason)  # type: ignore[arg-type]


# GetAllowedDisruptionsByReason


def test_zero_for_every_reason_when_a_zero_budget_for_all_reasons_is_active(budgets: list[Budget]) -> None:
    budgets[5] = budgets[5].model_copy(update={"schedule": "* * * * *", "duration": "1h"})
    assert [by_reason(budgets, r) for r in REASONS] == [Allowance(0)] * 3


def test_unbounded_for_every_reason_when_no_budget_is_active(budgets: list[Budget]) -> None:
    budgets = [b.model_copy(update={"schedule": "@yearly", "duration": "1h"}) for b in budgets]
    assert [by_reason(budgets, r).allowed for r in REASONS] == [MAX_ALLOWED] * 3


def test_inactive_reason_budgets_are_ignored(budgets: list[Budget]) -> None:
    budgets[3] = budgets[3].model_copy(update={"schedule": "@yearly"})
    budgets[4] = budgets[4].model_copy(update={"schedule": "@yearly"})
    assert [by_reason(budgets, r).allowed for r in REASONS] == [10, 10, 10]


def test_a_budget_without_reasons_covers_every_reason(budgets: list[Budget]) -> None:
    assert budgets[0].reasons is None
    assert [by_reason(budgets[:1], r).allowed for r in REASONS] == [10, 10, 10]


def test_each_reason_gets_its_most_restrictive_budget(budgets: list[Budget]) -> None:
    budgets.append(Budget(schedule="* * * * *", nodes="4", duration="1h", reasons=["Empty"]))
    assert by_reason(budgets, "Empty").allowed == 4
    assert by_reason(budgets, "Drifted").allowed == 5
    assert by_reason(budgets, "Underutilized").allowed == 10      # the reasonless "10" beats the "15" for it


def test_a_misconfigured_budget_fails_closed_and_says_which(budgets: list[Budget]) -> None:
    budgets[1] = budgets[1].model_copy(update={"schedule": "@wrongly"})
    allowance = by_reason(budgets, "Empty")
    assert allowance.allowed == 0
    assert allowance.errors == ("spec.disruption.budgets[1]: unrecognized descriptor: @wrongly",)


# AllowedDisruptions


def test_an_invalid_schedule_is_an_error(budgets: list[Budget]) -> None:
    with pytest.raises(BudgetError, match="unrecognized descriptor: @wrongly"):
        allowed_disruptions(budgets[0].model_copy(update={"schedule": "@wrongly"}), now=NOW, node_count=100)


def test_an_invalid_nodes_value_is_an_error(budgets: list[Budget]) -> None:
    with pytest.raises(BudgetError, match='invalid value "1000a%"'):
        allowed_disruptions(budgets[0].model_copy(update={"nodes": "1000a%"}), now=NOW, node_count=100)


def test_an_inactive_budget_is_unbounded(budgets: list[Budget]) -> None:
    inactive = budgets[0].model_copy(update={"schedule": "@yearly", "duration": "1h"})
    assert allowed_disruptions(inactive, now=NOW, node_count=100) == MAX_ALLOWED


def test_an_active_count_budget_allows_its_count(budgets: list[Budget]) -> None:
    assert allowed_disruptions(budgets[0], now=NOW, node_count=100) == 10


def test_an_active_percentage_budget_allows_its_share(budgets: list[Budget]) -> None:
    assert allowed_disruptions(budgets[2], now=NOW, node_count=100) == 100


@pytest.mark.parametrize(("nodes", "node_count", "expected"), [
    pytest.param("10%", 100, 10, id="exact"),
    pytest.param("5%", 10, 1, id="rounds-up-half"),
    pytest.param("10%", 11, 2, id="rounds-up-1.1"),
    pytest.param("10%", 0, 0, id="no-nodes"),
    pytest.param("0%", 50, 0, id="zero-percent"),
    pytest.param("3", 1, 3, id="count-past-total"),
])
def test_percentages_round_up_as_pdbs_do(nodes: str, node_count: int, expected: int) -> None:
    assert scaled_nodes(nodes, node_count) == expected


# IsActive


def test_schedules_are_read_in_utc_whatever_the_clock_zone() -> None:
    # 2000-05-31T00:00 one hour ahead of UTC is 23:00 UTC: an hour past midnight's 30-minute window
    clock = dt.datetime(2000, 5, 31, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert is_active(Budget(nodes="10", schedule="@daily", duration="30m"), clock) is False


def test_a_budget_without_schedule_and_duration_is_always_active() -> None:
    assert is_active(Budget(nodes="10"), NOW) is True


def test_a_schedule_that_just_fired_is_active(budgets: list[Budget]) -> None:
    assert is_active(budgets[0], NOW) is True


def test_a_schedule_that_fired_long_ago_is_inactive(budgets: list[Budget]) -> None:
    assert is_active(budgets[0].model_copy(update={"schedule": "@yearly"}), NOW) is False


def test_active_when_the_hit_is_in_the_middle_of_the_duration() -> None:
    now = dt.datetime(1000, 1, 1, 12, 0, tzinfo=UTC)
    assert is_active(Budget(nodes="10", schedule="@yearly", duration="24h"), now) is True


def test_active_when_the_duration_is_longer_than_the_recurrence() -> None:
    now = dt.datetime(2024, 1, 7, 0, 0, tzinfo=UTC)
    assert is_active(Budget(nodes="10", schedule="@daily", duration="48h"), now) is True


def test_inactive_when_the_last_hit_is_more_than_the_duration_ago() -> None:
    # Sunday 2024-01-07 00:00: the last "30 6 * * SUN" was 2023-12-31 06:30, a week ago
    now = dt.datetime(2024, 1, 7, 0, 0, tzinfo=UTC)
    assert is_active(Budget(nodes="10", schedule="30 6 * * SUN", duration="6h"), now) is False


def test_a_cron_that_fails_to_parse_says_why() -> None:
    with pytest.raises(BudgetError, match=r"beginning of range \(2\) beyond end of range \(1\)"):
        is_active(Budget(nodes="10", schedule="0 0 * * tue-mon", duration="6h"), dt.datetime(2024, 1, 7, tzinfo=UTC))


@pytest.mark.parametrize(("moment", "active"), [
    pytest.param(dt.datetime(2024, 1, 8, 8, 59, 59, tzinfo=UTC), False, id="a-second-before"),
    pytest.param(dt.datetime(2024, 1, 8, 9, 0, 0, tzinfo=UTC), True, id="at-the-hit"),
    pytest.param(dt.datetime(2024, 1, 8, 16, 59, 59, tzinfo=UTC), True, id="last-second"),
    pytest.param(dt.datetime(2024, 1, 8, 17, 0, 0, tzinfo=UTC), False, id="closes-at-duration"),
    pytest.param(dt.datetime(2024, 1, 8, 17, 0, 1, tzinfo=UTC), False, id="a-second-after"),
    pytest.param(dt.datetime(2024, 1, 13, 12, 0, 0, tzinfo=UTC), False, id="saturday"),
])
def test_a_business_hours_window_opens_and_closes_on_the_schedule(moment: dt.datetime, active: bool) -> None:
    assert is_active(Budget(nodes="0", schedule="0 9 * * mon-fri", duration="8h"), moment) is active


# the cron dialect


@pytest.mark.parametrize(("schedule", "expected"), [
    pytest.param("@yearly", "0 0 1 1 *", id="yearly"),
    pytest.param("@annually", "0 0 1 1 *", id="annually"),
    pytest.param("@monthly", "0 0 1 * *", id="monthly"),
    pytest.param("@weekly", "0 0 * * 0", id="weekly"),
    pytest.param("@daily", "0 0 * * *", id="daily"),
    pytest.param("@midnight", "0 0 * * *", id="midnight"),
    pytest.param("@hourly", "0 * * * *", id="hourly"),
    pytest.param("*/15 9-17 * JAN-MAR mon,wed", "*/15 9-17 * JAN-MAR mon,wed", id="fields"),
])
def test_the_macros_karpenter_accepts_expand_to_five_fields(schedule: str, expected: str) -> None:
    assert cron_expression(schedule) == expected


@pytest.mark.parametrize(("schedule", "message"), [
    pytest.param("* * * *", "expected exactly 5 fields, found 4", id="four-fields"),
    pytest.param("0 * * * * *", "expected exactly 5 fields, found 6", id="seconds-field"),
    pytest.param("60 * * * *", r"end of range \(60\) above maximum \(59\)", id="minute-60"),
    pytest.param("0 0 0 * *", r"beginning of range \(0\) below minimum \(1\)", id="day-0"),
    pytest.param("0 0 * * 7", r"end of range \(7\) above maximum \(6\)", id="weekday-7"),
    pytest.param("x * * * *", "failed to parse int from x in the minute field", id="word"),
    pytest.param("*/0 * * * *", "step of range should be a positive number", id="step-0"),
    pytest.param("@every 1h", "unrecognized descriptor", id="every"),
])
def test_schedules_robfig_cron_rejects_are_rejected(schedule: str, message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        cron_expression(schedule)


def test_next_hit_is_strictly_after_the_moment() -> None:
    on_the_hour = dt.datetime(2024, 1, 8, 9, 0, tzinfo=UTC)
    assert next_hit("0 * * * *", on_the_hour) == dt.datetime(2024, 1, 8, 10, 0, tzinfo=UTC)


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        is_active(Budget(nodes="1", schedule="@daily", duration="1h"), dt.datetime(2024, 1, 8))


# the budget mapping


def node(pool: str = "default", *, initialized: bool = True, ready: bool = True, deleting: bool = False,
         terminating: bool = False) -> BudgetNode:
    return BudgetNode(pool, initialized=initialized, ready=ready, marked_for_deletion=deleting,
                      instance_terminating=terminating)


def test_nodes_leaving_or_not_ready_use_up_the_allowance() -> None:
    nodes = [node() for _ in range(17)] + [node(ready=False), node(deleting=True)]
    mapping = budget_mapping({"default": Disruption().budgets}, nodes, now=NOW, reason="Empty")
    pool = mapping["default"]
    assert (pool.node_count, pool.allowed, pool.disrupting, pool.remaining) == (19, 2, 2, 0)   # ceil(10% of 19) = 2


def test_uninitialized_and_terminated_nodes_count_toward_nothing() -> None:
    nodes = [node() for _ in range(10)] + [node(initialized=False, ready=False), node(terminating=True, deleting=True)]
    pool = budget_mapping({"default": [Budget(nodes="50%")]}, nodes, now=NOW, reason="Drifted")["default"]
    assert (pool.node_count, pool.allowed, pool.disrupting, pool.remaining) == (10, 5, 0, 5)


def test_the_remainder_never_goes_below_zero() -> None:
    nodes = [node(deleting=True) for _ in range(3)] + [node()]
    pool = budget_mapping({"default": [Budget(nodes="1")]}, nodes, now=NOW, reason="Underutilized")["default"]
    assert (pool.allowed, pool.disrupting, pool.remaining) == (1, 3, 0)


def test_each_nodepool_is_counted_apart_and_an_empty_one_is_listed() -> None:
    nodes = [node("a") for _ in range(4)] + [node("b") for _ in range(30)]
    mapping = budget_mapping({"a": [Budget(nodes="1")], "b": [Budget(nodes="10%")], "c": [Budget(nodes="10%")]},
                             nodes, now=NOW, reason="Empty")
    assert {name: (p.node_count, p.remaining) for name, p in mapping.items()} == {"a": (4, 1), "b": (30, 3), "c": (0, 0)}


# what holds a NodePool, and until when


BUSINESS_HOURS = Budget(nodes="0", schedule="0 9 * * mon-fri", duration="8h")
MONDAY_NOON = dt.datetime(2024, 1, 8, 12, 0, tzinfo=UTC)


def test_a_closed_window_holds_until_it_ends() -> None:
    hold = budget_hold([Budget(nodes="10%"), BUSINESS_HOURS], nodepool="default", reason="Underutilized",
                       node_count=20, disrupting=0, now=MONDAY_NOON)
    assert hold == Hold('NodePool "default" allows 0 Underutilized disruption(s) of 20 node(s) and 0 are already '
                        "disrupting", dt.datetime(2024, 1, 8, 17, 0, tzinfo=UTC))
    assert budget_hold([Budget(nodes="10%"), BUSINESS_HOURS], nodepool="default", reason="Underutilized",
                       node_count=20, disrupting=0, now=dt.datetime(2024, 1, 8, 17, 0, tzinfo=UTC)) is None


def test_a_budget_used_up_by_leaving_nodes_holds_while_they_leave() -> None:
    hold = budget_hold([Budget(nodes="1")], nodepool="default", reason="Drifted", node_count=5, disrupting=1,
                       now=MONDAY_NOON)
    assert hold == Hold('NodePool "default" allows 1 Drifted disruption(s) of 5 node(s) and 1 are already disrupting')
    assert budget_hold([Budget(nodes="2")], nodepool="default", reason="Drifted", node_count=5, disrupting=1,
                       now=MONDAY_NOON) is None


def test_a_budget_for_another_reason_does_not_hold() -> None:
    drift_only = BUSINESS_HOURS.model_copy(update={"reasons": ["Drifted"]})
    assert budget_hold([drift_only], nodepool="p", reason="Empty", node_count=3, disrupting=0, now=MONDAY_NOON) is None


def test_an_unreadable_budget_holds_and_says_why() -> None:
    hold = budget_hold([Budget(nodes="1", schedule="@wrongly", duration="1h")], nodepool="p", reason="Empty",
                       node_count=3, disrupting=0, now=MONDAY_NOON)
    assert hold is not None and hold.until is None
    assert hold.why.endswith("spec.disruption.budgets[0]: unrecognized descriptor: @wrongly")


def test_overlapping_windows_join_up() -> None:
    assert active_until(Budget(nodes="0", schedule="@daily", duration="48h"), MONDAY_NOON) is None   # endless
    assert active_until(Budget(nodes="0", schedule="@daily", duration="24h"), MONDAY_NOON) is None   # joined end to end
    weekly = Budget(nodes="0", schedule="0 0 * * mon", duration="36h")
    assert active_until(weekly, MONDAY_NOON) == dt.datetime(2024, 1, 9, 12, 0, tzinfo=UTC)
    assert active_until(weekly, dt.datetime(2024, 1, 10, tzinfo=UTC)) is None
    assert active_until(Budget(nodes="0"), MONDAY_NOON) is None


def test_an_endless_window_holds_without_an_end() -> None:
    hold = budget_hold([Budget(nodes="0", schedule="* * * * *", duration="1h")], nodepool="p", reason="Empty",
                       node_count=3, disrupting=0, now=MONDAY_NOON)
    assert hold is not None and hold.until is None
