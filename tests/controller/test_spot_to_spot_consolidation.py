"""Spot-to-spot consolidation (v1's SpotToSpotConsolidation gate, pkg/controllers/disruption/consolidation_test.go):
a spot node is replaced by a cheaper spot node only with the gate on, and, alone, only when at least 15 spot types
are cheaper than it; the replacement then launches from the 15 cheapest. Decided in process, as `karpy plan
--consolidate` decides."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from karpy.controller.consolidation.decisions import Consolidator
from karpy.plan.documents import Document
from karpy.plan.inputs import from_documents
from tests.builders import catalog, instance_type, node, pod, provisioner
from tests.expectations import expect_consolidated


def spot_catalog(cheaper: int) -> dict[str, Any]:
    """A spot type `big` ($0.40/h spot) and `cheaper` 2-cpu types, each cheaper than it on spot."""
    return catalog(instance_type("big", cpu="8", memory="32Gi", price=1.0, capacity_types=("on-demand", "spot")),
                   *[instance_type(f"t{i:02d}", cpu="2", memory="8Gi", price=round(0.2 + 0.01 * i, 2),
                                   capacity_types=("on-demand", "spot")) for i in range(cheaper)])


def decide(cheaper: int) -> Any:
    """The gated decision itself, to see what the replacement may launch from."""
    loaded = from_documents([Document("<test>", i, o) for i, o in enumerate(documents(cheaper), 1)], catalog="fake-400")
    return Consolidator(loaded.snapshot, loaded.pdbs, now=dt.datetime.now(dt.timezone.utc), spot_to_spot=True).plan()


def documents(cheaper: int) -> list[dict[str, Any]]:
    big = node("big", provisioner="default", instance_type="big", zone="zone-a", capacity_type="spot", initialized=True,
               allocatable={"cpu": "8", "memory": "32Gi", "pods": "110"}, created="2024-01-01T00:00:00Z")
    return [spot_catalog(cheaper), provisioner("default", consolidation={"enabled": True}), big,
            pod("p", cpu="1", node_name="big")]


def consolidate(cheaper: int, **options: Any) -> dict[str, Any]:
    return expect_consolidated(*documents(cheaper), catalog="fake-400", **options)


def test_without_the_gate_a_spot_node_is_only_deleted() -> None:
    run = consolidate(16)
    assert run["actions"] == []
    assert run["kept"][0]["reason"].endswith("spot nodes are only deleted, never replaced")


def test_with_the_gate_a_spot_node_is_replaced_from_the_15_cheapest_spot_types() -> None:
    run = consolidate(16, spot_to_spot=True)
    (action,) = run["actions"]
    assert action["type"] == "replace" and action["replacement"]["capacityType"] == "spot"
    assert action["replacement"]["instanceType"] == "t00"
    assert action["replacement"]["pricePerHour"] == pytest.approx(0.08)
    (decided,) = decide(16).actions
    assert [t.name for t in decided.replacement.planned.options] == [f"t{i:02d}" for i in range(15)]   # not t15


def test_with_the_gate_fewer_than_15_cheaper_spot_types_keep_the_node() -> None:
    run = consolidate(3, spot_to_spot=True)
    assert run["actions"] == []
    assert run["kept"][0]["reason"] == ("no cheaper fit: SpotToSpotConsolidation requires 15 cheaper instance type "
                                        "options than the current candidate to consolidate, got 3")


def test_with_the_gate_several_spot_nodes_go_onto_one_cheaper_spot_node_without_the_15_type_rule() -> None:
    """Multi-node consolidation: one cheaper spot type is enough (v1 applies the 15-type rule to a single node)."""
    # each nearly full (a 700m pod of a 1-cpu allocatable), so neither pod fits beside the other: one 2-cpu node holds both
    spot = [node(f"s{i}", provisioner="default", instance_type="big", zone="zone-a", capacity_type="spot",
                 initialized=True, allocatable={"cpu": "1", "memory": "32Gi", "pods": "110"}, created="2024-01-01T00:00:00Z")
            for i in range(2)]
    docs = [spot_catalog(1), provisioner("default", consolidation={"enabled": True}), *spot,
            pod("a", cpu="700m", node_name="s0"), pod("b", cpu="700m", node_name="s1")]
    gated = expect_consolidated(*docs, catalog="fake-400", spot_to_spot=True)
    (action,) = gated["actions"]
    assert action["type"] == "replace" and sorted(action["nodes"]) == ["s0", "s1"]
    assert (action["replacement"]["instanceType"], action["replacement"]["capacityType"]) == ("t00", "spot")
    assert expect_consolidated(*docs, catalog="fake-400")["actions"] == []     # without the gate: only deleted
