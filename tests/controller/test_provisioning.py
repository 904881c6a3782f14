"""Provisioning against the local cluster: launch for Unschedulable pods, bind at once, never twice."""

from __future__ import annotations

import pytest

from karpy.apis import labels as wk
from karpy.apis.launch_record import pods_of
from karpy.controller.cloudprovider.fake import Faults
from karpy.controller.provisioning.batcher import Batch
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env
from tests.expectations import expect_events, expect_nodes, expect_not_scheduled, expect_scheduled

pytestmark = pytest.mark.slow      # starts the local cluster


def test_launches_a_node_and_binds_the_pods_at_once(env: Env) -> None:
    web = [unschedulable_pod(f"web-{i}", cpu="1", tolerations=[{"key": "team", "operator": "Exists"}]) for i in range(3)]
    # a per-node cost makes one large node the choice (two small ones would cost less by price alone)
    web = env.provision(provisioner("default", taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}], labels={"team": "a"}),
                        *web, packing=PackingOptions(node_cost_per_hour=0.5))
    assert len(env.cloud.create_calls) == 1
    (made,) = expect_nodes(env.client, 1)
    assert made["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    assert made["metadata"]["labels"][wk.PROVISIONER_NAME] == "default"
    assert made["metadata"]["labels"]["team"] == "a"
    assert made["metadata"]["labels"][wk.INSTANCE_TYPE] == "large"
    assert {"key": "team", "value": "a", "effect": "NoSchedule"} in made["spec"]["taints"]
    assert made["spec"]["providerID"] == f"fake://{made['metadata']['name']}"
    for p in web:                                   # bound by the reconcile itself, not later by a scheduler
        assert expect_scheduled(env.client, p)["metadata"]["name"] == made["metadata"]["name"]
    env.settle(lambda: env.client.get(path_of("karpenter.sh/v1alpha5", "provisioners", name="default")).get("status", {})
               .get("resources", {}).get("cpu") == "8")


def test_ignores_pods_kube_scheduler_has_not_given_up_on(env: Env) -> None:
    fresh = {**unschedulable_pod("fresh", schedulerName="another-scheduler"), "status": {"phase": "Pending"}}
    env.apply(provisioner("default"), fresh)
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert env.cloud.create_calls == []


def test_a_capacity_gap_the_extender_reported_is_provisioned_before_kube_scheduler_marks_the_pod(env: Env) -> None:
    # not marked yet, and never by the local cluster's scheduler, which would race the first reconcile
    waiting = {**unschedulable_pod("waiting", cpu="1", schedulerName="another-scheduler"), "status": {"phase": "Pending"}}
    env.apply(provisioner("default"), waiting)
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert env.cloud.create_calls == []
    uid = env.client.get(path_of("v1", "pods", "default", "waiting"))["metadata"]["uid"]
    env.client.create(path_of("v1", "events", "default"), {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "waiting.gap", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "waiting", "uid": uid},
        "reason": wk.CAPACITY_GAP_REASON, "message": "0/1 nodes are available: 1 node(s) are being removed by karpy.",
        "type": "Warning", "source": {"component": "karpy-extender"}})
    env.settle(lambda: uid in env.state.gap_pod_uids())
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert len(env.cloud.create_calls) == 1
    made = env.client.get(path_of("v1", "nodes"))["items"][0]
    claim = env.client.get(path_of("karpenter.sh/v1", "nodeclaims", name=made["metadata"]["name"]))
    assert [p.key for p in pods_of(claim)] == ["default/waiting"]        # kept for it by the extender
    assert wk.LAUNCHED_FOR not in made["metadata"]["annotations"]         # the NodeClaim says it, not the Node
    assert env.client.get(path_of("v1", "pods", "default", "waiting"))["spec"]["nodeName"] == made["metadata"]["name"]


def test_counts_nodes_already_launching_and_never_launches_twice(env: Env) -> None:
    env.apply(provisioner("default"),
              node("default-inflight", provisioner="default", instance_type="large", zone="zone-a",
                   allocatable={"cpu": "8", "memory": "16Gi", "pods": "40"},
                   taints=[{"key": wk.TAINT_NOT_READY, "effect": "NoSchedule"}]),
              unschedulable_pod("a", cpu="1"))
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert env.cloud.create_calls == []           # the launching node holds the pod


def test_limits_refuse_a_launch_and_say_so(env: Env) -> None:
    (a,) = env.provision(provisioner("default", limits={"resources": {"cpu": "1"}}), unschedulable_pod("a", cpu="1"))
    assert env.cloud.create_calls == []
    expect_not_scheduled(env.client, a)
    (event,) = expect_events(env.client, a, "FailedProvisioning", event_type="Warning")
    assert "limits" in event["message"]


def test_no_capacity_leaves_pods_pending_and_launches_nothing(env: Env) -> None:
    env.cloud.faults = Faults(no_capacity={"small", "large"})
    env.apply(provisioner("default"), unschedulable_pod("a", cpu="1"))
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert env.client.get(path_of("v1", "nodes"))["items"] == []
    assert not env.client.get(path_of("v1", "pods", "default", "a"))["spec"].get("nodeName")


def test_create_is_idempotent_by_node_name(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("a", cpu="1"))
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    request = env.cloud.create_calls[0]
    again = env.cloud.create(request)               # a retry after a crash
    assert again.node_name == request.node_name
    assert len(env.client.get(path_of("v1", "nodes"))["items"]) == 1


def test_namespace_selectors_in_affinity_terms_are_resolved(env: Env) -> None:
    env.client.create(path_of("v1", "namespaces"), {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "data", "labels": {"team": "data"}}})
    env.settle(lambda: env.state.namespaces.get("", "data") is not None)
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
            "namespaceSelector": {"matchLabels": {"team": "data"}}}
    pod = unschedulable_pod("web", cpu="100m", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    env.apply(provisioner("default"), pod)
    web = env.state.pods.get("default", "web")
    assert web is not None
    infos = env.state.pod_infos([web])
    assert infos[0].affinities[0].namespaces == frozenset({"data"})


def test_a_batch_plans_the_pods_it_gathered_and_a_batch_without_pods_plans_every_pod_that_waits(env: Env) -> None:
    # 7 cpu each: one large node holds one of them, so each launch is for the pod planned
    env.apply(provisioner("default"), unschedulable_pod("first", cpu="7"), unschedulable_pod("second", cpu="7"),
              unschedulable_pod("gone", cpu="7"))
    uid = {name: env.state.pods.get("default", name)["metadata"]["uid"] for name in ("first", "second", "gone")}
    env.client.delete(path_of("v1", "pods", "default", "gone"), gracePeriodSeconds=0)
    env.settle(lambda: env.state.pods.get("default", "gone") is None)
    provisioning = Provisioner(env.state, env.cloud, CATALOG)
    provisioning.reconcile(Batch(frozenset({uid["first"], uid["gone"]})))
    assert [r.node_name for r in env.cloud.create_calls] == [env.client.get(path_of("v1", "pods", "default", "first"))["spec"]["nodeName"]]
    assert not env.client.get(path_of("v1", "pods", "default", "second"))["spec"].get("nodeName")
    env.settle(lambda: env.state.pods.get("default", "first")["spec"].get("nodeName"))
    provisioning.reconcile(Batch(frozenset(), everything=True))
    assert len(env.cloud.create_calls) == 2
    assert env.client.get(path_of("v1", "pods", "default", "second"))["spec"]["nodeName"] == env.cloud.create_calls[1].node_name


def test_an_interrupted_nodes_pods_are_planned_as_pending_pods_are_and_left_unbound(env: Env) -> None:
    """launch_replacements plans the node's pods with provisioning's own path, the node taken as gone: `a` fits the
    room `spare` has (2 cpu, 0.5 used), `b` needs a new node (the cheapest that holds 1500m: small), and `huge` fits
    nowhere, so it gets provisioning's FailedProvisioning Event. Nothing is bound: the pods still run on `doomed`."""
    def karpy_node(name: str, instance_type: str, cpu: str) -> dict[str, object]:
        return node(name, provisioner="default", instance_type=instance_type, zone="zone-a", capacity_type="on-demand",
                    initialized=True, allocatable={"cpu": cpu, "memory": "16Gi", "pods": "40"})

    huge = pod("huge", cpu="100", node_name="doomed")
    env.apply(provisioner("default"), karpy_node("doomed", "large", "8"), karpy_node("spare", "small", "2"),
              pod("busy", cpu="500m", node_name="spare"), pod("a", cpu="1500m", node_name="doomed"),
              pod("b", cpu="1500m", node_name="doomed"), huge)
    launched = Provisioner(env.state, env.cloud, CATALOG).launch_replacements("doomed")
    assert launched == 1
    (request,) = env.cloud.create_calls
    assert [t.name for t in request.instance_type_options][0] == "small"
    for name in ("a", "b", "huge"):
        assert env.client.get(path_of("v1", "pods", "default", name))["spec"]["nodeName"] == "doomed"
    (event,) = expect_events(env.client, huge, "FailedProvisioning")
    assert "cpu" in event["message"]
