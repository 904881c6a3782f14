"""Quantities of any size: a pod no instance type can hold is unschedulable with its reason, the pods
beside it are planned, and limits far past int64 (in thousandths) bound nothing they should not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.builders import catalog, instance_type, node, pod, provisioner
from tests.expectations import expect_not_scheduled, expect_provisioned, expect_scheduled

# Karpenter's scheduling benchmark gives its provisioner these limits; in thousandths of bytes the memory
# limit is past what an int64 holds.
BENCHMARK_LIMITS = {"limits": {"resources": {"cpu": "10000000", "memory": "10000000Gi"}}}


@pytest.mark.parametrize("limits", [pytest.param({}, id="no-limits"), pytest.param(BENCHMARK_LIMITS, id="huge-limits")])
def test_pod_asking_for_1e30_bytes_is_unschedulable_and_its_neighbours_are_planned(limits: dict) -> None:
    run = expect_provisioned(provisioner("default", **limits), pod("poison", cpu=None, memory="1e30"),
               pod("healthy-a", cpu="500m"), pod("healthy-b", cpu="1", memory="1Gi"))
    assert expect_not_scheduled(run, "default/poison") == "no instance type satisfies memory=1e30"
    expect_scheduled(run, "default/healthy-a")
    expect_scheduled(run, "default/healthy-b")
    assert run.plan["summary"]["scheduled"] == 2


def test_huge_provisioner_limits_plan_like_no_limits() -> None:
    pods = [pod(f"web-{i}", cpu="1", memory="2Gi") for i in range(5)]
    limited = expect_provisioned(provisioner("default", **BENCHMARK_LIMITS), *pods)
    unlimited = expect_provisioned(provisioner("default"), *pods)
    assert limited.plan["nodes"] == unlimited.plan["nodes"]
    assert limited.plan["summary"]["scheduled"] == 5


def test_limits_larger_than_int64_still_bound_what_is_launched() -> None:
    # two types, both far past int64 in thousandths; the limit leaves room for the small one only
    big = {"cpu": "2", "memory": "1e30", "pods": "110"}
    huge = {"cpu": "2", "memory": "3e30", "pods": "110"}
    types = catalog({"name": "big", "capacity": big, "offerings": [{"zone": "us-east-1a", "price": 2}]},
                    {"name": "huge", "capacity": huge, "offerings": [{"zone": "us-east-1a", "price": 1}]})
    run = expect_provisioned(types, provisioner("default", limits={"resources": {"memory": "2e30"}}), pod("p", cpu="1", memory="1e29"))
    assert expect_scheduled(run, "default/p")["instanceType"] == "big"


def test_existing_node_with_huge_allocatable_takes_pods() -> None:
    run = expect_provisioned(provisioner("default"), node("giant", allocatable={"cpu": "4", "memory": "1e40", "pods": "110"}),
               pod("p", cpu="1", memory="1e35"))
    assert run.plan["existingNodes"] == [{"name": "giant", "pods": ["default/p"]}]


def test_catalog_type_with_huge_memory_is_chosen_exactly() -> None:
    run = expect_provisioned(catalog(instance_type("small", memory="8Gi", price=0.1), instance_type("vast", memory="1e30", price=1)),
               provisioner("default"), pod("needs-1e29", cpu="1", memory="1e29"), pod("tiny", cpu="100m"))
    assert expect_scheduled(run, "default/needs-1e29")["instanceType"] == "vast"
    assert expect_scheduled(run, "default/tiny")["instanceType"] in ("small", "vast")


@pytest.mark.slow      # runs karpy plan as a process
def test_plan_command_exits_0_without_traceback_on_the_poison_pod(tmp_path: Path) -> None:
    path = tmp_path / "poison.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default", **BENCHMARK_LIMITS),
                                        pod("poison", cpu=None, memory="1e30"), pod("healthy", cpu="500m")]))
    result = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "-o", "json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = json.loads(result.stdout)
    assert [u["pod"] for u in out["unschedulable"]] == ["default/poison"]
    assert [p for n in out["nodes"] for p in n["pods"]] == ["default/healthy"]
