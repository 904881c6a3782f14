"""v1's disruption controls on a NodePool's nodes as `karpy plan --consolidate` applies them: do-not-disrupt
on nodes and pods holds a node (naming the annotation and when it lets go); a Provisioner's nodes keep v0.16's rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from karpy.apis.v1.labels import DO_NOT_DISRUPT
from karpy.controller.consolidation.decisions import Consolidator
from karpy.plan.documents import Document
from karpy.plan.inputs import from_documents
from karpy.plan.render import explain_node_json
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
    assert [(a["type"], a["nodes"]) for a in run["actions"]] == [("delete", ["free"])]
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


def test_the_default_budget_of_10_percent_lets_one_of_ten_empty_nodes_go() -> None:
    run = plan(consolidating_pool(), *(nodepool_node(f"n{i}", "small") for i in range(10)))
    (action,) = run["actions"]
    assert action["type"] == "delete" and action["nodes"] == ["n0"]
    held = 'NodePool "default" allows 1 Empty disruption(s) of 10 node(s) and 1 are already disrupting'
    assert reasons(run) == {f"n{i}": held for i in range(1, 10)}


def test_a_budget_for_underutilized_only_leaves_empty_nodes_free() -> None:
    run = plan(consolidating_pool(budgets=[{"nodes": "0", "reasons": ["Underutilized"]}]),
               nodepool_node("empty", "large"), nodepool_node("big", "large"), pod("p", cpu="1", node_name="big"))
    assert [a["nodes"] for a in run["actions"]] == [["empty"]]
    # the empty node this pass deletes counts as disrupting too
    assert reasons(run) == {"big": 'NodePool "default" allows 0 Underutilized disruption(s) of 2 node(s) '
                                   "and 1 are already disrupting"}


def test_a_closed_schedule_holds_until_its_window_ends() -> None:
    business_hours = {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}
    run = plan(consolidating_pool(budgets=[business_hours]), nodepool_node("empty", "large"))
    assert run["actions"] == []
    assert reasons(run)["empty"] == ('NodePool "default" allows 0 Empty disruption(s) of 1 node(s) '
                                     "and 0 are already disrupting until 2024-01-08T17:00:00Z")


def test_a_node_not_ready_uses_up_the_budget() -> None:
    sick = nodepool_node("sick", "small")
    sick["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    sick["metadata"]["annotations"] = {DO_NOT_DISRUPT: "true"}
    run = plan(consolidating_pool(budgets=[{"nodes": "1"}]), sick, nodepool_node("empty", "large"))
    assert run["actions"] == []
    assert reasons(run)["empty"] == ('NodePool "default" allows 1 Empty disruption(s) of 2 node(s) '
                                     "and 1 are already disrupting")


def test_a_provisioners_nodes_have_no_budget() -> None:
    run = plan(consolidating(), *(karpy_node(f"n{i}", "small") for i in range(10)))
    assert [sorted(a["nodes"]) for a in run["actions"]] == [[f"n{i}" for i in range(10)]]


def test_consolidate_after_holds_a_node_until_that_long_after_its_last_pod_started() -> None:
    def run_with(start: dt.datetime) -> dict[str, Any]:
        return plan(consolidating_pool(consolidateAfter="10m"), nodepool_node("big", "large"),
                    started(pod("p", cpu="1", node_name="big"), start))

    held = run_with(NOW - dt.timedelta(minutes=4))
    assert held["actions"] == []
    assert reasons(held)["big"] == ("consolidateAfter 10m not yet elapsed since the last pod event at "
                                    "2024-01-08T11:56:00Z until 2024-01-08T12:06:00Z")
    (action,) = run_with(NOW - dt.timedelta(minutes=11))["actions"]
    assert action["type"] == "replace"


def test_consolidate_after_counts_from_when_an_empty_node_became_ready() -> None:
    fresh = nodepool_node("fresh", "large")
    fresh["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-08T11:55:00Z"}]
    run = plan(consolidating_pool(consolidateAfter="10m"), fresh, nodepool_node("old", "large"))
    assert [a["nodes"] for a in run["actions"]] == [["old"]]
    assert reasons(run)["fresh"].endswith("until 2024-01-08T12:05:00Z")


def test_consolidate_after_never_keeps_every_node() -> None:
    run = plan(consolidating_pool(consolidateAfter="Never"), nodepool_node("empty", "large"))
    assert run["actions"] == []
    assert reasons(run)["empty"] == "consolidation is disabled (consolidateAfter: Never)"


def test_explain_node_names_the_annotation_and_when_it_lets_go() -> None:
    docs = [CATALOG, consolidating_pool(), nodepool_node("big", "large"),
            started(annotated(pod("p", cpu="1", node_name="big"), **{DO_NOT_DISRUPT: "1h"}), NOW)]
    loaded = from_documents([Document("<test>", i, o) for i, o in enumerate(docs, 1)], catalog="aws")
    decided = Consolidator(loaded.snapshot, loaded.pdbs, now=NOW).plan()
    assert explain_node_json(decided, "big") == {
        "node": "big", "verdict": "keep",
        "reason": 'pod default/p has "karpenter.sh/do-not-disrupt: 1h" annotation until 2024-01-08T13:00:00Z'}
