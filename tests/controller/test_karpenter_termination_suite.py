"""Karpenter v0.16.3's termination suite (pkg/controllers/termination/suite_test.go), ported.

Describe("Termination") / Context("Reconciliation"): one test per Karpenter `It`, 14 in all, against the
local cluster's API server alone (`bare`: no kubelets, so an evicted pod stays terminating until the test
deletes it, as on envtest). `reconcile` is ExpectReconcileSucceeded: the caches catch up with what the test
wrote, then the termination controller makes one pass. Karpenter's eviction queue retries on its own;
karpy evicts on each pass, so "enqueued for eviction" reads here as "evicted by the pass".
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.controller.termination.controller import Terminator
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, random_name
from tests.controller.conftest import Env

pytestmark = pytest.mark.slow      # starts the local cluster

OWNER = ("ReplicationController", "rs")       # defaultOwnerRefs: an owner the local cluster does not collect
UNSCHEDULABLE = {"key": wk.TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def running(node_name: str, *, owner: tuple[str, str] | None = OWNER, **kw: Any) -> dict[str, Any]:
    """test.Pod bound to `node_name`, running and ready (so a PDB counts it, and deleting it takes its grace period)."""
    p = pod(node_name=node_name, owner=owner, **kw)
    p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return p


def static(node: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A static pod's mirror: owned by its Node."""
    p = running(node["metadata"]["name"], owner=None, **kw)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"],
                                         "uid": node["metadata"]["uid"]}]
    return p


def apply(env: Env, *objects: dict[str, Any]) -> list[dict[str, Any]]:
    """ExpectApplied: create each object and return it as the API server holds it."""
    out = []
    for obj in objects:
        env.apply(obj)
        meta = obj["metadata"]
        out.append(env.client.get(path_of("v1", "pods", meta["namespace"], meta["name"]) if obj["kind"] == "Pod"
                                  else path_of("v1", "nodes", name=meta["name"])) if obj["kind"] in ("Pod", "Node") else obj)
    return out


def reconcile(env: Env) -> float | None:
    env.sync()
    return Terminator(env.state, env.cloud, env.clock).reconcile()


def delete_node(env: Env, n: dict[str, Any]) -> None:
    env.client.delete(path_of("v1", "nodes", name=n["metadata"]["name"]))


def node_exists(env: Env, n: dict[str, Any]) -> dict[str, Any]:
    return env.client.get(path_of("v1", "nodes", name=n["metadata"]["name"]))


def expect_node_not_found(env: Env, n: dict[str, Any]) -> None:
    __tracebackhide__ = True
    names = [o["metadata"]["name"] for o in env.client.get(path_of("v1", "nodes"))["items"]]
    assert n["metadata"]["name"] not in names, f"node {n['metadata']['name']} still exists"


def expect_node_draining(env: Env, n: dict[str, Any]) -> dict[str, Any]:
    __tracebackhide__ = True
    live = node_exists(env, n)
    assert live["spec"].get("unschedulable") is True
    assert wk.TERMINATION_FINALIZER in live["metadata"]["finalizers"]
    assert live["metadata"].get("deletionTimestamp")
    return live


def _live_pod(env: Env, p: dict[str, Any]) -> dict[str, Any]:
    return env.client.get(path_of("v1", "pods", p["metadata"]["namespace"], p["metadata"]["name"]))


def expect_evicted(env: Env, *pods: dict[str, Any]) -> None:
    __tracebackhide__ = True
    for p in pods:
        assert _live_pod(env, p)["metadata"].get("deletionTimestamp"), f"expected {p['metadata']['name']} to be evicting"


def expect_not_evicted(env: Env, *pods: dict[str, Any]) -> None:
    """ExpectNotEnqueuedForEviction."""
    __tracebackhide__ = True
    for p in pods:
        assert not _live_pod(env, p)["metadata"].get("deletionTimestamp"), f"{p['metadata']['name']} was evicted"


def expect_deleted(env: Env, *pods: dict[str, Any]) -> None:
    """ExpectDeleted: delete with grace period 0, gone at once."""
    for p in pods:
        env.client.delete(path_of("v1", "pods", p["metadata"]["namespace"], p["metadata"]["name"]), gracePeriodSeconds=0)
    names = {p["metadata"]["name"] for p in env.client.get(path_of("v1", "pods", "default"))["items"]}
    assert not names & {p["metadata"]["name"] for p in pods}


@pytest.fixture
def n(bare: Env) -> dict[str, Any]:
    """The suite's BeforeEach node: the termination finalizer, no providerID (the fake provider's delete is a no-op).
    Not yet applied: each test applies it with its pods, as ExpectApplied does."""
    n = node()
    n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    return n


# Reconciliation / It("should delete nodes")
def test_deletes_nodes(bare: Env, n: dict[str, Any]) -> None:
    apply(bare, n)
    delete_node(bare, n)
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should exclude nodes from load balancers when terminating")
def test_excludes_nodes_from_load_balancers_when_terminating(bare: Env, n: dict[str, Any]) -> None:
    # the do-not-evict pod keeps the node, so its labels can be read after the pass
    apply(bare, n, running(name_of(n), annotations={wk.DO_NOT_EVICT: "true"}))
    delete_node(bare, n)
    reconcile(bare)
    assert node_exists(bare, n)["metadata"]["labels"][wk.EXCLUDE_FROM_LOAD_BALANCERS] == "karpenter"


# Reconciliation / It("should not evict pods that tolerate unschedulable taint")
def test_does_not_evict_pods_that_tolerate_the_unschedulable_taint(bare: Env, n: dict[str, Any]) -> None:
    evict, skip = running(name_of(n)), running(name_of(n), tolerations=[UNSCHEDULABLE])
    apply(bare, n, evict, skip)
    delete_node(bare, n)
    reconcile(bare)
    expect_node_draining(bare, n)
    expect_evicted(bare, evict)
    expect_not_evicted(bare, skip)
    expect_deleted(bare, evict)
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should not delete nodes that have a do-not-evict pod"),
#                It("should not delete nodes that have a do-not-evict pod that tolerates an unschedulable taint"),
def expect_held_until_the_holder_is_gone(bare: Env, n: dict[str, Any], evict: dict[str, Any],
                                         holder: dict[str, Any]) -> None:
    """Deleting `n`: nothing is evicted while `holder` is there; once it is deleted, `evict` goes, then the node."""
    delete_node(bare, n)
    reconcile(bare)
    expect_not_evicted(bare, evict, holder)
    expect_node_draining(bare, n)
    expect_deleted(bare, holder)
    reconcile(bare)
    expect_evicted(bare, evict)
    expect_deleted(bare, evict)
    reconcile(bare)
    expect_node_not_found(bare, n)


#                It("should not delete nodes that have pods without an owner ref")
@pytest.mark.parametrize("holder", [
    pytest.param({"annotations": {wk.DO_NOT_EVICT: "true"}}, id="do-not-evict"),
    pytest.param({"annotations": {wk.DO_NOT_EVICT: "true"}, "tolerations": [UNSCHEDULABLE]}, id="do-not-evict-tolerating"),
    pytest.param({"owner": None}, id="without-owner-ref"),
])
def test_a_pod_that_holds_the_node_stops_every_eviction_until_it_is_gone(bare: Env, n: dict[str, Any],
                                                                       holder: dict[str, Any]) -> None:
    evict, no_evict = running(name_of(n)), running(name_of(n), **holder)
    apply(bare, n, evict, no_evict)
    expect_held_until_the_holder_is_gone(bare, n, evict, no_evict)


# Reconciliation / It("should not delete nodes that have a do-not-evict static pod")
def test_a_do_not_evict_static_pod_holds_the_node(bare: Env, n: dict[str, Any]) -> None:
    (live,) = apply(bare, n)
    evict, no_evict = running(name_of(n)), static(live, annotations={wk.DO_NOT_EVICT: "true"})
    apply(bare, evict, no_evict)
    # the mirror pod stays while its Node is still there
    expect_held_until_the_holder_is_gone(bare, n, evict, no_evict)


# Reconciliation / It("should delete nodes with terminal pods")
def test_deletes_nodes_with_terminal_pods(bare: Env, n: dict[str, Any]) -> None:
    succeeded, failed = (running(name_of(n), owner=None) for _ in range(2))
    succeeded["status"]["phase"], failed["status"]["phase"] = "Succeeded", "Failed"
    apply(bare, n, succeeded, failed)
    delete_node(bare, n)
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should delete nodes that have do-not-evict on pods for which it does not apply")
def test_pods_stuck_terminating_hold_nothing_whatever_their_annotations(bare: Env, n: dict[str, Any]) -> None:
    pods = [running(name_of(n), annotations={wk.DO_NOT_EVICT: "true"}),
            running(name_of(n), tolerations=[{"operator": "Exists"}]),
            running(name_of(n))]
    apply(bare, n, *pods)
    delete_node(bare, n)
    for p in pods:
        bare.client.delete(path_of("v1", "pods", "default", name_of(p)), gracePeriodSeconds=30)
    reconcile(bare)
    node_exists(bare, n)
    bare.clock.step(2 * 60)                          # stuck terminating: the kubelet is taken to be gone
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should fail to evict pods that violate a PDB")
def test_fails_to_evict_pods_that_violate_a_pdb(bare: Env, n: dict[str, Any]) -> None:
    labels = {random_name("key"): random_name("value")}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": random_name("pdb"), "namespace": "default"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}
    no_evict = running(name_of(n), labels=labels)
    apply(bare, n, no_evict, pdb)
    delete_node(bare, n)
    blocked = REGISTRY.get_sample_value("karpy_evictions_total", {"result": "blocked"}) or 0.0
    reconcile(bare)
    expect_node_draining(bare, n)
    assert reconcile(bare) is not None               # refused (429), and tried again on the next pass
    assert (REGISTRY.get_sample_value("karpy_evictions_total", {"result": "blocked"}) or 0.0) >= blocked + 2
    expect_not_evicted(bare, no_evict)
    expect_deleted(bare, no_evict)
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should evict non-critical pods first")
def test_evicts_non_critical_pods_first(bare: Env, n: dict[str, Any]) -> None:
    evict = running(name_of(n))
    node_critical = running(name_of(n), priorityClassName="system-node-critical")
    cluster_critical = running(name_of(n), priorityClassName="system-cluster-critical")
    apply(bare, n, evict, node_critical, cluster_critical)
    delete_node(bare, n)
    reconcile(bare)
    expect_node_draining(bare, n)
    expect_evicted(bare, evict)
    expect_not_evicted(bare, node_critical, cluster_critical)
    expect_deleted(bare, evict)
    reconcile(bare)
    expect_evicted(bare, node_critical, cluster_critical)
    expect_deleted(bare, node_critical, cluster_critical)
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should not evict static pods")
def test_does_not_evict_static_pods(bare: Env, n: dict[str, Any]) -> None:
    evict = running(name_of(n))
    live, _ = apply(bare, n, evict)
    no_evict = static(live)
    apply(bare, no_evict)
    delete_node(bare, n)
    reconcile(bare)
    expect_not_evicted(bare, no_evict)
    expect_evicted(bare, evict)
    expect_node_draining(bare, n)
    reconcile(bare)
    expect_deleted(bare, evict)
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should not delete nodes until all pods are deleted")
def test_does_not_delete_nodes_until_all_pods_are_deleted(bare: Env, n: dict[str, Any]) -> None:
    pods = [running(name_of(n)), running(name_of(n))]
    apply(bare, n, *pods)
    delete_node(bare, n)
    reconcile(bare)
    expect_evicted(bare, *pods)
    reconcile(bare)
    expect_node_draining(bare, n)
    expect_deleted(bare, pods[1])
    reconcile(bare)
    expect_node_draining(bare, n)
    expect_deleted(bare, pods[0])
    reconcile(bare)
    expect_node_not_found(bare, n)


# Reconciliation / It("should wait for pods to terminate")
def test_waits_for_pods_to_terminate(bare: Env, n: dict[str, Any]) -> None:
    p = running(name_of(n))
    apply(bare, n, p)
    delete_node(bare, n)
    reconcile(bare)
    node_exists(bare, n)
    expect_evicted(bare, p)
    bare.clock.step(90)                              # past the pod's grace: its kubelet is taken to be gone
    reconcile(bare)
    expect_node_not_found(bare, n)
