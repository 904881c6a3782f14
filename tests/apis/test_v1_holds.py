"""do-not-disrupt on pods (true or a duration, ported from Karpenter v1's IsDoNotDisruptActive and
IsDisruptable cases) and on nodes, v1alpha5's do-not-evict and do-not-consolidate beside them; the
method order and the spot-to-spot rule."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from karpy.apis.v1.disruption.budgets import REASONS
from karpy.apis.v1.disruption.do_not_disrupt import (
    disruption_hold,
    invalid_do_not_disrupt,
    node_hold,
    pod_hold,
)
from karpy.apis.v1.disruption.hold import Hold
from karpy.apis.v1.disruption.methods import (
    METHODS,
    MIN_SPOT_TO_SPOT_TYPES,
    Candidate,
    SpotToSpotVerdict,
    first_method,
    refusal,
    spot_launch_options,
    spot_to_spot,
)

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def pod(name: str = "web-1", *, annotations: dict[str, str] | None = None, started: dt.datetime | None = NOW,
        phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T11:59:00Z"
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta, "status": status}


DND = "karpenter.sh/do-not-disrupt"


def test_a_pod_without_the_annotation_holds_nothing() -> None:
    assert pod_hold(pod(), NOW) is None


def test_true_holds_indefinitely() -> None:
    assert pod_hold(pod(annotations={DND: "true"}), NOW) == Hold('pod default/web-1 has "karpenter.sh/do-not-disrupt" annotation')


@pytest.mark.parametrize(("value", "event"), [
    pytest.param("invalid-format", 'failed to parse "invalid-format" as a duration: invalid duration "invalid-format"',
                 id="not-a-duration"),
    pytest.param("0s", 'duration "0s" must be positive', id="zero"),
    pytest.param("-5m", 'duration "-5m" must be positive', id="negative"),
])
def test_an_unreadable_value_is_ignored_and_named_for_the_event(value: str, event: str) -> None:
    p = pod(annotations={DND: value}, started=NOW - dt.timedelta(minutes=10))
    assert pod_hold(p, NOW) is None
    assert invalid_do_not_disrupt(p) == f"Invalid karpenter.sh/do-not-disrupt annotation: {event}, ignoring annotation"


def test_a_duration_holds_until_the_pod_start_plus_it() -> None:
    p = pod(annotations={DND: "15m"}, started=NOW - dt.timedelta(minutes=5))
    hold = pod_hold(p, NOW)
    assert hold == Hold('pod default/web-1 has "karpenter.sh/do-not-disrupt: 15m" annotation', NOW + dt.timedelta(minutes=10))
    assert hold.describe().endswith("until 2026-11-27T12:10:00Z")
    assert invalid_do_not_disrupt(p) is None
    assert pod_hold(p, NOW + dt.timedelta(minutes=10)) is None           # the moment it lets go


def test_an_elapsed_duration_holds_nothing() -> None:
    assert pod_hold(pod(annotations={DND: "5m"}, started=NOW - dt.timedelta(minutes=10)), NOW) is None


def test_a_duration_on_a_pod_not_started_holds_fail_safe() -> None:
    hold = pod_hold(pod(annotations={DND: "5m"}, started=None), NOW)
    assert hold is not None and hold.until is None


@pytest.mark.parametrize("finished", [
    pytest.param({"phase": "Succeeded"}, id="succeeded"),
    pytest.param({"phase": "Failed"}, id="failed"),
    pytest.param({"deleting": True}, id="terminating"),
])
def test_a_pod_that_is_not_active_holds_nothing(finished: dict[str, Any]) -> None:
    assert pod_hold(pod(annotations={DND: "true"}, **finished), NOW) is None


def test_v1alpha5_do_not_evict_holds_as_do_not_disrupt() -> None:
    assert pod_hold(pod(annotations={"karpenter.sh/do-not-evict": "true"}), NOW) == Hold(
        'pod default/web-1 has "karpenter.sh/do-not-evict" annotation')


def test_a_node_annotation_holds_from_every_reason() -> None:
    expected = Hold('disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation')
    assert [node_hold({DND: "true"}, r) for r in REASONS] == [expected] * 3
    assert node_hold({DND: "false"}, "Empty") is None


def test_v1alpha5_do_not_consolidate_holds_from_consolidation_but_not_drift() -> None:
    annotations = {"karpenter.sh/do-not-consolidate": "true"}
    assert node_hold(annotations, "Underutilized") == Hold(
        'consolidation is blocked through the "karpenter.sh/do-not-consolidate" annotation')
    assert node_hold(annotations, "Empty") is not None
    assert node_hold(annotations, "Drifted") is None


def test_the_node_hold_comes_first_then_the_pod_holding_longest() -> None:
    pods = [pod("a", annotations={DND: "10m"}), pod("b", annotations={DND: "30m"}), pod("c")]
    hold = disruption_hold(node_annotations={}, pods=pods, reason="Drifted", now=NOW)
    assert hold == Hold('pod default/b has "karpenter.sh/do-not-disrupt: 30m" annotation', NOW + dt.timedelta(minutes=30))
    assert disruption_hold(node_annotations={DND: "true"}, pods=pods, reason="Drifted", now=NOW).until is None
    forever = pods + [pod("d", annotations={DND: "true"})]
    assert disruption_hold(node_annotations=None, pods=forever, reason="Empty", now=NOW).why.startswith("pod default/d")
    assert disruption_hold(node_annotations=None, pods=[pod("c")], reason="Empty", now=NOW) is None


# methods


BASE = Candidate(nodepool="default", consolidation_policy="WhenEmptyOrUnderutilized", consolidate_after="0s",
                 consolidatable=True, drifted=False, empty=False)


def test_the_methods_run_in_v1s_order() -> None:
    assert METHODS == ("Emptiness", "Drift", "MultiNodeConsolidation", "SingleNodeConsolidation")


@pytest.mark.parametrize(("changes", "expected"), [
    pytest.param({"empty": True}, "Emptiness", id="empty-first"),
    pytest.param({"empty": True, "drifted": True}, "Emptiness", id="empty-and-drifted"),
    pytest.param({"drifted": True}, "Drift", id="drifted"),
    pytest.param({"drifted": True, "consolidate_after": "Never"}, "Drift", id="drift-ignores-consolidation"),
    pytest.param({}, "MultiNodeConsolidation", id="underutilized"),
    pytest.param({"consolidation_policy": "WhenEmpty"}, None, id="when-empty-keeps-busy-nodes"),
    pytest.param({"consolidation_policy": "WhenEmpty", "empty": True}, "Emptiness", id="when-empty-takes-empty"),
    pytest.param({"consolidatable": False}, None, id="consolidate-after-pending"),
    pytest.param({"consolidate_after": "Never", "empty": True}, None, id="never"),
])
def test_the_first_method_that_takes_a_candidate(changes: dict[str, Any], expected: str | None) -> None:
    assert first_method(dataclasses.replace(BASE, **changes)) == expected


def test_refusals_name_the_policy_that_holds() -> None:
    when_empty = dataclasses.replace(BASE, consolidation_policy="WhenEmpty")
    assert refusal("SingleNodeConsolidation", when_empty) == (
        'NodePool "default" has consolidation policy WhenEmpty, but node is not empty')
    assert refusal("Emptiness", dataclasses.replace(BASE, consolidate_after="Never")) == (
        'NodePool "default" has consolidation disabled')
    assert refusal("Drift", BASE) == "node is not drifted"


# spot-to-spot


def test_spot_to_spot_needs_the_feature_gate() -> None:
    verdict = spot_to_spot(feature_gate=False, candidate_count=1, cheaper_spot_types=40)
    assert (verdict.allowed, verdict.why) == (False, "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")


@pytest.mark.parametrize(("cheaper", "allowed", "launch"), [
    pytest.param(0, False, 0, id="none-cheaper"),
    pytest.param(MIN_SPOT_TO_SPOT_TYPES - 1, False, 0, id="fourteen"),
    pytest.param(MIN_SPOT_TO_SPOT_TYPES, True, 15, id="fifteen"),
    pytest.param(40, True, 15, id="capped-at-fifteen"),
])
def test_a_single_spot_node_needs_fifteen_cheaper_spot_types(cheaper: int, allowed: bool, launch: int) -> None:
    verdict = spot_to_spot(feature_gate=True, candidate_count=1, cheaper_spot_types=cheaper)
    assert (verdict.allowed, verdict.launch_options) == (allowed, launch)


def test_the_refusal_says_how_many_were_found() -> None:
    assert spot_to_spot(feature_gate=True, candidate_count=1, cheaper_spot_types=3).why == (
        "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to "
        "consolidate, got 3")


def test_min_values_widen_the_launch_beyond_fifteen() -> None:
    assert spot_to_spot(feature_gate=True, candidate_count=1, cheaper_spot_types=40,
                        min_values_types=22).launch_options == 22


def test_several_spot_nodes_need_only_one_cheaper_type() -> None:
    verdict = spot_to_spot(feature_gate=True, candidate_count=3, cheaper_spot_types=2)
    assert verdict == SpotToSpotVerdict(True, launch_options=2)


def test_the_launch_uses_the_cheapest_options() -> None:
    types = [f"t{i}" for i in range(20)]
    assert spot_launch_options(types, spot_to_spot(feature_gate=True, candidate_count=1, cheaper_spot_types=20)) == types[:15]
    assert spot_launch_options(types, SpotToSpotVerdict(False, "no")) == []
