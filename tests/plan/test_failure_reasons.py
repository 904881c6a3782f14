"""Why a pod cannot be provisioned, as `karpy plan` (and the FailedProvisioning event) says it: the
resource or the requirement no instance type meets, by name."""

from __future__ import annotations

from tests.builders import pod
from tests.expectations import expect_not_scheduled, expect_provisioned
from tests.plan.test_scheduling_scenarios import CATALOG, on_demand

ZONE, ARCH, TYPE = "topology.kubernetes.io/zone", "kubernetes.io/arch", "node.kubernetes.io/instance-type"


def _reason(*documents: dict) -> str:
    """Why pod `a`, the only pod, is not scheduled."""
    return expect_not_scheduled(expect_provisioned(CATALOG, *documents), "default/a")


def test_an_impossible_zone_is_named() -> None:
    reason = _reason(on_demand(), pod("a", nodeSelector={ZONE: "zone-z"}))
    assert reason == f"no instance type satisfies {ZONE} In [zone-z]"


def test_an_architecture_no_type_has_is_named() -> None:
    assert ARCH in _reason(on_demand(), pod("a", nodeSelector={ARCH: "s390x"}))


def test_an_unknown_instance_type_is_named() -> None:
    assert "huge" in _reason(on_demand(), pod("a", nodeSelector={TYPE: "huge"}))


def test_requirements_met_alone_but_not_together_with_the_requests_name_both() -> None:
    reason = _reason(on_demand(), pod("a", cpu="3", nodeSelector={TYPE: "small"}))
    assert reason.startswith("no instance type satisfied resources {cpu=3")
    assert f"{TYPE} In [small]" in reason


def test_a_zone_outside_the_provisioners_zones_names_both() -> None:
    prov = on_demand(requirements=[{"key": ZONE, "operator": "In", "values": ["zone-a"]}])
    reason = _reason(prov, pod("a", nodeSelector={ZONE: "zone-z"}))
    assert "zone-z" in reason and "zone-a" in reason
