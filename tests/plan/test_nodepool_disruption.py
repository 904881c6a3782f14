"""v1's disruption controls on a NodePool's nodes as `karpy plan --consolidate` applies them: do-not-disrupt
on nodes and pods holds a node (naming the annotation and when it lets go); a Provisioner's nodes keep v0.16's rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from karpy.apis.v1.labels import DO_NOT_DISRUPT
from tests.builders import pod
from tests.expectations import expect_consolidated
from tests.plan.test_consolidation import CATALOG, consolidating, karpy_node, reasons
from tests.plan.test_nodepools import nodepool, nodepool_node

NOW = dt.datetime(2024, 1, 8, 12, 0, tzinfo=dt.timezone.utc)
ON_DEMAND = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]


def consolidating_pool(**disruption: Any) -> dict[str, Any]:
    pool = nodepool("default", requirements=ON_DEMAND)
    pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                                  **disruption}
    return pool


def annotated(body: dict[str, Any], **annotations: str) -> dict[str, Any]:
    body["metadata"].setdefault("annotations", {}).update(annotations)
    return body


def started(body: dict[str, Any], at: dt.datetime) -> dict[str, Any]:
    body.setdefault("status", {}).update({"phase": "Running", "startTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return body


def plan(*docs: dict[str, Any]) -> dict[str, Any]:
    return expect_consolidated(CATALOG, *docs, now=NOW)


def test_a_node_annotated_do_not_disrupt_is_kept_empty_or_not() -> None:
    run = plan(consolidating_pool(),
               annotated(nodepool_node("empty", "large"), **{DO_NOT_DISRUPT: "true"}),
               annotated(nodepool_node("big", "large"), **{DO_NOT_DISRUPT: "true"}), pod("p", cpu="1", node_name="big"),
               nodepool_node("free", "large"))
    assert run["actions"] == [{"type": "delete", "nodes": ["free"], "savingsPerHour": 0.4, "pods": [], "moves": [],
                               "podsMoved": 0, "disruptionCost": 0.0}]
    held = 'disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation'
    assert reasons(run) == {"empty": held, "big": held}


def test_a_pod_annotated_do_not_disrupt_true_holds_its_node_while_it_runs() -> None:
    run = plan(consolidating_pool(), nodepool_node("big", "large"),
               annotated(pod("p", cpu="1", node_name="big"), **{DO_NOT_DISRUPT: "true"}))
    assert run["actions"] == []
    assert reasons(run)["big"] == 'pod default/p has "karpenter.sh/do-not-disrupt" annotation'


def test_a_pod_do_not_disrupt_duration_holds_its_node_until_start_plus_duration_then_lets_go() -> None:
    def run_with(start: dt.datetime) -> dict[str, Any]:
        return plan(consolidating_pool(), nodepool_node("big", "large"),
                    started(annotated(pod("p", cpu="1", node_name="big"), **{DO_NOT_DISRUPT: "30m"}), start))

    held = run_with(NOW - dt.timedelta(minutes=10))
    assert held["actions"] == []
    assert reasons(held)["big"] == ('pod default/p has "karpenter.sh/do-not-disrupt: 30m" annotation '
                                    "until 2024-01-08T12:20:00Z")
    (action,) = run_with(NOW - dt.timedelta(minutes=31))["actions"]
    assert action["type"] == "replace" and action["replacement"]["instanceType"] == "small"


def test_an_unreadable_do_not_disrupt_value_is_ignored() -> None:
    run = plan(consolidating_pool(), nodepool_node("big", "large"),
               annotated(pod("p", cpu="1", node_name="big"), **{DO_NOT_DISRUPT: "soon"}))
    (action,) = run["actions"]
    assert action["type"] == "replace"


@pytest.mark.parametrize("where", ["node", "pod"])
def test_v1alpha5_annotations_still_hold_a_nodepools_node(where: str) -> None:
    node, p = nodepool_node("big", "large"), pod("p", cpu="1", node_name="big")
    if where == "node":
        annotated(node, **{"karpenter.sh/do-not-consolidate": "true"})
    else:
        annotated(p, **{"karpenter.sh/do-not-evict": "true"})
    run = plan(consolidating_pool(), node, p)
    assert run["actions"] == []
    assert reasons(run)["big"] == {
        "node": 'consolidation is blocked through the "karpenter.sh/do-not-consolidate" annotation',
        "pod": 'pod default/p has "karpenter.sh/do-not-evict" annotation'}[where]


def test_a_provisioners_node_ignores_do_not_disrupt_as_v016_does() -> None:
    run = plan(consolidating(), annotated(karpy_node("big", "large"), **{DO_NOT_DISRUPT: "true"}),
               annotated(pod("p", cpu="1", node_name="big"), **{DO_NOT_DISRUPT: "true"}))
    (action,) = run["actions"]
    assert action["type"] == "replace"
