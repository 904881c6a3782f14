"""A v1 NodePool provisions end to end: `karpy controller` (fake provider) on the local cluster launches a node
labelled `karpenter.sh/nodepool` for a pending pod, binds the pod, registers the node as v1 does (its
`karpenter.sh/unregistered` taint gone, `karpenter.sh/registered` and `karpenter.sh/initialized` set), owned by the
NodePool; its limits hold and its status counts its nodes. The pure steps are checked alone."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.apis.timestamps import rfc3339
from karpy.apis.v1.pool import read_nodepool
from karpy.controller.cloudprovider.types import Instance
from karpy.controller.launch.claims import claim_manifest, node_manifest
from karpy.controller.launch.launcher import node_request
from karpy.controller.node.emptiness import Emptiness
from karpy.controller.node.initialization import decide
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, Scheduler
from karpy.kubeclient.raw import path_of
from tests.builders import catalog, instance_type, node, unschedulable_pod
from tests.conftest import free_port
from tests.controller.conftest import CATALOG, Env, controller_for_nodepool
from tests.controller.test_metrics import scraped
from tests.expectations import eventually, expect_nodes

ROOT = Path(__file__).resolve().parents[2]
NODEPOOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
    "spec": {"template": {"metadata": {"labels": {"team": "a"}, "annotations": {"example.com/owner": "a"}},
                          "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                                   "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}},
}


def planned_node() -> Any:
    pool, errors = read_nodepool(NODEPOOL)
    assert pool is not None, errors
    pod = PodInfo.parse(unschedulable_pod("web", cpu="1"))
    (node,) = Scheduler(ClusterSnapshot([pool], CATALOG, pods=[pod])).solve().new_nodes
    return node


def test_a_nodepools_node_starts_unregistered_and_registers_once_ready() -> None:
    planned = planned_node()
    request = node_request(planned)
    claim = claim_manifest(request, pods=[], bind=True, owner=None)
    assert claim["metadata"]["labels"][wk.NODEPOOL] == "general" and wk.PROVISIONER_NAME not in claim["metadata"]["labels"]
    node = node_manifest(claim, Instance(provider_id="fake://n", node_name=planned.name, labels={
        wk.INSTANCE_TYPE: "small", wk.ZONE: "zone-a", wk.CAPACITY_TYPE: "on-demand"}), CATALOG.instance_types()[0])
    labels, taints = node["metadata"]["labels"], node["spec"]["taints"]
    assert labels[wk.NODEPOOL] == "general" and wk.PROVISIONER_NAME not in labels and labels["team"] == "a"
    assert node["metadata"]["annotations"]["example.com/owner"] == "a"
    assert {"key": wk.TAINT_UNREGISTERED, "effect": "NoExecute"} in taints
    now = dt.datetime.now(dt.timezone.utc)
    assert decide(node=node, startup_taints=set(), now=now) is None                  # not Ready yet
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    node["spec"]["taints"] = [t for t in taints if t["key"] != wk.TAINT_NOT_READY]
    assert decide(node=node, startup_taints=set(), now=now) == "register"
    node["spec"]["taints"] = []
    assert decide(node=node, startup_taints=set(), now=now) == "label"


@pytest.mark.slow      # starts the local cluster and `karpy controller`
def test_karpy_controller_provisions_for_a_nodepool(tmp_path: Path) -> None:
    port = free_port()
    with controller_for_nodepool(tmp_path, catalog_doc=catalog(instance_type("small", cpu="2", memory="4Gi", pods="10")),
                                 nodepool=NODEPOOL, pod=unschedulable_pod("web", cpu="1"),
                                 args=["--metrics-port", str(port)]) as kube:

        def registered() -> Any:
            nodes = kube.core.list_node().items
            ready = [n for n in nodes if (n.metadata.labels or {}).get(wk.INITIALIZED) == "true"]
            return ready[0] if ready else None
        node = eventually(registered, timeout=30)
        labels = node.metadata.labels
        assert labels[wk.NODEPOOL] == "general" and wk.PROVISIONER_NAME not in labels
        assert labels[wk.REGISTERED] == "true" and labels["team"] == "a"
        assert wk.TAINT_UNREGISTERED not in {t.key for t in node.spec.taints or []}
        assert node.metadata.owner_references[0].kind == "NodePool"
        assert eventually(lambda: kube.core.read_namespaced_pod("web", "default").spec.node_name, timeout=10) == node.metadata.name

        # v1's metrics and Events, as Prometheus scrapes them and `kubectl describe pod` shows them
        name, zone = node.metadata.name, labels[wk.ZONE]

        def value(metric: str, **wanted: str) -> float | None:
            page = scraped(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
            return next((v for have, v in page.get(metric, []) if wanted.items() <= have.items()), None)
        assert value("karpenter_nodeclaims_created_total", reason="provisioned", nodepool="general",
                     min_values_relaxed="false") == 1
        assert value("karpenter_nodes_created_total", nodepool="general", zone=zone) == 1
        assert value("karpenter_pods_state", name="web", node=name, nodepool="general", scheduled="true") == 1
        assert value("karpenter_nodes_allocatable", node_name=name, nodepool="general", resource_type="cpu") == 2
        eventually(lambda: value("karpenter_nodepools_usage", nodepool="general", resource_type="nodes") == 1, timeout=10)
        events = kube.core.list_namespaced_event("default", field_selector="involvedObject.name=web").items
        assert f"Pod should schedule on: nodeclaim/{name}" in {e.message for e in events if e.reason == "Nominated"}


@pytest.mark.slow      # starts the local cluster
def test_a_nodepools_limits_hold_and_its_status_counts_its_nodes(env: Env) -> None:
    pool = copy.deepcopy(NODEPOOL)
    pool["spec"]["limits"] = {"cpu": "2"}                  # one small node's worth
    first, second = env.provision(pool, unschedulable_pod("first", cpu="1500m"), unschedulable_pod("second", cpu="1500m"))
    (made,) = expect_nodes(env.client, 1)
    assert made["metadata"]["labels"][wk.NODEPOOL] == "general"
    assert sum(1 for p in (first, second) if p["spec"].get("nodeName")) == 1
    status = env.settle(lambda: env.client.get(path_of("karpenter.sh/v1", "nodepools", name="general")).get("status"))
    assert status["resources"]["cpu"] == "2" and status["nodes"] == 1


@pytest.mark.slow      # starts the local cluster
@pytest.mark.parametrize("hold", [{"karpenter.sh/do-not-disrupt": "true"}, {"karpenter.sh/do-not-consolidate": "true"}, {}])
def test_do_not_disrupt_keeps_a_when_empty_nodepools_node_past_its_ttl(bare: Env, hold: dict[str, str]) -> None:
    pool = copy.deepcopy(NODEPOOL)
    pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
    n = node("empty", labels={wk.NODEPOOL: "general"}, initialized=True)
    n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]         # so a deleted node stays to be seen
    n["metadata"]["annotations"] = {**hold, wk.EMPTINESS_TIMESTAMP: rfc3339(bare.clock.now() - dt.timedelta(seconds=100))}
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    bare.apply(pool, n)
    try:
        bare.settle(lambda: any(p.name == "general" for p in bare.state.live_provisioners()))
        bare.sync()
        labels = {"reason": "empty", "nodepool": "general", "capacity_type": "", "consolidation_policy": "WhenEmpty",
                  "termination_mode": "graceful"}
        before = REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", labels) or 0
        Emptiness(bare.state, bare.clock).reconcile()
        gone = bare.client.get(path_of("v1", "nodes", name="empty"))["metadata"].get("deletionTimestamp") is not None
        assert gone == (not hold)
        assert (REGISTRY.get_sample_value("karpenter_nodeclaims_disrupted_total", labels) or 0) == before + gone
    finally:
        bare.client.delete(path_of("karpenter.sh/v1", "nodepools", name="general"))


@pytest.mark.slow      # starts the local cluster
def test_emptiness_deletes_no_more_of_a_nodepools_nodes_than_its_budget_allows(bare: Env) -> None:
    pool = copy.deepcopy(NODEPOOL)
    pool["spec"]["disruption"] = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                                  "budgets": [{"nodes": "1", "reasons": ["Empty"]}]}
    past_ttl = rfc3339(bare.clock.now() - dt.timedelta(seconds=100))
    nodes = [node(f"empty-{i}", labels={wk.NODEPOOL: "general"}, initialized=True) for i in range(3)]
    for n in nodes:
        n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
        n["metadata"]["annotations"] = {wk.EMPTINESS_TIMESTAMP: past_ttl}
    bare.apply(pool, *nodes)
    try:
        bare.settle(lambda: any(p.name == "general" for p in bare.state.live_provisioners()))

        def deleting() -> int:
            return sum(1 for n in bare.client.get(path_of("v1", "nodes"))["items"] if n["metadata"].get("deletionTimestamp"))

        for _ in range(2):                         # the node being deleted uses up the budget on the next pass
            bare.sync()
            again = Emptiness(bare.state, bare.clock).reconcile()
            assert deleting() == 1 and again is not None
    finally:
        bare.client.delete(path_of("karpenter.sh/v1", "nodepools", name="general"))
