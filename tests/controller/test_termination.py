"""Termination through the finalizer: cordon, evict (PDBs honoured), terminate, release."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.controller.node.finalizer import Finalizer
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.termination.controller import Terminator, plan_drain
from karpy.kubeclient.raw import path_of
from karpy.main import main
from tests.builders import node, pod, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env

pytestmark = pytest.mark.slow      # starts the local cluster

# an owner the local cluster's garbage collector leaves alone (no such controller runs there), so the pods
# stay until drained; a pod without any owner would hold its node (nothing would recreate it)
OWNER = ("ReplicationController", "app")


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
    name = launched(env, *[unschedulable_pod(f"web-{i}", cpu="500m", owner=OWNER) for i in range(2)])
    env.client.delete(path_of("v1", "nodes", name=name))           # a person's kubectl delete node
    terminator = Terminator(env.state, env.cloud)
    env.settle(lambda: env.state.nodes.get("", name)["metadata"].get("deletionTimestamp"))
    env.settle(lambda: terminator.reconcile() is None and node_gone(env, name))
    assert env.cloud.delete_calls and env.cloud.delete_calls[0] == f"fake://{name}"
    assert not [p for p in env.client.get(path_of("v1", "pods", "default"))["items"] if p["spec"].get("nodeName") == name]


def test_a_pod_disruption_budget_holds_the_drain(env: Env) -> None:
    pods = [unschedulable_pod(f"db-{i}", cpu="500m", labels={"app": "db"}, owner=OWNER) for i in range(2)]
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
    pods = [unschedulable_pod("twice", cpu="500m", labels={"app": "db", "tier": "data"}, owner=OWNER),
            unschedulable_pod("free", cpu="500m", owner=OWNER)]
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
    name = launched(env, unschedulable_pod("precious", cpu="500m", annotations={wk.DO_NOT_EVICT: "true"}, owner=OWNER))
    env.client.delete(path_of("v1", "nodes", name=name))
    env.settle(lambda: env.state.nodes.get("", name)["metadata"].get("deletionTimestamp"))
    Terminator(env.state, env.cloud).reconcile()
    assert env.client.get(path_of("v1", "pods", "default", "precious"))["metadata"].get("deletionTimestamp") is None
    assert env.cloud.delete_calls == []


def test_drain_plan_leaves_daemonset_mirror_and_finished_pods() -> None:
    daemon = pod("ds", owner=("DaemonSet", "agent"))
    mirror = pod("static", owner=("Node", "n1"), annotations={"kubernetes.io/config.mirror": "x"})
    done = pod("job", phase="Succeeded")
    app = pod("app")
    leaving = pod("leaving")
    leaving["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    plan = plan_drain([daemon, mirror, done, app, leaving], now=dt.datetime(2024, 1, 1, 0, 0, 30, tzinfo=dt.timezone.utc))
    assert [p["metadata"]["name"] for p in plan.evict] == ["app"]
    assert plan.waiting == 1 and plan.blocked_by is None


def test_a_node_karpy_did_not_launch_gets_the_finalizer_and_is_drained_when_its_provisioner_goes(bare: Env) -> None:
    bare.apply(provisioner("default"), node("by-hand", provisioner="default"))
    web = pod("web", node_name="by-hand", owner=OWNER)
    web["status"] = {"phase": "Running"}
    bare.apply(web)
    bare.sync()
    Finalizer(bare.state).reconcile()
    held = bare.client.get(path_of("v1", "nodes", name="by-hand"))
    assert held["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    bare.client.delete(path_of("karpenter.sh/v1alpha5", "provisioners", name="default"))   # its nodes go with it
    bare.settle(lambda: bare.client.get(path_of("v1", "nodes", name="by-hand"))["metadata"].get("deletionTimestamp"))
    bare.sync()
    Terminator(bare.state, bare.cloud, bare.clock).reconcile()
    assert bare.client.get(path_of("v1", "pods", "default", "web"))["metadata"].get("deletionTimestamp")   # drained first
    bare.client.delete(path_of("v1", "pods", "default", "web"), gracePeriodSeconds=0)   # its kubelet stops it
    bare.sync()
    Terminator(bare.state, bare.cloud, bare.clock).reconcile()
    assert node_gone(bare, "by-hand")


def test_karpy_explain_node_names_the_pod_and_the_rule_that_hold_a_drain(bare: Env, capsys: pytest.CaptureFixture[str]) -> None:
    n = node("draining")
    n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    loner, db = pod("loner", node_name="draining", owner=None), pod("db-0", node_name="draining", owner=OWNER, labels={"app": "db"})
    for p in (loner, db):
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    bare.apply(n, loner, db, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                              "metadata": {"name": "db", "namespace": "default"},
                              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})
    bare.client.delete(path_of("v1", "nodes", name="draining"))

    def explain(*flags: str) -> str:
        """The command line in this process (its startup is what a subprocess would add)."""
        capsys.readouterr()
        assert main(["explain", "node", "draining", "--kubeconfig", str(bare.kube.kubeconfig), "--catalog", "fake-400",
                     *flags]) == 0
        return str(capsys.readouterr().out)
    assert json.loads(explain("-o", "json")) == {
        "node": "draining", "verdict": "draining", "heldBy": "default/loner",
        "reason": "cannot drain: pod default/loner does not have any owner references"}
    bare.client.delete(path_of("v1", "pods", "default", "loner"), gracePeriodSeconds=0)
    assert explain().strip() == ("node draining: draining: cannot evict: pod default/db-0 is held by "
                                 "PodDisruptionBudget default/db (no disruption allowed now)")


def test_critical_pods_wait_while_an_ordinary_pod_is_held_by_its_budget() -> None:
    """A pod a PDB refused is still there, not leaving: the critical pods stay until it has been let go."""
    held = pod("held")
    dns = pod("dns", priorityClassName="system-cluster-critical")
    plan = plan_drain([held, dns], now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert [p["metadata"]["name"] for p in plan.evict] == ["held"] and plan.waiting == 1 and not plan.drained
    held["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    plan = plan_drain([held, dns], now=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert [p["metadata"]["name"] for p in plan.evict] == ["dns"] and plan.waiting == 1


def test_a_node_cordoned_before_its_deletion_still_leaves_external_load_balancers(bare: Env) -> None:
    """v0.16.3 labels only a node it cordons itself; karpy also labels one a person cordoned first."""
    n = node("cordoned", unschedulable=True)
    n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    keep = pod("keep", node_name="cordoned", owner=OWNER, annotations={wk.DO_NOT_EVICT: "true"})   # holds it, to be read
    bare.apply(n, keep)
    bare.client.delete(path_of("v1", "nodes", name="cordoned"))
    bare.sync()
    Terminator(bare.state, bare.cloud, bare.clock).reconcile()
    assert bare.client.get(path_of("v1", "nodes", name="cordoned"))["metadata"]["labels"][wk.EXCLUDE_FROM_LOAD_BALANCERS] == "karpenter"
