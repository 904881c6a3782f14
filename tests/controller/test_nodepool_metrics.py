"""Karpenter v1's metrics and Events for v1 objects, beside v0.16's for Provisioners: NodePools' limits and usage,
their nodes and pods under v1's labels, the NodeClaim counters, and the Events v1 writes on NodeClaims and pods."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.fake import Faults
from karpy.controller.metrics import cluster_samples, count_nodeclaim_disrupted, termination_mode
from karpy.controller.pod_metrics import PodTimings
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env
from tests.controller.test_nodepools import NODEPOOL
from tests.expectations import expect_events

NOW = dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)


def by_labels(samples: list[tuple[dict[str, str], float]], **labels: str) -> list[float]:
    return [value for have, value in samples if labels.items() <= have.items()]


def test_nodepools_nodes_and_pods_are_described_with_v1s_names_and_labels() -> None:
    pool = copy.deepcopy(NODEPOOL)
    pool["spec"]["limits"] = {"cpu": "100", "memory": "1000Gi"}
    pool["status"] = {"resources": {"cpu": "2", "memory": "8Gi", "pods": "29", "ephemeral-storage": "0", "nodes": "1"}}
    v1_node = node("pooled", labels={wk.NODEPOOL: "general"}, instance_type="small", zone="zone-a",
                   capacity_type="on-demand", created="2024-05-01T11:00:00Z")
    v1_node["status"]["capacity"] = {"cpu": "2", "memory": "8Gi", "pods": "29"}
    v1_node["status"]["allocatable"] = {"cpu": "1900m", "memory": "7Gi", "pods": "29"}
    on_pool = pod("web", node_name="pooled", cpu="500m", phase="Running")
    on_pool["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    legacy = node("legacy", provisioner="default", instance_type="small", zone="zone-b", capacity_type="spot")
    on_legacy = pod("api", node_name="legacy", owner=None, phase="Running")

    samples = cluster_samples(pods=[on_pool, on_legacy], nodes=[v1_node, legacy], provisioners=[provisioner("default")],
                              pending_pods=0, nodepools=[pool], now=NOW)

    assert by_labels(samples["karpenter_nodepools_limit"], nodepool="general", resource_type="cpu") == [100]
    assert by_labels(samples["karpenter_nodepools_limit"], nodepool="general", resource_type="memory") == [1000 * 2**30]
    usage = {labels["resource_type"]: value for labels, value in samples["karpenter_nodepools_usage"]}
    assert usage == {"cpu": 2, "memory": 8 * 2**30, "pods": 29, "ephemeral_storage": 0, "nodes": 1}

    (web,) = [labels for labels, _ in samples["karpenter_pods_state"] if labels["name"] == "web"]
    assert web == {"name": "web", "namespace": "default", "owner": "/apis/apps/v1/namespaces/default/replicasets/app",
                   "node": "pooled", "scheduled": "true", "nodepool": "general", "zone": "zone-a", "arch": "amd64",
                   "capacity_type": "on-demand", "instance_type": "small", "phase": "Running", "ready": "true",
                   "managed": "true"}
    (api,) = [labels for labels, _ in samples["karpenter_pods_state"] if labels["name"] == "api"]
    assert api["provisioner"] == "default" and "nodepool" not in api                 # v0.16's labels, as before

    allocatable = samples["karpenter_nodes_allocatable"]
    assert by_labels(allocatable, node_name="pooled", nodepool="general", instance_type="small", zone="zone-a",
                     capacity_type="on-demand", arch="amd64", os="linux", managed="true", resource_type="cpu") == [1.9]
    assert by_labels(allocatable, node_name="legacy", provisioner="default", resource_type="cpu") == [2]
    assert by_labels(samples["karpenter_nodes_system_overhead"], node_name="pooled", resource_type="memory") == [2**30]
    assert by_labels(samples["karpenter_nodes_total_pod_requests"], node_name="pooled", resource_type="cpu") == [0.5]
    assert by_labels(samples["karpenter_nodes_current_lifetime_seconds"], node_name="pooled") == [3600]
    assert not by_labels(samples["karpenter_nodes_system_overhead"], node_name="legacy")    # v1 gauges: NodePools' only


def test_a_nodepools_usage_is_counted_from_its_nodes_until_its_status_reports_it() -> None:
    pool = copy.deepcopy(NODEPOOL)
    nodes = [node(f"n{i}", labels={wk.NODEPOOL: "general"}, allocatable={"cpu": "2", "memory": "4Gi"}) for i in range(2)]
    samples = cluster_samples(pods=[], nodes=nodes, provisioners=[], pending_pods=0, nodepools=[pool], now=NOW)
    usage = {labels["resource_type"]: value for labels, value in samples["karpenter_nodepools_usage"]}
    assert usage == {"cpu": 4, "memory": 8 * 2**30, "pods": 0, "ephemeral_storage": 0, "nodes": 2}
    assert samples["karpenter_nodepools_limit"] == []                              # no limits, no samples


@pytest.mark.parametrize(("grace", "mode"), [pytest.param(None, "graceful", id="none"),
                                             pytest.param("0s", "forceful", id="zero"),
                                             pytest.param("1h", "eventual", id="an-hour")])
def test_a_disrupted_nodeclaim_is_counted_with_its_nodepool_capacity_type_and_termination_mode(
        grace: str | None, mode: str) -> None:
    claim: dict[str, Any] = {"metadata": {"name": "c", "labels": {wk.NODEPOOL: "general", wk.CAPACITY_TYPE: "spot"}},
                             "spec": {"terminationGracePeriod": grace} if grace else {}}
    labels = {"reason": "expired", "nodepool": "general", "capacity_type": "spot", "consolidation_policy": "",
              "termination_mode": mode}
    before = REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", labels) or 0
    assert termination_mode(claim) == mode
    count_nodeclaim_disrupted(claim, "expired")
    count_nodeclaim_disrupted(node(provisioner="default"), "expired")               # a Provisioner's: v0.16 has no such counter
    assert REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", labels) == before + 1


def _events(env: Env, kind: str, name: str) -> dict[str, dict[str, Any]]:
    return {e["reason"]: e for e in env.client.get(path_of("v1", "events", "default"))["items"]
            if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name}


@pytest.mark.slow      # starts the local cluster
def test_a_nodeclaim_without_capacity_is_told_so_counted_disrupted_and_terminated(bare: Env) -> None:
    def count(metric: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(metric, labels) or 0.0

    created = {"reason": "provisioned", "nodepool": "general", "min_values_relaxed": "false"}
    disrupted = {"reason": "insufficient_capacity", "nodepool": "general", "capacity_type": "",
                 "consolidation_policy": "", "termination_mode": "graceful"}
    terminated = {"nodepool": "general", "capacity_type": "", "zone": ""}
    before = [count("karpenter_nodeclaims_created_total", **created),
              count("karpenter_nodeclaims_disrupted_total", **disrupted),
              count("karpenter_nodeclaims_terminated_total", **terminated)]
    bare.cloud.faults = Faults(no_capacity={t.name for t in CATALOG.instance_types()})
    try:
        (web,) = bare.provision(copy.deepcopy(NODEPOOL), unschedulable_pod("web", cpu="1"))
        assert not web["spec"].get("nodeName")
        (claim_name,) = {s.node_name for s in bare.cloud.create_calls}
        assert [count("karpenter_nodeclaims_created_total", **created),
                count("karpenter_nodeclaims_disrupted_total", **disrupted),
                count("karpenter_nodeclaims_terminated_total", **terminated)] == [b + 1 for b in before]
        told = bare.settle(lambda: _events(bare, "NodeClaim", claim_name).get("InsufficientCapacityError"))
        assert told["type"] == "Warning"
        assert told["message"].startswith(f"NodeClaim {claim_name} event: no capacity for any of ")
        nominated = bare.settle(lambda: _events(bare, "Pod", "web").get("Nominated"))
        assert nominated["message"] == f"Pod should schedule on: nodeclaim/{claim_name}"
        assert bare.client.get(path_of("karpenter.sh/v1", "nodeclaims"))["items"] == []   # its finalizer let go
    finally:
        bare.cloud.faults = Faults()
        bare.client.delete(path_of("karpenter.sh/v1", "nodepools", name="general"))


def test_a_pods_wait_to_be_bound_and_to_start_is_observed_once_when_it_ends() -> None:
    def web(**status: Any) -> dict[str, Any]:
        body = pod("web", owner=None, phase=status.pop("phase", "Pending"))
        body["metadata"].update(uid="uid-web", creationTimestamp="2024-05-01T12:00:00Z")
        body["status"]["conditions"] = [{"type": kind, "status": "True", "lastTransitionTime": at}
                                        for kind, at in status.items()]
        return body

    def observed() -> tuple[float, float, float, float]:
        return tuple(REGISTRY.get_sample_value(name) or 0.0 for name in (     # type: ignore[return-value]
            "karpenter_pods_bound_duration_seconds_count", "karpenter_pods_bound_duration_seconds_sum",
            "karpenter_pods_startup_duration_seconds_count", "karpenter_pods_startup_duration_seconds_sum"))

    timings = PodTimings()
    before = observed()
    timings.on_pod("ADDED", web())                                                   # waiting
    bound = web(PodScheduled="2024-05-01T12:00:04Z")
    bound["spec"]["nodeName"] = "n1"
    timings.on_pod("MODIFIED", bound)
    timings.on_pod("MODIFIED", bound)                                                # a repeat observes nothing more
    started = web(PodScheduled="2024-05-01T12:00:04Z", Ready="2024-05-01T12:00:30Z", phase="Running")
    started["spec"]["nodeName"] = "n1"
    timings.on_pod("MODIFIED", started)
    after = observed()
    assert [a - b for a, b in zip(after, before)] == [1, 4, 1, 30]
    PodTimings().on_pod("ADDED", started)                                            # already started when first seen
    assert observed() == after


@pytest.mark.slow      # starts the local cluster
def test_a_nodepool_no_instance_type_satisfies_is_told_so_and_its_pods_in_v1s_words(bare: Env) -> None:
    pool = copy.deepcopy(NODEPOOL)
    pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["no-such-type"]})
    try:
        (web,) = bare.provision(pool, unschedulable_pod("web", cpu="1"))
        assert not web["spec"].get("nodeName") and bare.cloud.create_calls == []
        (told,) = expect_events(bare.client, bare.state.pool_object("general") or {}, "NoCompatibleInstanceTypes",
                                event_type="Warning")
        assert told["message"] == "NodePool requirements filtered out all compatible available instance types"
        (failed,) = expect_events(bare.client, web, "FailedScheduling", event_type="Warning")
        assert failed["message"].startswith("Failed to schedule pod, ")
        assert "FailedProvisioning" not in _events(bare, "Pod", "web")          # v0.16's words are a Provisioner's
    finally:
        bare.client.delete(path_of("karpenter.sh/v1", "nodepools", name="general"))
