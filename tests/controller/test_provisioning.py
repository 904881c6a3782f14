"""Provisioning against the local cluster: launch for Unschedulable pods, bind at once, never twice."""

from __future__ import annotations

import logging

import pytest

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.fake import Faults
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.provisioning.scheduling.optimize import PackingOptions
from karpy.kubeclient.raw import path_of
from tests.builders import node, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env


def test_launches_a_node_and_binds_the_pods_at_once(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.apply(provisioner("default", taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}], labels={"team": "a"}),
              *[unschedulable_pod(f"web-{i}", cpu="1", tolerations=[{"key": "team", "operator": "Exists"}]) for i in range(3)])
    caplog.set_level(logging.INFO, logger="controller.provisioning")
    # a per-node cost makes one large node the choice (two small ones would cost less by price alone)
    Provisioner(env.state, env.cloud, CATALOG, packing=PackingOptions(node_cost_per_hour=0.5)).reconcile()
    assert len(env.cloud.create_calls) == 1
    nodes = [n for n in env.client.get(path_of("v1", "nodes"))["items"]]
    assert len(nodes) == 1
    made = nodes[0]
    assert made["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    assert made["metadata"]["labels"][wk.PROVISIONER_NAME] == "default"
    assert made["metadata"]["labels"]["team"] == "a"
    assert made["metadata"]["labels"][wk.INSTANCE_TYPE] == "large"
    assert {"key": "team", "value": "a", "effect": "NoSchedule"} in made["spec"]["taints"]
    assert made["spec"]["providerID"] == f"fake://{made['metadata']['name']}"
    for i in range(3):
        assert env.client.get(path_of("v1", "pods", "default", f"web-{i}"))["spec"]["nodeName"] == made["metadata"]["name"]
    messages = [r.getMessage() for r in caplog.records]
    assert "Found 3 provisionable pod(s)" in messages
    assert any(m.startswith("Computed packing of 1 node(s) for 3 pod(s) with instance type option(s) [large]") for m in messages)
    assert f"Bound 3 pod(s) to node {made['metadata']['name']}" in messages
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
    assert made["metadata"]["annotations"][wk.LAUNCHED_FOR] == "default/waiting"   # kept for it by the extender
    assert env.client.get(path_of("v1", "pods", "default", "waiting"))["spec"]["nodeName"] == made["metadata"]["name"]


def test_counts_nodes_already_launching_and_never_launches_twice(env: Env) -> None:
    env.apply(provisioner("default"),
              node("default-inflight", provisioner="default", instance_type="large", zone="zone-a",
                   allocatable={"cpu": "8", "memory": "16Gi", "pods": "40"},
                   taints=[{"key": wk.TAINT_NOT_READY, "effect": "NoSchedule"}]),
              unschedulable_pod("a", cpu="1"))
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert env.cloud.create_calls == []           # the launching node holds the pod


def test_limits_refuse_a_launch_and_say_so(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.apply(provisioner("default", limits={"resources": {"cpu": "1"}}), unschedulable_pod("a", cpu="1"))
    caplog.set_level(logging.INFO, logger="controller.provisioning")
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert env.cloud.create_calls == []
    assert any("exceeds limits of provisioner default" in r.getMessage() for r in caplog.records)
    events = env.client.get(path_of("v1", "events", "default"))["items"]
    assert any(e["reason"] == "FailedProvisioning" and "limits" in e["message"] for e in events)


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
