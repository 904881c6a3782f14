"""The pure rules behind v1's expiry, bounded drain and node repair, and the --feature-gates flag that turns repair on."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from karpy.apis.launch_record import claim_node_name
from karpy.apis.timestamps import rfc3339
from karpy.apis.v1.disruption.feature_gates import FeatureGates, parse_feature_gates
from karpy.apis.v1.labels import NODECLAIM_TERMINATION_TIMESTAMP
from karpy.controller.launch.claims import lifetime
from karpy.controller.node.repair import TOLERATION, Verdict, decide, pool_healthy
from karpy.controller.termination.grace import forced_deletes, node_termination_time, termination_annotation
from karpy.main import main

NOW = dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)


def test_feature_gates_are_off_unless_named_true() -> None:
    assert parse_feature_gates("") == FeatureGates()
    assert parse_feature_gates("NodeRepair=true, Drift=false") == FeatureGates(node_repair=True)
    assert parse_feature_gates("Drift=True,SpotToSpotConsolidation=true") == \
        FeatureGates(drift=True, spot_to_spot_consolidation=True)


@pytest.mark.parametrize(("text", "said"), [("NodeRepair", "'NodeRepair': expected NodeRepair=true or NodeRepair=false"),
                                            ("NodeRepair=yes", "'NodeRepair=yes': expected NodeRepair=true or NodeRepair=false"),
                                            ("Repair=true", "'Repair=true': unknown feature gate 'Repair'")])
def test_a_malformed_feature_gate_is_refused_by_name(capsys: pytest.CaptureFixture[str], text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_feature_gates(text)
    assert main(["controller", "--kubeconfig", "/nonexistent", "--feature-gates", text]) == 2
    assert f"--feature-gates {text!r}: {said}" in capsys.readouterr().err


def test_a_nodepools_claim_is_stamped_with_its_templates_lifetime_and_a_provisioners_never_expires() -> None:
    pool = {"kind": "NodePool", "spec": {"template": {"spec": {"expireAfter": "24h", "terminationGracePeriod": "1h"}}}}
    assert lifetime(pool) == {"expireAfter": "24h", "terminationGracePeriod": "1h"}
    assert lifetime({"kind": "NodePool", "spec": {"template": {"spec": {}}}}) == {"expireAfter": "720h"}
    assert lifetime({"kind": "Provisioner", "spec": {"ttlSecondsUntilExpired": 60}}) == {"expireAfter": "Never"}
    assert lifetime(None) == {"expireAfter": "Never"}


def test_claims_are_found_by_the_node_they_launched() -> None:
    registered = {"metadata": {"name": "claim-a"}, "status": {"nodeName": "ip-10-0-0-1"}}
    launching = {"metadata": {"name": "claim-b"}}
    assert [claim_node_name(c) for c in (registered, launching)] == ["ip-10-0-0-1", "claim-b"]


def test_the_termination_time_is_recorded_once_and_then_read_back() -> None:
    deleted = {"metadata": {"deletionTimestamp": rfc3339(NOW)}}
    deadline = node_termination_time(deleted, "90s")
    assert deadline == NOW + dt.timedelta(seconds=90)
    assert termination_annotation(deleted, deadline) == {NODECLAIM_TERMINATION_TIMESTAMP: rfc3339(deadline)}
    recorded = {"metadata": {"deletionTimestamp": rfc3339(NOW), "annotations": {NODECLAIM_TERMINATION_TIMESTAMP: rfc3339(NOW)}}}
    assert node_termination_time(recorded, "90s") == NOW
    assert termination_annotation(recorded, NOW) == {}
    assert node_termination_time(deleted, None) is None


def pod(grace: int, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"p{grace}", "namespace": "default"}
    if deleting:
        meta["deletionTimestamp"] = rfc3339(NOW)
    return {"metadata": meta, "spec": {"terminationGracePeriodSeconds": grace}}


def test_pods_whose_grace_no_longer_fits_are_deleted_with_what_is_left_and_the_rest_wait() -> None:
    short, long, leaving = pod(30), pod(600), pod(6000, deleting=True)
    forced = forced_deletes([short, long, leaving], deadline=NOW + dt.timedelta(seconds=300), now=NOW)
    assert forced.delete == ((long, 300),)
    assert forced.rest == (short, leaving)
    assert forced.next_at == NOW + dt.timedelta(seconds=270)
    assert forced_deletes([long], deadline=None, now=NOW).delete == ()


def node(status: str, since: dt.datetime) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"conditions": [
        {"type": "Ready", "status": status, "lastTransitionTime": rfc3339(since)}]}}


def test_a_node_is_repaired_once_unready_for_its_toleration() -> None:
    sick = node("Unknown", NOW - TOLERATION)
    assert decide(sick, pool_is_healthy=True, now=NOW) == Verdict(repair=True)
    blocked = decide(sick, pool_is_healthy=False, now=NOW)
    assert not blocked.repair and blocked.blocked and blocked.requeue_after
    early = node("False", NOW - TOLERATION + dt.timedelta(minutes=1))
    assert decide(early, pool_is_healthy=False, now=NOW) == Verdict(requeue_after=60.0)   # not due: nothing blocks
    assert decide(node("True", NOW - dt.timedelta(days=1)), pool_is_healthy=True, now=NOW) == Verdict()
    untimed = {"metadata": {"name": "n", "creationTimestamp": rfc3339(NOW - dt.timedelta(minutes=10))},
               "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert decide(untimed, pool_is_healthy=True, now=NOW) == Verdict(requeue_after=20 * 60.0)


@pytest.mark.parametrize(("healthy", "unhealthy", "ok"), [(4, 1, True), (3, 2, False), (2, 1, True), (8, 2, True),
                                                          (7, 3, False), (0, 1, True)])
def test_at_most_20_percent_of_a_nodepool_rounded_up_may_be_unhealthy(healthy: int, unhealthy: int, ok: bool) -> None:
    nodes = [node("True", NOW)] * healthy + [node("False", NOW)] * unhealthy
    assert pool_healthy(nodes) is ok
