"""The cost model: a node's true cost (list price, burstable credits, per-node costs) and the plans it makes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from bench.scheduling import diverse_pods
from karpy.apis.v1alpha1 import AWSNodeTemplateSpec
from karpy.controller.cloudprovider.catalog import CatalogError, built_in, catalog_from_document
from karpy.controller.cloudprovider.types import Burst
from karpy.controller.provisioning.scheduling.cost import (
    PUBLIC_IPV4_PER_HOUR,
    VOLUME_PRICE_PER_GB_MONTH,
    credits_per_hour,
    node_costs,
    sustained_cpu,
)
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.controller.provisioning.scheduling.scheduler import Scheduler
from karpy.plan.inputs import load
from karpy.plan.render import plan_json
from tests.builders import catalog, deployment, instance_type, pod, provisioner
from tests.plan.conftest import Plan

BASELINE, CREDIT = 0.1, 0.05
# a cheap burstable type beside a dearer one that sustains its full speed
BURSTY = instance_type("bursty", cpu="2", memory="4Gi", price=0.01,
                       burstable={"baseline": BASELINE, "mode": "unlimited", "creditPricePerVCPUHour": CREDIT})
STEADY = instance_type("steady", cpu="2", memory="4Gi", price=0.03)
THROTTLED = instance_type("throttled", cpu="2", memory="4Gi", price=0.005,
                          burstable={"baseline": 0.2, "mode": "standard", "creditPricePerVCPUHour": CREDIT})
PER_NODE = node_costs(None).per_hour


def types(*entries: dict[str, Any]) -> dict[str, Any]:
    return {t.name: t for t in catalog_from_document(catalog(*entries)).instance_types()}


def test_an_unlimited_burstable_type_pays_credits_for_the_load_above_its_baseline() -> None:
    bursty = types(BURSTY)["bursty"]
    baseline = 2000 * BASELINE                                   # thousandths of a cpu the type sustains for free
    assert credits_per_hour(bursty, int(baseline)) == 0.0
    assert credits_per_hour(bursty, 1000) == pytest.approx((1000 - baseline) / 1000 * CREDIT)
    assert credits_per_hour(types(STEADY)["steady"], 2000) == 0.0


def test_a_standard_burstable_type_sustains_only_its_baseline() -> None:
    throttled = types(THROTTLED)["throttled"]
    assert sustained_cpu(throttled) == int(2000 * 0.2)
    assert credits_per_hour(throttled, 2000) == 0.0              # throttled, not billed


def test_per_node_costs_come_from_the_block_devices_or_the_ami_family() -> None:
    gp3, gp2 = VOLUME_PRICE_PER_GB_MONTH["gp3"], VOLUME_PRICE_PER_GB_MONTH["gp2"]
    assert node_costs(None).volumes == pytest.approx(20 * gp3 / 730)                   # AL2's 20 GiB gp3
    assert node_costs(None).public_ipv4 == PUBLIC_IPV4_PER_HOUR
    bottlerocket = AWSNodeTemplateSpec.model_validate({"amiFamily": "Bottlerocket"})
    assert node_costs(bottlerocket).volumes == pytest.approx((4 + 20) * gp3 / 730)
    mapped = AWSNodeTemplateSpec.model_validate({"blockDeviceMappings": [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp2"}}]})
    costs = node_costs(mapped, operator=0.25, public_ipv4=False)
    assert costs.per_hour == pytest.approx(100 * gp2 / 730 + 0.25)


def test_the_aws_catalog_carries_the_burstable_economics() -> None:
    aws = {t.name: t for t in built_in("aws").instance_types()}
    assert aws["t3a.micro"].burst == Burst(baseline=0.1, unlimited=True, credit_price=0.05)
    assert aws["t4g.small"].burst == Burst(baseline=0.2, unlimited=True, credit_price=0.04)
    assert aws["t2.small"].burst == Burst(baseline=0.2, unlimited=False, credit_price=0.05)
    assert aws["m6a.large"].burst is None


@pytest.mark.parametrize("burstable, path", [
    pytest.param({"baseline": 2}, "instanceTypes[0].burstable.baseline", id="baseline-above-one"),
    pytest.param({"baseline": 0.1, "mode": "sometimes"}, "instanceTypes[0].burstable.mode", id="unknown-mode"),
    pytest.param({"baseline": 0.1, "creditPricePerVCPUHour": -1}, "instanceTypes[0].burstable.creditPricePerVCPUHour",
                 id="negative-price"),
    pytest.param({"baseline": 0.1, "credits": 3}, "instanceTypes[0].burstable.credits", id="unknown-field"),
])
def test_a_bad_burstable_block_is_refused_with_its_path(burstable: dict[str, Any], path: str) -> None:
    with pytest.raises(CatalogError) as caught:
        catalog_from_document(catalog(instance_type("t", burstable=burstable)))
    assert [e.path for e in caught.value.errors] == [path]


def test_a_light_pod_takes_the_burstable_type_and_a_heavy_one_the_steady_type(plan: Plan) -> None:
    light = plan(catalog(BURSTY, STEADY), provisioner("default"), pod("light", cpu="100m")).node_of("default/light")
    heavy = plan(catalog(BURSTY, STEADY), provisioner("default"), pod("heavy", cpu="1500m")).node_of("default/heavy")
    assert light["instanceType"] == "bursty" and light["costPerHour"] == pytest.approx(0.01 + PER_NODE, abs=1e-6)
    # on the burstable type the heavy pod would pay credits for 1.5 cpu less the baseline
    assert 0.01 + (1500 - 2000 * BASELINE) / 1000 * CREDIT > 0.03
    assert heavy["instanceType"] == "steady" and heavy["costPerHour"] == pytest.approx(0.03 + PER_NODE, abs=1e-6)


def test_a_throttled_type_holds_no_more_cpu_than_its_baseline(plan: Plan) -> None:
    small = plan(catalog(THROTTLED, STEADY), provisioner("default"), pod("small", cpu="300m")).node_of("default/small")
    big = plan(catalog(THROTTLED, STEADY), provisioner("default"), pod("big", cpu="500m")).node_of("default/big")
    assert small["instanceType"] == "throttled"      # 300m of its 400m baseline
    assert big["instanceType"] == "steady"           # past the baseline, though the type has 2 cpu


def test_ten_one_cpu_pods_take_at_most_two_nodes_and_cost_no_more_than_the_greedy(tmp_path: Any) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default"), deployment("inflate", replicas=10, cpu="1")]))
    best, greedy = (plan_json(Scheduler(load([str(path)], catalog="aws").snapshot, packing=PackingOptions(optimize=o)).solve())
                    for o in (True, False))
    assert best["summary"]["newNodes"] <= 2 and best["summary"]["scheduled"] == 10
    assert best["summary"]["costPerHour"] == pytest.approx(sum(n["costPerHour"] for n in best["nodes"]), abs=1e-6)
    assert best["summary"]["costPerHour"] <= greedy["summary"]["costPerHour"] + 1e-9


def test_the_same_plan_comes_out_twice_even_beside_a_cpu_hog(tmp_path: Any) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default"), *diverse_pods(200)], sort_keys=False))

    def run() -> dict[str, Any]:
        return plan_json(Scheduler(load([str(path)], catalog="fake-400").snapshot, packing=PackingOptions()).solve())

    first = run()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        second = run()
    finally:
        hog.kill()
        hog.wait()
    assert first == second


def test_a_plan_the_safety_cap_cuts_short_says_so_and_keeps_a_whole_plan(tmp_path: Any) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default"), *diverse_pods(50)], sort_keys=False))
    snapshot = load([str(path)], catalog="fake-400").snapshot
    capped = Scheduler(snapshot, packing=PackingOptions(max_seconds=0.0)).solve()
    greedy = Scheduler(snapshot, packing=PackingOptions(optimize=False)).solve()
    assert len(capped.cut_short) == 1 and "stopped at its 0 s cap" in capped.cut_short[0]
    assert sorted(p.key for n in capped.new_nodes for p in n.pods) == sorted(p.key for n in greedy.new_nodes for p in n.pods)
    assert not Scheduler(snapshot).solve().cut_short
