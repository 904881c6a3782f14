"""Termination through the finalizer: cordon, evict (PDBs honoured), terminate, release."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.termination.controller import Terminator, plan_drain
from karpy.kubeclient.raw import path_of
from tests.builders import pod, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env

pytestmark = pytest.mark.slow      # starts the local cluster


def launched(env: Env, *pods: dict[str, Any]) -> str:
    env.apply(provisioner("default"), *pods)
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    name = env.cloud.create_calls[-1].node_name
    env.settle(lambda: all(env.client.get(path_of("v1", "pods", "default", p["metadata"]["name"]))["status"]["phase"] == "Running"
                           for p in pods))
    return name


def node_gone(env: Env, name: str) -> bool:
    return not [n for n in env.client.get(path_of("v1", "nodes"))["items"] if n["metadata"]["name"] == name]


def test_deleting_a_node_drains_it_then_terminates_it(env: Env) -> None:
    name = launched(env, *[unschedulable_pod(f"web-{i}", cpu="500m") for i in range(2)])
    env.client.delete(path_of("v1", "nodes", name=name))           # a person's kubectl delete node
    terminator = Terminator(env.state, env.cloud)
    env.settle(lambda: env.state.nodes.get("", name)["metadata"].get("deletionTimestamp"))
    env.settle(lambda: terminator.reconcile() is None and node_gone(env, name))
    assert env.cloud.delete_calls and env.cloud.delete_calls[0] == f"fake://{name}"
    assert not [p for p in env.client.get(path_of("v1", "pods", "default"))["items"] if p["spec"].get("nodeName") == name]


def test_a_pod_disruption_budget_holds_the_drain(env: Env) -> None:
    pods = [unschedulable_pod(f"db-{i}", cpu="500m", labels={"app": "db"}) for i in range(2)]
    name = launched(env, *pods)
    env.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db", "namespace": "default"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}})
    env.client.delete(path_of("v1", "nodes", name=name))
    env.settle(lambda: env.state.nodes.get("", name)["metadata"].get("deletionTimestamp"))
    terminator = Terminator(env.state, env.cloud)
    for _ in range(5):
        assert terminator.reconcile() is not None                # keeps coming back
    node = env.client.get(path_of("v1", "nodes", name=name))
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    running = [p for p in env.client.get(path_of("v1", "pods", "default"))["items"] if not p["metadata"].get("deletionTimestamp")]
    assert sorted(p["metadata"]["name"] for p in running) == ["db-0", "db-1"]     # nothing evicted past the budget
    assert env.cloud.delete_calls == []


def test_a_pod_the_eviction_api_refuses_holds_only_itself(env: Env) -> None:
    """Two budgets over one pod make the Eviction API answer 500; that pod stays, its neighbour still goes."""
    pods = [unschedulable_pod("twice", cpu="500m", labels={"app": "db", "tier": "data"}),
            unschedulable_pod("free", cpu="500m")]
    name = launched(env, *pods)
    for pdb, key in (("by-app", "app"), ("by-tier", "tier")):
        env.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": pdb, "namespace": "default"},
                   "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {key: pods[0]["metadata"]["labels"][key]}}}})
    env.client.delete(path_of("v1", "nodes", name=name))
    env.settle(lambda: env.state.nodes.get("", name)["metadata"].get("deletionTimestamp"))
    terminator = Terminator(env.state, env.cloud)
    env.settle(lambda: terminator.reconcile() is not None and not [
        p for p in env.client.get(path_of("v1", "pods", "default"))["items"] if p["metadata"]["name"] == "free"])
    assert env.client.get(path_of("v1", "pods", "default", "twice"))["metadata"].get("deletionTimestamp") is None
    assert env.cloud.delete_calls == []


def test_do_not_evict_pods_hold_their_node(env: Env) -> None:
    name = launched(env, unschedulable_pod("precious", cpu="500m", annotations={wk.DO_NOT_EVICT: "true"}))
    env.client.delete(path_of("v1", "nodes", name=name))
    env.settle(lambda: env.state.nodes.get("", name)["metadata"].get("deletionTimestamp"))
    Terminator(env.state, env.cloud).reconcile()
    assert env.client.get(path_of("v1", "pods", "default", "precious"))["metadata"].get("deletionTimestamp") is None
    assert env.cloud.delete_calls == []


def test_drain_plan_leaves_daemonset_mirror_and_finished_pods() -> None:
    daemon = pod("ds", owner=("DaemonSet", "agent"))
    mirror = pod("static", owner=None, annotations={"kubernetes.io/config.mirror": "x"})
    done = pod("job", phase="Succeeded")
    app = pod("app")
    leaving = pod("leaving")
    leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    plan = plan_drain([daemon, mirror, done, app, leaving])
    assert [p["metadata"]["name"] for p in plan.evict] == ["app"]
    assert plan.waiting == 1 and plan.blocked_by is None
