"""Consolidation weighs disruption: each action's pods moved and Karpenter's disruption cost, the savings
threshold per unit of that cost, and pods moved once onto the nodes that stay."""

from __future__ import annotations

import datetime

import pytest

from karpy.apis import labels as wk
from tests.builders import pod
from tests.expectations import expect_consolidated
from tests.plan.conftest import Plan
from tests.plan.test_consolidation import CATALOG, PER_NODE, consolidate, consolidating, karpy_node, kept_as_is, reasons

NOW = datetime.datetime(2024, 1, 1, 0, 0, 0, tzinfo=datetime.timezone.utc)


def test_an_action_reports_its_pods_moved_and_their_disruption_cost() -> None:
    """Per pod 1, +priority/2^25, +pod-deletion-cost/2^27, clamped to [-10, 10]; times the node's lifetime left:
    created 250 s before now with ttlSecondsUntilExpired 1000, 0.75 of it."""
    keeper = kept_as_is("keeper", "medium")
    pods = [pod("important", cpu="100m", node_name="a", priority=2 ** 25),               # 2
            pod("cheap", cpu="100m", node_name="a",
                annotations={wk.POD_DELETION_COST: str(-(2 ** 27))}),                    # 0
            pod("critical", cpu="100m", node_name="a", priority=2 ** 30),                # 33, clamped to 10
            pod("plain", cpu="100m", node_name="a")]                                     # 1
    run = expect_consolidated(CATALOG, consolidating(ttlSecondsUntilExpired=1000), keeper,
                              karpy_node("a", created="2023-12-31T23:55:50Z"), *pods, catalog="aws", now=NOW)
    (action,) = run["actions"]
    assert action["nodes"] == ["a"] and action["podsMoved"] == 4
    assert action["disruptionCost"] == pytest.approx((2 + 0 + 10 + 1) * 0.75)
    assert run["summary"]["podsMoved"] == 4


@pytest.mark.parametrize(("threshold", "deleted"), [
    pytest.param(repr((0.2 + PER_NODE) / 4), True, id="saving-equals-threshold-times-cost"),
    pytest.param("0.06", False, id="saving-below-threshold-times-cost"),
])
def test_an_action_is_taken_only_when_it_saves_the_threshold_per_pod_it_moves(plan: Plan, threshold: str,
                                                                               deleted: bool) -> None:
    """Deleting `a` (medium, $0.20/h and the per-node costs) moves its 4 pods (disruption cost 4): worth it at a
    quarter of what it costs a pod, not at $0.06."""
    docs = (CATALOG, consolidating(), kept_as_is("keeper", "medium"),
            karpy_node("a"), *(pod(f"p{i}", cpu="250m", node_name="a") for i in range(4)))
    run = plan(*docs, args=("--consolidate", "--consolidation-min-savings-per-pod", threshold))
    assert run.code == 0, run.err
    if deleted:
        assert [(a["type"], a["nodes"], a["podsMoved"]) for a in run.json["actions"]] == [("delete", ["a"], 4)]
    else:
        assert run.json["actions"] == []
        assert reasons(run.json)["a"] == (f"not worth its disruption: saves ${0.2 + PER_NODE:.4f}/h for 4 pod(s) moved (disruption "
                                          "cost 4), less than $0.2400/h ($0.06/h per unit of disruption cost)")


def test_a_negative_threshold_is_refused(plan: Plan) -> None:
    run = plan(CATALOG, consolidating(), args=("--consolidate", "--consolidation-min-savings-per-pod", "-1"))
    assert run.code == 2 and "--consolidation-min-savings-per-pod must not be negative" in run.err


def test_moved_pods_go_to_the_node_that_stays_so_none_moves_twice() -> None:
    """a and b (one pod each) go before c (three pods): their pods land on c, not on each other, and the
    two deletes are one action moving 2 pods, not 3."""
    docs = [consolidating(), karpy_node("a"), karpy_node("b"), karpy_node("c"),
            pod("pa", cpu="1", node_name="a"), pod("pb", cpu="1", node_name="b"),
            *(pod(f"pc{i}", cpu="500m", node_name="c") for i in range(3))]
    run = consolidate(*docs)
    assert [(a["nodes"], a["podsMoved"]) for a in run["actions"]] == [(["a", "b"], 2)]
    assert run["actions"][0]["moves"] == [{"pod": "default/pa", "to": "c"}, {"pod": "default/pb", "to": "c"}]
    assert run["summary"]["podsMoved"] == 2


def test_the_table_shows_pods_moved_and_disruption_cost(plan: Plan) -> None:
    run = plan(CATALOG, consolidating(), karpy_node("a"), kept_as_is("b", "medium"), pod("p", cpu="1", node_name="a"),
               args=("--consolidate",), output="table")
    assert run.code == 0, run.err
    header, first = run.out.splitlines()[:2]
    assert header.split()[-3:] == ["MOVED", "DISRUPTION", "COST"]
    assert first.split()[-2:] == ["1", "1"]           # one pod, disruption cost 1
    assert "1 action(s), 1 pod(s) moved, saving $0.2000/hour" in run.out


def test_the_node_that_saves_most_per_pod_moved_goes_first() -> None:
    """`keeper` has room for one more pod. `dear` ($0.20/h) and `cheap` ($0.10/h, older) each hold one: deleting
    `dear` saves twice as much for the same pod, so it goes (Karpenter's order alone, equal disruption costs, would
    take the older `cheap` first and then replace `dear`, moving two pods)."""
    docs = [consolidating(), kept_as_is("keeper", "medium"), pod("full", cpu="2500m", node_name="keeper"),
            karpy_node("cheap", "small", created="2023-01-01T00:00:00Z"), karpy_node("dear", "medium"),
            pod("pc", cpu="1", node_name="cheap"), pod("pd", cpu="1", node_name="dear")]
    run = consolidate(*docs)
    assert [(a["type"], a["nodes"], a["podsMoved"]) for a in run["actions"]] == [("delete", ["dear"], 1)]
    assert run["actions"][0]["moves"] == [{"pod": "default/pd", "to": "keeper"}]
    assert run["summary"]["podsMoved"] == 1 and run["summary"]["pricePerHourAfter"] == pytest.approx(0.3)
