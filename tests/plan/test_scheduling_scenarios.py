"""Karpenter's scheduling behaviour, scenario by scenario, planned in process by `expect_provisioned` (the core
`karpy plan` runs, read through its JSON); the command line itself is tested in test_plan_cli.py.

Most scenarios use a small InstanceTypeCatalog so the expected choice is plain;
a few use the built-in `aws` catalog as a user would.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpy.controller.provisioning.scheduling.cost import node_costs
from tests.builders import (
    catalog,
    daemonset,
    deployment,
    instance_type,
    node,
    pod,
    pods,
    provisioner,
)
from tests.expectations import expect_not_scheduled, expect_provisioned, expect_scheduled

ZONES = ("zone-a", "zone-b", "zone-c")
SMALL = instance_type("small", cpu="2", memory="4Gi", pods="10", price=0.1, zones=ZONES, capacity_types=("on-demand", "spot"))
MEDIUM = instance_type("medium", cpu="4", memory="8Gi", pods="20", price=0.2, zones=ZONES, capacity_types=("on-demand", "spot"))
LARGE = instance_type("large", cpu="16", memory="32Gi", pods="110", price=0.8, zones=ZONES, capacity_types=("on-demand",))
GPU = instance_type("gpu", cpu="8", memory="32Gi", pods="58", price=3.0, zones=("zone-a",), capacity={"nvidia.com/gpu": "1"},
                    labels={"karpy.dev/gpu-kind": "t4"})
ARM = instance_type("arm", cpu="4", memory="8Gi", pods="20", price=0.25, zones=ZONES, labels={"kubernetes.io/arch": "arm64"})
CATALOG = catalog(SMALL, MEDIUM, LARGE, GPU, ARM)


def on_demand(name: str = "default", **spec: Any) -> dict[str, Any]:
    spec.setdefault("requirements", []).append({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]})
    return provisioner(name, **spec)


def test_the_demo_fits_ten_one_cpu_pods_on_at_most_two_nodes_by_default() -> None:
    # what a node costs (its credits, volume and address besides its price) packs the pods densely, with no flag
    run = expect_provisioned(provisioner("default", requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                      "values": ["spot", "on-demand"]}], limits={"resources": {"cpu": 1000}},
                           ttlSecondsAfterEmpty=30),
               deployment("inflate", replicas=10, cpu="1"))
    out = run.plan
    assert out["summary"] == {"pods": 10, "scheduled": 10, "newNodes": len(out["nodes"]),
                              "pricePerHour": round(sum(n["pricePerHour"] for n in out["nodes"]), 6),
                              "costPerHour": round(sum(n["costPerHour"] for n in out["nodes"]), 6)}
    assert len(out["nodes"]) <= 2
    assert sorted(p for n in out["nodes"] for p in n["pods"]) == sorted(f"default/inflate-{i}" for i in range(10))
    node_ = out["nodes"][0]
    assert node_["capacityType"] == "spot"                      # the demo allows spot, and spot is cheaper
    assert node_["instanceType"] == node_["instanceTypeOptions"][0]
    assert 1 < len(node_["instanceTypeOptions"]) <= 60
    for key in ("topology.kubernetes.io/zone", "node.kubernetes.io/instance-type", "kubernetes.io/arch", "kubernetes.io/os",
                "karpenter.sh/capacity-type", "karpenter.sh/provisioner-name"):
        assert key in node_["labels"]
    assert node_["labels"]["node.kubernetes.io/instance-type"] == node_["instanceType"]
    assert node_["labels"]["topology.kubernetes.io/zone"] == node_["zone"]
    assert node_["labels"]["karpenter.sh/provisioner-name"] == "default"
    assert node_["labels"]["kubernetes.io/arch"] == "amd64"     # the webhook's default, applied by plan too


def test_aws_defaulting_picks_on_demand_when_the_provisioner_says_nothing() -> None:
    run = expect_provisioned(provisioner("default"), pod("web", cpu="1"))
    assert run.plan["nodes"][0]["capacityType"] == "on-demand"


def test_cheapest_instance_type_that_fits_is_chosen() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("a", cpu="3"))
    n = run.plan["nodes"][0]
    assert n["instanceType"] == "medium"
    assert n["instanceTypeOptions"] == ["medium", "arm", "large", "gpu"]   # no arch default outside the aws catalog
    assert n["pricePerHour"] == 0.2
    assert n["zone"] == "zone-a"                                   # equal prices: ties broken by zone name


def test_options_are_every_compatible_type_cheapest_first() -> None:
    run = expect_provisioned(CATALOG, on_demand(requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
               pod("a", cpu="1"))
    assert run.plan["nodes"][0]["instanceTypeOptions"] == ["small", "medium", "large", "gpu"]


def test_pods_that_fit_nowhere_say_which_resource() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("big", cpu="100"), pod("ok", cpu="1"))
    assert run.plan["unschedulable"] == [{"pod": "default/big", "reason": "no instance type satisfies cpu=100"}]
    assert run.plan["summary"]["scheduled"] == 1


def test_unknown_extended_resource_is_explained() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("fpga", cpu="1", requests={"example.com/fpga": "1"}))
    assert "example.com/fpga" in run.plan["unschedulable"][0]["reason"]


def test_gpu_pods_get_gpu_nodes_and_others_do_not() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("train", cpu="1", requests={"nvidia.com/gpu": "1"}), pod("web", cpu="1"))
    assert expect_scheduled(run, "default/train")["instanceType"] == "gpu"
    assert expect_scheduled(run, "default/web")["instanceType"] == "gpu"       # it fits in the gpu node's spare room: free
    assert expect_scheduled(run, "default/train")["labels"]["karpy.dev/gpu-kind"] == "t4"   # a catalog-defined label
    assert expect_provisioned(CATALOG, on_demand(), pod("web", cpu="1")).plan["nodes"][0]["instanceType"] == "small"


def test_init_containers_count_by_their_maximum() -> None:
    p = pod("init", cpu="1", initContainers=[{"name": "setup", "image": "x", "resources": {"requests": {"cpu": "3"}}}])
    assert expect_provisioned(CATALOG, on_demand(), p).plan["nodes"][0]["instanceType"] == "medium"


def test_pod_overhead_is_added() -> None:
    p = pod("sandboxed", cpu="1500m", overhead={"cpu": "1"})
    assert expect_provisioned(CATALOG, on_demand(), p).plan["nodes"][0]["instanceType"] == "medium"


# --- node selection --------------------------------------------------------------------------

def test_node_selector_on_zone_pins_the_node() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("a", nodeSelector={"topology.kubernetes.io/zone": "zone-c"}))
    assert run.plan["nodes"][0]["zone"] == "zone-c"


def test_deprecated_zone_label_is_understood() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("a", nodeSelector={"failure-domain.beta.kubernetes.io/zone": "zone-b"}))
    assert run.plan["nodes"][0]["zone"] == "zone-b"


def test_node_selector_on_arch_picks_an_arm_type() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("a", nodeSelector={"kubernetes.io/arch": "arm64"}))
    assert run.plan["nodes"][0]["instanceType"] == "arm"
    assert run.plan["nodes"][0]["labels"]["kubernetes.io/arch"] == "arm64"


def test_custom_label_must_be_offered_by_the_provisioner() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("a", nodeSelector={"team": "payments"}))
    assert "team does not have known values" in expect_not_scheduled(run, "default/a")
    run = expect_provisioned(CATALOG, on_demand(labels={"team": "payments"}), pod("a", nodeSelector={"team": "payments"}))
    assert run.plan["nodes"][0]["labels"]["team"] == "payments"


def test_provisioner_requirements_put_a_satisfying_label_on_the_node() -> None:
    prov = on_demand(requirements=[{"key": "team", "operator": "In", "values": ["a"]},
                                   {"key": "tier", "operator": "NotIn", "values": ["batch"]},
                                   {"key": "generation", "operator": "Gt", "values": ["5"]},
                                   {"key": "gone", "operator": "DoesNotExist"}])
    labels = expect_provisioned(CATALOG, prov, pod("a")).plan["nodes"][0]["labels"]
    assert labels["team"] == "a"
    assert labels["tier"] != "batch"
    assert int(labels["generation"]) > 5
    assert "gone" not in labels


def test_required_node_affinity_falls_through_or_terms() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-z"]}]},
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]},
    ]}}}
    assert expect_provisioned(CATALOG, on_demand(), pod("a", affinity=affinity)).plan["nodes"][0]["zone"] == "zone-b"


def test_preferred_node_affinity_is_honoured_when_possible_and_relaxed_when_not() -> None:
    def preferring(*zones: str) -> dict[str, Any]:
        return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100 - i, "preference": {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}]}} for i, z in enumerate(zones)]}}

    run = expect_provisioned(CATALOG, on_demand(), pod("a", affinity=preferring("zone-c")), pod("b", affinity=preferring("zone-nowhere", "zone-b")),
               pod("c", affinity=preferring("zone-nowhere")))
    assert expect_scheduled(run, "default/a")["zone"] == "zone-c"
    assert expect_scheduled(run, "default/b")["zone"] == "zone-b"
    assert run.plan["summary"]["scheduled"] == 3


def test_requirements_that_cannot_meet_stay_unschedulable() -> None:
    run = expect_provisioned(CATALOG, on_demand(), pod("a", nodeSelector={"topology.kubernetes.io/zone": "zone-z"}))
    expect_not_scheduled(run, "default/a")


# --- taints -------------------------------------------------------------------------------------

def test_provisioner_taints_keep_away_pods_that_do_not_tolerate_them() -> None:
    prov = on_demand(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    run = expect_provisioned(CATALOG, prov, pod("plain"),
               pod("tolerant", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]))
    assert "did not tolerate taint dedicated=gpu:NoSchedule" in expect_not_scheduled(run, "default/plain")
    assert expect_scheduled(run, "default/tolerant")["taints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]


def test_startup_taints_do_not_block_and_are_put_on_the_node() -> None:
    prov = on_demand(startupTaints=[{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}])
    run = expect_provisioned(CATALOG, prov, pod("a"))
    assert run.plan["nodes"][0]["taints"] == [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]


def test_prefer_no_schedule_taints_are_tolerated_after_relaxation() -> None:
    prov = on_demand(taints=[{"key": "spare", "effect": "PreferNoSchedule"}])
    assert expect_provisioned(CATALOG, prov, pod("a")).plan["summary"]["scheduled"] == 1


def test_provisioner_weight_orders_the_choice() -> None:
    run = expect_provisioned(CATALOG, on_demand("light", weight=10), on_demand("heavy", weight=50), on_demand("unweighted"), pod("a"))
    assert run.plan["nodes"][0]["provisioner"] == "heavy"


def test_a_pod_falls_back_to_the_next_provisioner() -> None:
    run = expect_provisioned(CATALOG, on_demand("tainted", weight=50, taints=[{"key": "k", "effect": "NoSchedule"}]), on_demand("open"), pod("a"))
    assert run.plan["nodes"][0]["provisioner"] == "open"


# --- topology ----------------------------------------------------------------------------------

def spread(key: str, labels: dict[str, str], when: str = "DoNotSchedule", skew: int = 1) -> list[dict[str, Any]]:
    return [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": {"matchLabels": labels}}]


def test_zone_spread_puts_pods_in_every_zone() -> None:
    web = [pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=spread("topology.kubernetes.io/zone", {"app": "web"}))
           for i in range(6)]
    run = expect_provisioned(CATALOG, on_demand(), *web)
    zones = [expect_scheduled(run, f"default/web-{i}")["zone"] for i in range(6)]
    assert sorted(zones) == ["zone-a", "zone-a", "zone-b", "zone-b", "zone-c", "zone-c"]


def test_zone_spread_counts_pods_already_running() -> None:
    existing = [node("n-a", zone="zone-a", allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"}),
                pod("old-0", labels={"app": "web"}, node_name="n-a"), pod("old-1", labels={"app": "web"}, node_name="n-a")]
    web = [pod(f"web-{i}", cpu="1", labels={"app": "web"},
               topologySpreadConstraints=spread("topology.kubernetes.io/zone", {"app": "web"})) for i in range(2)]
    run = expect_provisioned(CATALOG, on_demand(), *existing, *web)
    assert sorted(expect_scheduled(run, f"default/web-{i}")["zone"] for i in range(2)) == ["zone-b", "zone-c"]


def test_spread_ignores_terminal_and_terminating_pods() -> None:
    existing = [node("n-a", zone="zone-a", allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"}),
                pod("done", labels={"app": "web"}, node_name="n-a", phase="Succeeded")]
    web = pod("web", cpu="1", labels={"app": "web"}, nodeSelector={"topology.kubernetes.io/zone": "zone-a"},
              topologySpreadConstraints=spread("topology.kubernetes.io/zone", {"app": "web"}))
    assert expect_provisioned(CATALOG, on_demand(), *existing, web).plan["summary"]["scheduled"] == 1


def test_hostname_spread_puts_one_pod_per_node() -> None:
    web = [pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=spread("kubernetes.io/hostname", {"app": "web"}))
           for i in range(4)]
    run = expect_provisioned(CATALOG, on_demand(), *web)
    assert run.plan["summary"]["newNodes"] == 4


def test_schedule_anyway_spread_is_relaxed_when_it_cannot_be_met() -> None:
    web = [pod(f"web-{i}", labels={"app": "web"}, nodeSelector={"topology.kubernetes.io/zone": "zone-a"},
               topologySpreadConstraints=spread("topology.kubernetes.io/zone", {"app": "web"}, when="ScheduleAnyway"))
           for i in range(3)]
    run = expect_provisioned(CATALOG, on_demand(), *web)
    assert run.plan["summary"]["scheduled"] == 3


def test_do_not_schedule_spread_leaves_pods_pending_when_it_cannot_be_met() -> None:
    web = [pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=spread("topology.kubernetes.io/zone", {"app": "web"}))
           for i in range(3)]
    prov = on_demand(requirements=[{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}])
    existing = [node("n-b", zone="zone-b", allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"}, unschedulable=True)]
    run = expect_provisioned(CATALOG, prov, *existing, *web)
    assert run.plan["summary"]["scheduled"] == 1     # zone-b exists (a node is there) but nothing can be placed in it
    assert "topology spread" in run.plan["unschedulable"][0]["reason"]


def test_capacity_type_spread() -> None:
    web = [pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=spread("karpenter.sh/capacity-type", {"app": "web"}))
           for i in range(2)]
    run = expect_provisioned(CATALOG, provisioner("default", requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                             "values": ["spot", "on-demand"]}]), *web)
    assert sorted(expect_scheduled(run, f"default/web-{i}")["capacityType"] for i in range(2)) == ["on-demand", "spot"]


def test_pod_anti_affinity_on_hostname_separates_pods() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    db = [pod(f"db-{i}", labels={"app": "db"}, affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
          for i in range(3)]
    run = expect_provisioned(CATALOG, on_demand(), *db, pod("other"))
    assert run.plan["summary"]["newNodes"] == 3
    assert len({expect_scheduled(run, f"default/db-{i}")["name"] for i in range(3)}) == 3


def test_anti_affinity_is_honoured_in_the_inverse_direction() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": "topology.kubernetes.io/zone"}
    existing = [node("n-a", zone="zone-a", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}),
                pod("quiet", labels={"app": "quiet"}, node_name="n-a",
                    affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})]
    run = expect_provisioned(CATALOG, on_demand(), *existing, pod("noisy", labels={"app": "noisy"}))
    assert expect_scheduled(run, "default/noisy")["zone"] != "zone-a"
    assert run.plan["existingNodes"] == []


def test_pod_affinity_follows_pods_already_running() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}
    existing = [node("n-b", zone="zone-b", allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"}),
                pod("cache", labels={"app": "cache"}, node_name="n-b", cpu="1")]
    web = pod("web", cpu="1", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    assert expect_scheduled(expect_provisioned(CATALOG, on_demand(), *existing, web), web)["zone"] == "zone-b"


def test_pod_affinity_to_nothing_is_unschedulable_unless_self_selecting() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}
    nothing = {"labelSelector": {"matchLabels": {"app": "nothing"}}, "topologyKey": "topology.kubernetes.io/zone"}
    lonely = pod("lonely", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [nothing]}})
    selfish = [pod(f"cache-{i}", labels={"app": "cache"}, cpu="1500m",
                   affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}) for i in range(3)]
    run = expect_provisioned(CATALOG, on_demand(), lonely, *selfish)
    assert [u["pod"] for u in run.plan["unschedulable"]] == ["default/lonely"]
    assert len({expect_scheduled(run, f"default/cache-{i}")["zone"] for i in range(3)}) == 1


def test_affinity_namespaces_and_namespace_selector() -> None:
    term_other_ns = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
                     "namespaceSelector": {"matchLabels": {"team": "data"}}}
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "data", "labels": {"team": "data"}}},
            node("n-1", zone="zone-a", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}),
            pod("db", namespace="data", labels={"app": "db"}, node_name="n-1"),
            pod("db-twin", namespace="default", labels={"app": "db"}),
            pod("web", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term_other_ns]}})]
    run = expect_provisioned(CATALOG, on_demand(), *docs)
    assert expect_scheduled(run, "default/web")             # kept off n-1, where data/db runs
    assert {"name": "n-1", "pods": ["default/db-twin"]} in run.plan["existingNodes"]


def test_preferred_pod_anti_affinity_is_relaxed() -> None:
    term = {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}
    web = [pod(f"web-{i}", labels={"app": "web"}, nodeSelector={"kubernetes.io/hostname": "n-1"},
               affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}) for i in range(2)]
    run = expect_provisioned(CATALOG, on_demand(), node("n-1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}), *web)
    assert run.plan["existingNodes"] == [{"name": "n-1", "pods": ["default/web-0", "default/web-1"]}]


def test_host_ports_conflict() -> None:
    ports = [{"name": "app", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": {"requests": {"cpu": "100m"}}}]
    run = expect_provisioned(CATALOG, on_demand(), pod("a", containers=ports), pod("b", containers=ports))
    assert run.plan["summary"]["newNodes"] == 2


# --- existing and in-flight nodes -------------------------------------------------------------

def test_pods_go_to_existing_capacity_before_new_nodes() -> None:
    inflight = node("default-abc", provisioner="default", instance_type="medium", zone="zone-a",
                    allocatable={"cpu": "4", "memory": "8Gi", "pods": "20"},
                    taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    run = expect_provisioned(CATALOG, on_demand(), inflight, *pods(3, cpu="1"), pod("big", cpu="3"))
    assert run.plan["existingNodes"] == [{"name": "default-abc", "pods": ["default/big", "default/pod-0"]}]
    assert run.plan["summary"]["newNodes"] == 1


def test_uninitialized_node_reporting_zero_is_assumed_to_have_its_type_capacity() -> None:
    inflight = node("default-abc", provisioner="default", instance_type="medium", zone="zone-a",
                    allocatable={"cpu": "0", "memory": "0", "pods": "0"})
    run = expect_provisioned(CATALOG, on_demand(), inflight, pod("a", cpu="2"))
    assert run.plan["existingNodes"] == [{"name": "default-abc", "pods": ["default/a"]}]


def test_startup_taints_block_only_initialized_nodes() -> None:
    taint = {"key": "example.com/booting", "effect": "NoSchedule"}
    prov = on_demand(startupTaints=[taint])
    booting = node("n-1", provisioner="default", instance_type="medium", taints=[taint])
    ready = node("n-2", provisioner="default", instance_type="medium", taints=[taint], initialized=True)
    run = expect_provisioned(CATALOG, prov, booting, ready, pod("a"))
    assert run.plan["existingNodes"] == [{"name": "n-1", "pods": ["default/a"]}]


def test_deleting_nodes_are_not_capacity_and_their_pods_are_pending_again() -> None:
    gone = node("old", provisioner="default", instance_type="medium", deleting=True)
    run = expect_provisioned(CATALOG, on_demand(), gone, pod("evicted", node_name="old"))
    summary = run.plan["summary"]
    assert summary == {"pods": 1, "scheduled": 1, "newNodes": 1, "pricePerHour": 0.1,
                       "costPerHour": pytest.approx(0.1 + node_costs(None).per_hour, abs=1e-6)}


def test_cordoned_nodes_take_no_pods() -> None:
    cordoned = node("n-1", unschedulable=True)
    run = expect_provisioned(CATALOG, on_demand(), cordoned, pod("a"))
    assert run.plan["existingNodes"] == []


def test_a_deleting_provisioner_launches_nothing() -> None:
    prov = on_demand()
    prov["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    run = expect_provisioned(CATALOG, prov, pod("a"))
    assert run.plan["summary"]["newNodes"] == 0
    assert run.plan["unschedulable"][0]["reason"] == "no provisioner can launch nodes"


# --- provisioner settings ----------------------------------------------------------------------

def test_limits_are_never_planned_past() -> None:
    run = expect_provisioned(CATALOG, on_demand(limits={"resources": {"cpu": "8"}}), *pods(6, cpu="1500m"))
    out = run.plan
    assert sum(int(n["labels"]["node.kubernetes.io/instance-type"] == "medium") * 4 +
               int(n["labels"]["node.kubernetes.io/instance-type"] == "small") * 2 for n in out["nodes"]) <= 8
    assert out["summary"]["scheduled"] < 6
    assert "limits" in out["unschedulable"][0]["reason"]


def test_limits_count_nodes_that_exist() -> None:
    existing = node("n-1", provisioner="default", instance_type="medium", allocatable={"cpu": "4", "memory": "8Gi", "pods": "20"},
                    initialized=True)
    run = expect_provisioned(CATALOG, on_demand(limits={"resources": {"cpu": "5"}}), existing, pod("a", cpu="3", nodeSelector={"x": "y"}),
               pod("b", cpu="1500m"))
    assert run.plan["summary"]["scheduled"] == 1     # only 1 cpu left: no new node fits


def test_daemonset_overhead_sizes_new_nodes() -> None:
    without = expect_provisioned(CATALOG, on_demand(), pod("a", cpu="1800m")).plan["nodes"][0]["instanceType"]
    with_ds = expect_provisioned(CATALOG, on_demand(), daemonset("logging", cpu="500m"), pod("a", cpu="1800m")).plan["nodes"][0]["instanceType"]
    assert (without, with_ds) == ("small", "medium")


def test_daemonsets_that_do_not_tolerate_the_provisioner_add_no_overhead() -> None:
    prov = on_demand(taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    tolerant = pod("a", cpu="1800m", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert expect_provisioned(CATALOG, prov, daemonset("logging", cpu="500m"), tolerant).plan["nodes"][0]["instanceType"] == "small"


def test_kubelet_max_pods_caps_pods_per_node() -> None:
    run = expect_provisioned(CATALOG, on_demand(kubeletConfiguration={"maxPods": 3}), *pods(7, cpu="10m"))
    assert run.plan["summary"]["newNodes"] == 3


def test_kube_reserved_shrinks_allocatable() -> None:
    run = expect_provisioned(CATALOG, on_demand(kubeletConfiguration={"kubeReserved": {"cpu": "1"}}), pod("a", cpu="1500m"))
    assert run.plan["nodes"][0]["instanceType"] == "medium"


# --- workloads and determinism ------------------------------------------------------------------

def test_workloads_expand_into_named_pods() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "crunch", "namespace": "batch"},
           "spec": {"parallelism": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x",
                                                                             "resources": {"requests": {"cpu": "1"}}}]}}}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
           "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    run = expect_provisioned(CATALOG, on_demand(), job, sts, deployment("web", replicas=1, cpu="100m"))
    scheduled = sorted(p for n in run.plan["nodes"] for p in n["pods"])
    assert scheduled == ["batch/crunch-0", "batch/crunch-1", "default/db-0", "default/db-1", "default/web-0"]


def test_owned_pods_are_not_duplicated_by_their_owner() -> None:
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-5d9"},
          "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    run = expect_provisioned(CATALOG, on_demand(), rs, pod("web-5d9-abc", owner=("ReplicaSet", "web-5d9")))
    assert run.plan["summary"]["pods"] == 1


def test_same_input_gives_the_same_plan() -> None:
    docs = [CATALOG, on_demand(), *pods(20, cpu="700m")]
    assert expect_provisioned(*docs).plan == expect_provisioned(*docs).plan


def test_aws_catalog_gpu_and_arm() -> None:
    run = expect_provisioned(provisioner("default", requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]),
               pod("gpu", cpu="1", requests={"nvidia.com/gpu": "1"}),
               pod("arm", cpu="1", nodeSelector={"kubernetes.io/arch": "arm64"}),
               pod("family", cpu="1", nodeSelector={"karpenter.k8s.aws/instance-family": "c6i"}))
    gpu = expect_scheduled(run, "default/gpu")
    assert gpu["labels"]["karpenter.k8s.aws/instance-gpu-manufacturer"] == "nvidia"
    assert expect_scheduled(run, "default/arm")["labels"]["kubernetes.io/arch"] == "arm64"
    assert expect_scheduled(run, "default/family")["instanceType"].startswith("c6i.")


@pytest.mark.parametrize("name", ["fake-400"])
def test_fake_catalog_prices_by_size(name: str) -> None:
    run = expect_provisioned(provisioner("default"), pod("a", cpu="3", memory="1Gi"), catalog=name)
    n = run.plan["nodes"][0]
    assert n["instanceType"] == "fake-it-3"
    assert n["zone"] == "test-zone-1"
