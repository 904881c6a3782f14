"""Karpenter v0.16.3's node suite (pkg/controllers/node/suite_test.go), ported.

Describe("Controller"), contexts "Expiration", "Emptiness" and "Finalizer": one test per Karpenter `It`,
14 in all, against the local cluster's API server alone (`bare`). v0.16.3's node controller runs four
sub-reconcilers on a node in turn (initialization, expiration, emptiness, finalizer); karpy runs each as its
own controller, so `reconcile` runs them in that order, the caches catching up between them, and returns
what each asked for (seconds until it looks again).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.timestamps import parse_time, rfc3339
from karpy.controller.node.emptiness import Emptiness
from karpy.controller.node.expiration import Expiration
from karpy.controller.node.finalizer import Finalizer
from karpy.controller.node.initialization import Initialization
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, provisioner, random_name
from tests.controller.conftest import Env

pytestmark = pytest.mark.slow      # starts the local cluster

FAKE_FINALIZER = "fake.com/finalizer"


def reconcile(env: Env) -> dict[str, float | None]:
    """ExpectReconcileSucceeded for v0.16.3's node controller: each sub-reconciler's pass, in its order."""
    results = {}
    for name, controller in (("initialization", Initialization(env.state, env.clock)),
                             ("expiration", Expiration(env.state, env.clock)),
                             ("emptiness", Emptiness(env.state, env.clock)),
                             ("finalizer", Finalizer(env.state))):
        env.sync()
        results[name] = controller.reconcile()
    return results


def a_node(*, provisioner_name: str | None = None, finalizers: list[str] | None = None,
           annotations: dict[str, str] | None = None, ready: str = "True") -> dict[str, Any]:
    """test.Node: Ready (or `ready`), labelled with `provisioner_name` when given."""
    n = node(provisioner=provisioner_name)
    if finalizers:
        n["metadata"]["finalizers"] = finalizers
    if annotations:
        n["metadata"]["annotations"] = annotations
    n["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    return n


def live(env: Env, n: dict[str, Any]) -> dict[str, Any]:
    """ExpectNodeExists."""
    return env.client.get(path_of("v1", "nodes", name=n["metadata"]["name"]))


def deleting(env: Env, n: dict[str, Any]) -> bool:
    return bool(live(env, n)["metadata"].get("deletionTimestamp"))


@pytest.fixture
def prov(bare: Env) -> dict[str, Any]:
    """The suite's BeforeEach provisioner: a random name, an empty spec. Not yet applied."""
    return provisioner(random_name("provisioner"))


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


# ---------------------------------------------------------------- Context("Expiration")

# Expiration / It("should ignore nodes without TTLSecondsUntilExpired")
def test_expiration_ignores_nodes_without_ttl_seconds_until_expired(bare: Env, prov: dict[str, Any]) -> None:
    n = a_node(provisioner_name=name_of(prov), finalizers=[wk.TERMINATION_FINALIZER])
    bare.apply(prov, n)
    reconcile(bare)
    assert not deleting(bare, n)


# Expiration / It("should ignore nodes without a provisioner")
def test_expiration_ignores_nodes_without_a_provisioner(bare: Env, prov: dict[str, Any]) -> None:
    prov["spec"]["ttlSecondsUntilExpired"] = 30
    n = a_node(finalizers=[wk.TERMINATION_FINALIZER])
    bare.apply(prov, n)
    bare.clock.step(60)
    reconcile(bare)
    assert not deleting(bare, n)


# Expiration / It("should delete nodes after expiry")
def test_expiration_deletes_nodes_after_expiry(bare: Env, prov: dict[str, Any]) -> None:
    prov["spec"]["ttlSecondsUntilExpired"] = 30
    n = a_node(provisioner_name=name_of(prov), finalizers=[wk.TERMINATION_FINALIZER])
    bare.apply(prov, n)
    reconcile(bare)
    assert not deleting(bare, n)
    # the API server stamped the node with the wall clock, which may have run past the test's clock meanwhile
    created = parse_time(bare.client.get(path_of("v1", "nodes", name=name_of(n)))["metadata"]["creationTimestamp"])
    bare.clock.step((created - bare.clock.now()).total_seconds() + 30)
    reconcile(bare)
    assert deleting(bare, n)


# ---------------------------------------------------------------- Describe("Emptiness")

# Emptiness / It("should not TTL nodes that have ready status unknown"),
#             It("should not TTL nodes that have ready status false")
@pytest.mark.parametrize("ready", ["Unknown", "False"])
def test_emptiness_does_not_ttl_nodes_that_are_not_ready(bare: Env, prov: dict[str, Any], ready: str) -> None:
    prov["spec"]["ttlSecondsAfterEmpty"] = 30
    n = a_node(provisioner_name=name_of(prov), ready=ready)
    bare.apply(prov, n)
    reconcile(bare)
    assert wk.EMPTINESS_TIMESTAMP not in (live(bare, n)["metadata"].get("annotations") or {})


# Emptiness / It("should label nodes as underutilized and add TTL")
def test_emptiness_marks_empty_nodes_with_a_ttl(bare: Env, prov: dict[str, Any]) -> None:
    prov["spec"]["ttlSecondsAfterEmpty"] = 30
    n = a_node(provisioner_name=name_of(prov))
    bare.apply(prov, n)
    bare.clock.step(30)
    reconcile(bare)
    bare.clock.step(320)
    reconcile(bare)
    assert wk.EMPTINESS_TIMESTAMP in (live(bare, n)["metadata"].get("annotations") or {})


# Emptiness / It("should remove labels from non-empty nodes")
def test_emptiness_unmarks_nodes_that_are_not_empty(bare: Env, prov: dict[str, Any]) -> None:
    prov["spec"]["ttlSecondsAfterEmpty"] = 30
    n = a_node(provisioner_name=name_of(prov),
               annotations={wk.EMPTINESS_TIMESTAMP: rfc3339(bare.clock.now() + dt.timedelta(seconds=100))})
    busy = pod(node_name=name_of(n), owner=None)
    busy["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    bare.apply(prov, n, busy)
    bare.clock.step(320)
    reconcile(bare)
    assert wk.EMPTINESS_TIMESTAMP not in (live(bare, n)["metadata"].get("annotations") or {})


# Emptiness / It("should delete empty nodes past their TTL")
def test_emptiness_deletes_empty_nodes_past_their_ttl(bare: Env, prov: dict[str, Any]) -> None:
    prov["spec"]["ttlSecondsAfterEmpty"] = 30
    n = a_node(provisioner_name=name_of(prov), finalizers=[wk.TERMINATION_FINALIZER],
               annotations={wk.EMPTINESS_TIMESTAMP: rfc3339(dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=100))})
    bare.apply(prov, n)
    bare.clock.step(320)
    reconcile(bare)
    assert deleting(bare, n)


# Emptiness / It("should requeue reconcile if node is empty, but not past emptiness TTL")
def test_emptiness_requeues_an_empty_node_for_when_its_ttl_runs_out(bare: Env, prov: dict[str, Any]) -> None:
    prov["spec"]["ttlSecondsAfterEmpty"] = 30
    n = a_node(provisioner_name=name_of(prov), finalizers=[wk.TERMINATION_FINALIZER])
    bare.apply(prov, n)
    bare.clock.step(320)
    marked = rfc3339(bare.clock.now() - dt.timedelta(seconds=10))
    bare.client.patch(path_of("v1", "nodes", name=name_of(n)), {"metadata": {"annotations": {wk.EMPTINESS_TIMESTAMP: marked}}})
    # the timestamp is written to the second and read back from it: the test reckons with the same
    marked_at = parse_time(marked)
    assert marked_at is not None
    expected = (marked_at + dt.timedelta(seconds=30) - bare.clock.now()).total_seconds()     # about 20 s
    assert reconcile(bare)["emptiness"] == pytest.approx(expected)
    assert not deleting(bare, n)


# ---------------------------------------------------------------- Context("Finalizer")

# Finalizer / It("should add the termination finalizer if missing")
def test_finalizer_adds_the_termination_finalizer_if_missing(bare: Env, prov: dict[str, Any]) -> None:
    n = a_node(provisioner_name=name_of(prov), finalizers=[FAKE_FINALIZER])
    bare.apply(prov, n)
    reconcile(bare)
    assert sorted(live(bare, n)["metadata"]["finalizers"]) == sorted([FAKE_FINALIZER, wk.TERMINATION_FINALIZER])


# Finalizer / It("should do nothing if terminating")
def test_finalizer_does_nothing_if_terminating(bare: Env, prov: dict[str, Any]) -> None:
    n = a_node(provisioner_name=name_of(prov), finalizers=[FAKE_FINALIZER])
    bare.apply(prov, n)
    bare.client.delete(path_of("v1", "nodes", name=name_of(n)))
    reconcile(bare)
    assert live(bare, n)["metadata"]["finalizers"] == [FAKE_FINALIZER]


# Finalizer / It("should do nothing if the termination finalizer already exists")
def test_finalizer_does_nothing_if_the_termination_finalizer_already_exists(bare: Env, prov: dict[str, Any]) -> None:
    n = a_node(provisioner_name=name_of(prov), finalizers=[wk.TERMINATION_FINALIZER, FAKE_FINALIZER])
    bare.apply(prov, n)
    reconcile(bare)
    assert live(bare, n)["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER, FAKE_FINALIZER]


# Finalizer / It("should do nothing if the not owned by a provisioner")
def test_finalizer_does_nothing_if_not_owned_by_a_provisioner(bare: Env, prov: dict[str, Any]) -> None:
    n = a_node(finalizers=[FAKE_FINALIZER])
    bare.apply(prov, n)
    reconcile(bare)
    assert live(bare, n)["metadata"]["finalizers"] == [FAKE_FINALIZER]
    assert not live(bare, n)["metadata"].get("ownerReferences")


# Finalizer / It("should add an owner reference to the node")
def test_finalizer_adds_an_owner_reference_to_the_node(bare: Env, prov: dict[str, Any]) -> None:
    n = a_node(provisioner_name=name_of(prov))
    bare.apply(prov, n)
    reconcile(bare)
    uid = bare.client.get(path_of("karpenter.sh/v1alpha5", "provisioners", name=name_of(prov)))["metadata"]["uid"]
    assert live(bare, n)["metadata"]["ownerReferences"] == [{
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "name": name_of(prov), "uid": uid,
        "blockOwnerDeletion": True}]
