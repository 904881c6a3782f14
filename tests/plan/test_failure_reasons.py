"""Why a pod cannot be provisioned, as `karpy plan` (and the FailedProvisioning event) says it: the
resource or the requirement no instance type meets, by name."""

from __future__ import annotations

from tests.builders import pod
from tests.plan.conftest import Plan
from tests.plan.test_scheduling_scenarios import CATALOG, on_demand

ZONE, ARCH, TYPE = "topology.kubernetes.io/zone", "kubernetes.io/arch", "node.kubernetes.io/instance-type"


def _reason(plan: Plan, *documents: dict) -> str:
    run = plan(CATALOG, *documents)
    assert run.code == 0
    (unschedulable,) = run.json["unschedulable"]
    return str(unschedulable["reason"])


def test_an_impossible_zone_is_named(plan: Plan) -> None:
    reason = _reason(plan, on_demand(), pod("a", nodeSelector={ZONE: "zone-z"}))
    assert reason == f"no instance type satisfies {ZONE} In [zone-z]"


def test_an_architecture_no_type_has_is_named(plan: Plan) -> None:
    assert ARCH in _reason(plan, on_demand(), pod("a", nodeSelector={ARCH: "s390x"}))


def test_an_unknown_instance_type_is_named(plan: Plan) -> None:
    assert "huge" in _reason(plan, on_demand(), pod("a", nodeSelector={TYPE: "huge"}))


def test_requirements_met_alone_but_not_together_with_the_requests_name_both(plan: Plan) -> None:
    reason = _reason(plan, on_demand(), pod("a", cpu="3", nodeSelector={TYPE: "small"}))
    assert reason.startswith("no instance type satisfied resources {cpu=3")
    assert f"{TYPE} In [small]" in reason


def test_a_zone_outside_the_provisioners_zones_names_both(plan: Plan) -> None:
    prov = on_demand(requirements=[{"key": ZONE, "operator": "In", "values": ["zone-a"]}])
    reason = _reason(plan, prov, pod("a", nodeSelector={ZONE: "zone-z"}))
    assert "zone-z" in reason and "zone-a" in reason
