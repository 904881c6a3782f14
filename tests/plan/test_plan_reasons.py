"""`karpy plan` says why each new node exists (`reasons`) and, with `-o wide`, which pods it runs."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from tests.builders import catalog, instance_type, pod, provisioner
from tests.expectations import expect_provisioned
from tests.plan.conftest import Plan

CATALOG = catalog(
    instance_type("small", cpu="2", memory="8Gi", price=0.10, zones=("zone-a", "zone-b")),
    instance_type("gpu", cpu="4", memory="16Gi", price=1.00, zones=("zone-a", "zone-b"),
                  capacity={"nvidia.com/gpu": "1"}),
)
WEB = {"app": "web"}


def nodes(*docs: dict[str, Any]) -> list[dict[str, Any]]:
    return list(expect_provisioned(CATALOG, *docs).plan["nodes"])


def test_a_node_for_room_alone_says_capacity() -> None:
    (node,) = nodes(provisioner("default"), pod("a", cpu="500m"), pod("b", cpu="500m"))
    assert node["reasons"] == ["capacity"]


def test_a_gpu_pod_names_the_resource() -> None:
    (node,) = nodes(provisioner("default"), pod("train", cpu="1", requests={"nvidia.com/gpu": "1"}))
    assert node["instanceType"] == "gpu"
    assert node["reasons"] == ["resource nvidia.com/gpu (default/train)"]


def test_a_zone_spread_names_the_domain_of_each_node() -> None:
    spread = [{"maxSkew": 1, "topologyKey": wk.ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": WEB}}]
    planned = nodes(provisioner("default"), *(pod(f"web-{i}", cpu="1500m", labels=WEB, topologySpreadConstraints=spread)
                                              for i in range(2)))
    assert sorted(n["zone"] for n in planned) == ["zone-a", "zone-b"]
    for n in planned:
        (only,) = n["pods"]
        assert n["reasons"] == [f"topology spread over {wk.ZONE} (domain {n['zone']}) ({only})"]


def test_pod_anti_affinity_names_the_topology_key() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": wk.HOSTNAME, "labelSelector": {"matchLabels": {"app": "db"}}}]}}
    planned = nodes(provisioner("default"), *(pod(f"db-{i}", cpu="100m", labels={"app": "db"}, affinity=anti)
                                              for i in range(3)))
    assert len(planned) == 3
    assert sorted(r for n in planned for r in n["reasons"]) == [
        f"pod anti-affinity on {wk.HOSTNAME} (default/db-{i})" for i in range(3)]


def test_a_tolerated_taint_and_a_zone_selector_are_named_with_their_pods() -> None:
    tainted = provisioner("dedicated", taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}])
    tolerant = [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    (node,) = nodes(tainted, pod("t-0", cpu="500m", tolerations=tolerant),
                    pod("t-1", cpu="500m", tolerations=tolerant, nodeSelector={wk.ZONE: "zone-b"}))
    assert node["zone"] == "zone-b"
    assert node["reasons"] == ["taint team=ml:NoSchedule (default/t-0 and 1 more)",
                               f"node selector {wk.ZONE} In [zone-b] (default/t-1)"]


def test_a_heavier_provisioners_limits_are_named_on_the_nodes_they_push_elsewhere() -> None:
    """`first` (tried first) may launch 2 cpu: one small node for two of the pods; the third goes to `second`."""
    planned = nodes(provisioner("first", weight=10, limits={"resources": {"cpu": "2"}}), provisioner("second"),
                    *(pod(f"p{i}", cpu="900m") for i in range(3)))
    by_provisioner = {n["provisioner"]: n for n in planned}
    assert by_provisioner["first"]["reasons"] == ["capacity"]
    (pushed,) = by_provisioner["second"]["pods"]
    assert by_provisioner["second"]["reasons"] == [f"limits of provisioner first (remaining cpu=0) ({pushed})"]


@pytest.mark.parametrize(("output", "pod_names"), [pytest.param("table", False, id="table"),
                                                   pytest.param("wide", True, id="wide")])
def test_the_table_shows_reasons_and_wide_shows_pods(plan: Plan, output: str, pod_names: bool) -> None:
    run = plan(CATALOG, provisioner("default"), pod("train", cpu="1", requests={"nvidia.com/gpu": "1"}),
               output=output)
    assert run.code == 0, run.err
    header, row = run.out.splitlines()[:2]
    assert header.split()[-3:] == (["REASONS", "POD", "NAMES"] if pod_names else ["$/HOUR", "PODS", "REASONS"])
    assert "resource nvidia.com/gpu (default/train)" in row
    assert row.rstrip().endswith("default/train") == pod_names
