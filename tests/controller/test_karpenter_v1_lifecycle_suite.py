"""Karpenter v1's suites for forceful expiry, the termination grace period and node repair, ported.

pkg/controllers/nodeclaim/expiration/suite_test.go, the terminationGracePeriod `It`s of
pkg/controllers/node/termination/suite_test.go and pkg/controllers/node/health/suite_test.go, against the
local cluster's API server alone (`bare`, as the v0.16 termination suite runs: no kubelets, so a deleted pod
stays terminating until the test plays its kubelet). Karpenter's NodeClaim is karpy's Node here: expiry
and repair delete the Node, termination drains it, and the termination time is recorded on it. Each
controller makes one pass per `reconcile`, after the caches caught up with what the test wrote.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Iterator

import pytest
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.apis.timestamps import parse_time, rfc3339
from karpy.apis.v1.labels import DO_NOT_DISRUPT, NODECLAIM_TERMINATION_TIMESTAMP
from karpy.commands import controller_settings
from karpy.controller.node.expiration import Expiration
from karpy.controller.node.repair import Repair
from karpy.controller.operator import Operator
from karpy.kubeclient.raw import path_of
from karpy.main import build_parser, main
from tests.builders import node, random_name
from tests.controller.conftest import CATALOG, Env
from tests.controller.test_karpenter_termination_suite import (
    delete_node,
    expect_deleted,
    expect_evicted,
    expect_node_draining,
    expect_node_not_found,
    expect_not_evicted,
    name_of,
    node_exists,
    reconcile,
    running,
)

pytestmark = pytest.mark.slow      # starts the local cluster

POOL = "default"
MINUTE = 60


def nodepool(*, budgets: list[dict[str, Any]] | None = None, **template_spec: Any) -> dict[str, Any]:
    """test.NodePool(): `template_spec` merged into spec.template.spec."""
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": POOL},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                            "name": "default"}, "requirements": [], **template_spec}},
                     "disruption": {"consolidateAfter": "Never", "budgets": budgets or [{"nodes": "10%"}]}}}


def pool_node(*, ready: str = "True", since: dt.datetime | None = None, **kw: Any) -> dict[str, Any]:
    """test.NodeClaimAndNode's node: the NodePool's label, the termination finalizer, Ready as given since `since`."""
    n = node(labels={wk.NODEPOOL: POOL}, **kw)
    n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    condition: dict[str, Any] = {"type": "Ready", "status": ready}
    if since is not None:
        condition["lastTransitionTime"] = rfc3339(since)
    n["status"]["conditions"] = [condition]
    return n


@pytest.fixture
def v1(bare: Env) -> Iterator[Env]:
    """`bare`, and the NodePool it applied goes afterwards (the shared clean-up knows Provisioners only)."""
    yield bare
    for plural in ("nodeclaims", "nodepools"):
        for obj in bare.client.get(path_of("karpenter.sh/v1", plural))["items"]:
            bare.client.delete(path_of("karpenter.sh/v1", plural, name=obj["metadata"]["name"]))
    bare.settle(lambda: not bare.state.nodepools.items())


def nodeclaim(n: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """The NodeClaim that launched node `n`, its spec stamped with `spec` (expireAfter, terminationGracePeriod)."""
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
             "metadata": {"name": name_of(n), "labels": {wk.NODEPOOL: POOL}},
             "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                      "requirements": [], **spec}}
    return claim


def expire(env: Env) -> float | None:
    env.sync()
    return Expiration(env.state, env.clock).reconcile()


def repair(env: Env) -> float | None:
    env.sync()
    return Repair(env.state, env.clock).reconcile()


def deleting(env: Env, n: dict[str, Any]) -> bool:
    return bool(node_exists(env, n)["metadata"].get("deletionTimestamp"))


def live_pod(env: Env, p: dict[str, Any]) -> dict[str, Any]:
    return env.client.get(path_of("v1", "pods", "default", name_of(p)))


# --- nodeclaim/expiration -----------------------------------------------------------------------------

# It("should not remove the NodeClaims when expiration is disabled")
def test_expiration_never_keeps_the_node(v1: Env) -> None:
    n = pool_node()
    v1.apply(nodepool(expireAfter="Never"), n)
    v1.clock.step(10_000 * 3600)
    assert expire(v1) is None
    assert not deleting(v1, n)


# It("should not remove non-expired NodeClaims") / It("should return the requeue interval for the time between
# now and when the nodeClaim expires")
def test_a_node_not_yet_expired_stays_and_is_looked_at_again_when_it_expires(v1: Env) -> None:
    n = pool_node()
    v1.apply(nodepool(expireAfter="200s"), n)
    v1.clock.step(100)
    again = expire(v1)
    assert not deleting(v1, n)
    assert again is not None and 90 <= again <= 100


# It("should remove NodeClaims that are expired"), forcefully: v1 expires past budgets and do-not-disrupt
def test_an_expired_node_is_deleted_whatever_budgets_and_do_not_disrupt_say(v1: Env) -> None:
    n = pool_node()
    n["metadata"]["annotations"] = {DO_NOT_DISRUPT: "true"}
    held = running(name_of(n), annotations={DO_NOT_DISRUPT: "true"})
    v1.apply(nodepool(expireAfter="30s", budgets=[{"nodes": "0"}]), n, held)
    v1.clock.step(31)
    expire(v1)
    assert deleting(v1, n)


def test_a_node_expires_by_the_expire_after_its_nodeclaim_was_stamped_with_not_its_nodepools_current_one(v1: Env) -> None:
    kept, expiring = pool_node(), pool_node()
    v1.apply(nodepool(expireAfter="30s"), kept, expiring)
    v1.client.create(path_of("karpenter.sh/v1", "nodeclaims"), nodeclaim(kept, expireAfter="1h"))
    v1.client.create(path_of("karpenter.sh/v1", "nodeclaims"), nodeclaim(expiring, expireAfter="30s"))
    v1.clock.step(31)
    again = expire(v1)
    assert deleting(v1, expiring) and not deleting(v1, kept)
    assert again is not None and again > 50 * MINUTE


# --- node/termination: the terminationGracePeriod ------------------------------------------------------

def test_the_termination_time_is_recorded_on_the_node_once_and_explained(v1: Env, capsys: pytest.CaptureFixture[str]) -> None:
    n = pool_node()
    v1.apply(nodepool(terminationGracePeriod="5m"), n, running(name_of(n), annotations={DO_NOT_DISRUPT: "true"}))
    delete_node(v1, n)
    reconcile(v1)
    live = expect_node_draining(v1, n)
    recorded = live["metadata"]["annotations"][NODECLAIM_TERMINATION_TIMESTAMP]
    assert parse_time(recorded) == (parse_time(live["metadata"]["deletionTimestamp"]) + dt.timedelta(minutes=5)).replace(microsecond=0)
    v1.clock.step(MINUTE)
    reconcile(v1)
    assert node_exists(v1, n)["metadata"]["annotations"][NODECLAIM_TERMINATION_TIMESTAMP] == recorded
    capsys.readouterr()
    assert main(["explain", "node", name_of(n), "--kubeconfig", str(v1.kube.kubeconfig), "--catalog", "fake-400",
                 "-o", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["terminationTime"] == recorded
    assert explained["reason"].endswith(f"; the node is gone by {recorded} (terminationGracePeriod)")


def test_the_grace_period_is_the_one_the_nodeclaim_was_stamped_with(v1: Env) -> None:
    n = pool_node()
    v1.apply(nodepool(terminationGracePeriod="24h"), n, running(name_of(n), annotations={DO_NOT_DISRUPT: "true"}))
    v1.client.create(path_of("karpenter.sh/v1", "nodeclaims"), nodeclaim(n, terminationGracePeriod="10m"))
    delete_node(v1, n)
    reconcile(v1)
    live = expect_node_draining(v1, n)
    assert parse_time(live["metadata"]["annotations"][NODECLAIM_TERMINATION_TIMESTAMP]) == \
        (parse_time(live["metadata"]["deletionTimestamp"]) + dt.timedelta(minutes=10)).replace(microsecond=0)


# It("should preemptively delete pods to satisfy their terminationGracePeriodSeconds")
def test_preemptively_deletes_pods_to_satisfy_their_termination_grace_period_seconds(v1: Env) -> None:
    n = pool_node()
    held = running(name_of(n), annotations={DO_NOT_DISRUPT: "true"}, terminationGracePeriodSeconds=300)
    v1.apply(nodepool(terminationGracePeriod="300s"), n, held)
    delete_node(v1, n)
    v1.clock.step(10)
    assert reconcile(v1) is not None
    node_exists(v1, n)
    expect_evicted(v1, held)


# It("should only delete pods when their terminationGracePeriodSeconds is less than the the node's remaining
# terminationGracePeriod"): and the grace period the pod gets is what is left
def test_deletes_a_pod_only_once_its_grace_period_no_longer_fits_and_shortens_it(v1: Env) -> None:
    n = pool_node()
    held = running(name_of(n), annotations={DO_NOT_DISRUPT: "true"}, terminationGracePeriodSeconds=60)
    v1.apply(nodepool(terminationGracePeriod="300s"), n, held)
    delete_node(v1, n)
    v1.clock.step(90)
    again = reconcile(v1)
    expect_node_draining(v1, n)
    expect_not_evicted(v1, held)
    assert again is not None and again <= 5          # looked at again, at the latest when the pod is due
    v1.clock.step(175)                               # 60 s before the termination time, and then some
    reconcile(v1)
    pod = live_pod(v1, held)
    assert pod["metadata"].get("deletionTimestamp")
    assert 30 <= pod["metadata"]["deletionGracePeriodSeconds"] <= 40


# It("should not gate past-deadline pods behind graceful eviction of earlier tiers")
def test_past_deadline_pods_are_not_gated_behind_the_graceful_eviction_of_earlier_tiers(v1: Env) -> None:
    n = pool_node()
    non_critical = running(name_of(n), terminationGracePeriodSeconds=30)
    critical = running(name_of(n), priorityClassName="system-node-critical", terminationGracePeriodSeconds=600)
    v1.apply(nodepool(terminationGracePeriod="300s"), n, non_critical, critical)
    delete_node(v1, n)
    v1.clock.step(10)
    reconcile(v1)
    expect_evicted(v1, non_critical, critical)


def test_a_pod_a_pdb_protects_is_deleted_once_the_grace_period_runs_out_and_the_node_goes_by_the_deadline(v1: Env) -> None:
    n = pool_node()
    labels = {random_name("key"): random_name("value")}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": random_name("pdb"), "namespace": "default"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}
    protected = running(name_of(n), labels=labels, terminationGracePeriodSeconds=30)
    v1.apply(nodepool(terminationGracePeriod="2m"), n, protected, pdb)
    delete_node(v1, n)
    deleted = REGISTRY.get_sample_value("karpy_evictions_total", {"result": "deleted"}) or 0.0
    reconcile(v1)
    expect_not_evicted(v1, protected)                # the budget refuses the eviction
    v1.clock.step(2 * MINUTE - 20)                   # less than the pod's 30 s are left
    reconcile(v1)
    expect_evicted(v1, protected)
    assert (REGISTRY.get_sample_value("karpy_evictions_total", {"result": "deleted"}) or 0.0) == deleted + 1
    expect_deleted(v1, protected)                    # its kubelet stops it
    reconcile(v1)
    expect_node_not_found(v1, n)


def test_without_a_grace_period_do_not_disrupt_holds_the_node_while_the_other_pods_go(v1: Env) -> None:
    n = pool_node()
    held = running(name_of(n), annotations={DO_NOT_DISRUPT: "true"})
    ownerless = running(name_of(n), owner=None)      # v1 evicts a pod nothing would recreate like any other
    v1.apply(nodepool(), n, held, ownerless)
    delete_node(v1, n)
    reconcile(v1)
    v1.clock.step(24 * 3600)
    reconcile(v1)
    expect_evicted(v1, ownerless)
    expect_not_evicted(v1, held)
    expect_node_draining(v1, n)
    assert NODECLAIM_TERMINATION_TIMESTAMP not in (node_exists(v1, n)["metadata"].get("annotations") or {})


# --- node/health ------------------------------------------------------------------------------------

# It("should delete nodes that are unhealthy by the cloud provider"), It("should set annotation termination grace
# period when force termination is started"), Context("Forceful termination"): budgets and do-not-disrupt ignored
@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_deletes_a_node_unready_for_30_minutes_past_budgets_and_do_not_disrupt(v1: Env, status: str) -> None:
    n = pool_node(ready=status, since=v1.clock.now())
    n["metadata"]["annotations"] = {DO_NOT_DISRUPT: "true"}
    v1.apply(nodepool(budgets=[{"nodes": "0"}]), n)
    v1.clock.step(30 * MINUTE + 1)
    repair(v1)
    live = node_exists(v1, n)
    assert live["metadata"].get("deletionTimestamp")
    assert parse_time(live["metadata"]["annotations"][NODECLAIM_TERMINATION_TIMESTAMP]) == v1.clock.now().replace(microsecond=0)


# It("should not delete node when health duration is not reached") / It("should return the requeue interval for
# the condition closest to its terminationDuration") / It("should not delete node when health status does not match")
def test_a_node_unready_for_less_than_30_minutes_or_ready_stays(v1: Env) -> None:
    unready, ready = pool_node(ready="False", since=v1.clock.now()), pool_node(since=v1.clock.now() - dt.timedelta(hours=1))
    v1.apply(nodepool(), unready, ready)
    v1.clock.step(20 * MINUTE)
    again = repair(v1)
    assert not deleting(v1, unready) and not deleting(v1, ready)
    assert again is not None and 9 * MINUTE <= again <= 10 * MINUTE


# It("should not respect termination grace period if set on the nodepool"): the drain ends at once
def test_a_repaired_nodes_pods_are_deleted_at_once_past_their_pdb(v1: Env) -> None:
    n = pool_node(ready="Unknown", since=v1.clock.now())
    labels = {random_name("key"): random_name("value")}
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": random_name("pdb"), "namespace": "default"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}
    protected = running(name_of(n), labels=labels)
    v1.apply(nodepool(terminationGracePeriod="24h"), n, protected, pdb)
    v1.clock.step(31 * MINUTE)
    repair(v1)
    reconcile(v1)
    expect_evicted(v1, protected)
    assert live_pod(v1, protected)["metadata"]["deletionGracePeriodSeconds"] == 1


# It("should ignore unhealthy nodes if more then 20% of the nodes are unhealthy in a nodepool") /
# It("should consider round up when there is a low number of nodes for a nodepool")
@pytest.mark.parametrize(("healthy", "unhealthy", "repaired"), [(3, 2, False), (2, 1, True)],
                         ids=["2-of-5-blocked", "1-of-3-rounds-up"])
def test_repair_holds_off_while_more_than_20_percent_of_the_nodepool_is_unhealthy(
        v1: Env, healthy: int, unhealthy: int, repaired: bool) -> None:
    sick = [pool_node(ready="False", since=v1.clock.now()) for _ in range(unhealthy)]
    v1.apply(nodepool(), *sick, *(pool_node() for _ in range(healthy)))
    v1.clock.step(31 * MINUTE)
    repair(v1)
    assert all(deleting(v1, n) == repaired for n in sick)
    if not repaired:
        reasons = {e["reason"] for e in v1.client.get(path_of("v1", "events", "default"))["items"]
                   if e["involvedObject"].get("name") == name_of(sick[0])}
        assert "NodeRepairBlocked" in reasons


# The NodeRepair gate, as `karpy controller --feature-gates` reads it: the operator runs the repair loop only with it on
@pytest.mark.parametrize("gates", ["NodeRepair=true", "NodeRepair=false", ""], ids=["on", "off", "unset"])
def test_the_operator_runs_the_repair_loop_only_behind_the_node_repair_gate(bare: Env, gates: str) -> None:
    args = build_parser().parse_args(["controller", "--kubeconfig", str(bare.kube.kubeconfig), "--host", "127.0.0.1",
                                      "--metrics-port", "0", "--health-port", "0", "--feature-gates", gates])
    operator = Operator(controller_settings(args), CATALOG)
    try:
        names = [loop.name for loop in operator.loops]
    finally:
        operator.stop()
    assert ("repair" in names) == (gates == "NodeRepair=true")
    assert {"termination", "expiration", "drift"} <= set(names)       # the rest run either way
