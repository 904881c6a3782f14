"""Karpenter v1's disruption suite for drift and the orchestration, ported (kubernetes-sigs/karpenter
pkg/controllers/disruption/drift_test.go, the disrupted taint and validation Its of suite_test.go, and
pkg/controllers/nodeclaim/disruption/drift_test.go for the Drifted condition).

Against the local cluster's API server alone (`bare`: no kubelets), as Karpenter's suites run on envtest: a test
writes NodeClaim and Node pairs (test.NodeClaimAndNode), runs one controller pass, steps the injected clock past v1's
15 s validation, and makes launched replacements Ready and initialized itself (ExpectMakeNodesInitialized).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.apis.timestamps import rfc3339
from karpy.apis.v1.disruption.drift import PROVISIONER_HASH, nodepool_hash_annotations, provisioner_hash
from karpy.apis.v1.labels import (
    CONDITION_CONSOLIDATABLE,
    CONDITION_DRIFTED,
    DISRUPTED_TAINT_KEY,
    DO_NOT_DISRUPT,
    NODEPOOL_HASH,
)
from karpy.apis.v1.nodepool import NodePool
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.consolidation import controller as consolidation
from karpy.controller.consolidation.controller import Consolidation, Settings
from karpy.controller.consolidation.drift import RESYNC_SECONDS as DRIFT_RESYNC_SECONDS
from karpy.controller.consolidation.drift import DriftMarker
from karpy.controller.node.expiration import Expiration
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG_DOC, Env, controller_for_nodepool
from tests.expectations import eventually

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = Settings(stabilization_seconds=15, min_node_age_seconds=0, poll_seconds=10, max_disrupted="100%")
CLAIMS = ("karpenter.sh/v1", "nodeclaims")
OWNER = ("ReplicationController", "rs")       # an owner the local cluster does not collect


def nodepool(name: str = "general", **disruption: Any) -> dict[str, Any]:
    """A NodePool whose consolidation is off (`consolidateAfter: Never`) unless asked: only drift moves its nodes."""
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"disruption": {"consolidateAfter": "Never", **disruption},
                     "template": {"metadata": {"labels": {"team": "a"}},
                                  "spec": {"requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                                           "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}


def pool_hash(manifest: dict[str, Any]) -> dict[str, str]:
    return nodepool_hash_annotations(NodePool.model_validate(manifest))


@dataclasses.dataclass
class Suite:
    env: Env
    consolidation: Consolidation

    def claim_and_node(self, name: str, *, owner: str = "general", label: str = wk.NODEPOOL, drifted: str | None = None,
                       annotations: dict[str, str] | None = None, instance_type: str = "large") -> dict[str, Any]:
        """test.NodeClaimAndNode: a launched, initialized NodeClaim and its Ready Node (finalizer kept, so a deleted
        node stays to be seen); `drifted` sets the claim's Drifted condition with that reason."""
        labels = {label: owner, wk.INSTANCE_TYPE: instance_type, wk.ZONE: "zone-a", wk.CAPACITY_TYPE: "on-demand"}
        cpu = {"small": "2", "large": "8"}[instance_type]
        n = node(name, labels=labels, initialized=True, allocatable={"cpu": cpu, "memory": "16Gi", "pods": "40"})
        n["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
        n["spec"]["providerID"] = f"fake://{name}"
        claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                 "metadata": {"name": name, "labels": labels, "annotations": dict(annotations or {})},
                 "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                               "name": "default"}}}
        client = self.env.client
        client.create(path_of(*CLAIMS), claim)
        conditions = [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}
                      for t in ("Launched", "Registered", "Initialized")]
        if drifted:
            conditions.append({"type": CONDITION_DRIFTED, "status": "True", "reason": drifted, "message": "",
                               "lastTransitionTime": "2024-01-01T00:00:00Z"})
        client.patch(path_of(*CLAIMS, name=name, subresource="status"),
                     {"status": {"providerID": f"fake://{name}", "nodeName": name, "conditions": conditions}})
        self.env.apply(n)
        return n

    def running(self, node_name: str, name: str, cpu: str = "1", **kw: Any) -> dict[str, Any]:
        p = pod(name, node_name=node_name, cpu=cpu, owner=OWNER, **kw)
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        self.env.apply(p)
        return p

    def plan(self, *, first_only: bool) -> Any:
        """What one disruption pass decides now (every action with `first_only=False`)."""
        self.env.sync()
        return consolidation.decide(self.env.state, self.env.cloud.catalog(), self.env.clock.now(), min_age_seconds=0,
                                    name_node=lambda p, i: f"{p}-{i}", first_only=first_only)

    def reconcile(self) -> float | None:
        self.env.sync()
        return self.consolidation.reconcile()

    def mark(self, marker: DriftMarker | None = None) -> float | None:
        """One pass of the claims' Drifted and Consolidatable marking, once the caches hold what the test wrote."""
        self.env.sync()
        return (marker or DriftMarker(self.env.state, self.env.clock)).reconcile()

    def live(self, name: str) -> dict[str, Any] | None:
        found = [n for n in self.env.client.get(path_of("v1", "nodes"))["items"] if n["metadata"]["name"] == name]
        return found[0] if found else None

    def deleting(self, name: str) -> bool:
        live = self.live(name)
        return live is None or bool(live["metadata"].get("deletionTimestamp"))

    def tainted(self, name: str) -> bool:
        live = self.live(name)
        return live is not None and any(t.get("key") == DISRUPTED_TAINT_KEY and t.get("effect") == "NoSchedule"
                                        for t in live["spec"].get("taints") or [])

    def new_nodes(self, *old: str) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.env.client.get(path_of("v1", "nodes"))["items"]
                      if n["metadata"]["name"] not in old)

    def initialize(self, name: str) -> None:
        """ExpectMakeNodesInitialized: Ready, and labelled initialized."""
        path = path_of("v1", "nodes", name=name)
        self.env.client.patch(path, {"metadata": {"labels": {wk.INITIALIZED: "true"}}})
        self.env.client.patch(path_of("v1", "nodes", name=name, subresource="status"),
                              {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        eventually(lambda: (self.env.state.nodes.get("", name) or {"metadata": {}})["metadata"].get("labels", {})
                   .get(wk.INITIALIZED) == "true")

    def condition(self, claim: str, kind: str = CONDITION_DRIFTED) -> dict[str, Any] | None:
        live = self.env.client.get(path_of(*CLAIMS, name=claim))
        return next((c for c in (live.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)

    def claim_status(self, claim: str, *, initialized: str = "True", initialized_at: dt.datetime,
                     last_pod_event: dt.datetime | None = None, consolidatable: bool = False) -> None:
        """Rewrite the claim's status: its Initialized condition (status, since when), lastPodEventTime and, with
        `consolidatable`, a Consolidatable condition already True."""
        conditions = [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}
                      for t in ("Launched", "Registered")]
        conditions.append({"type": "Initialized", "status": initialized, "reason": "Initialized", "message": "",
                           "lastTransitionTime": rfc3339(initialized_at)})
        if consolidatable:
            conditions.append({"type": CONDITION_CONSOLIDATABLE, "status": "True", "reason": CONDITION_CONSOLIDATABLE,
                               "message": "", "lastTransitionTime": rfc3339(initialized_at)})
        self.env.client.patch(path_of(*CLAIMS, name=claim, subresource="status"),
                              {"status": {"conditions": conditions,
                                          "lastPodEventTime": rfc3339(last_pod_event) if last_pod_event else None}})


@pytest.fixture
def suite(bare: Env) -> Iterator[Suite]:
    names = iter(f"replacement-{i}" for i in range(100))
    yield Suite(bare, Consolidation(bare.state, bare.cloud, bare.cloud.catalog, bare.clock, lambda p, i: next(names), SETTINGS))
    client = bare.client                          # NodeClaims and NodePools are this suite's own to clean up
    for claim in client.get(path_of(*CLAIMS))["items"]:
        path = path_of(*CLAIMS, name=claim["metadata"]["name"])
        client.patch(path, {"metadata": {"finalizers": None}})
        if not claim["metadata"].get("deletionTimestamp"):
            client.delete(path)
    for plural, version in (("nodepools", "karpenter.sh/v1"), ("provisioners", "karpenter.sh/v1alpha5")):
        for obj in client.get(path_of(version, plural))["items"]:
            client.delete(path_of(version, plural, name=obj["metadata"]["name"]))
    eventually(lambda: not client.get(path_of(*CLAIMS))["items"] and not bare.state.nodepools.items())


def with_pool(suite: Suite, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = manifest or nodepool()
    suite.env.apply(manifest)
    eventually(lambda: any(p.name == manifest["metadata"]["name"] for p in suite.env.state.live_provisioners()))
    return manifest


# --- Drift (pkg/controllers/disruption/drift_test.go) ------------------------------------------------------------

def test_should_ignore_nodes_without_the_drifted_status_condition(suite: Suite) -> None:
    with_pool(suite)
    suite.claim_and_node("steady")
    suite.reconcile()
    suite.env.clock.step(15)
    suite.reconcile()
    assert not suite.deleting("steady") and not suite.tainted("steady")


@pytest.mark.parametrize("where", ["node", "pod"])
def test_should_ignore_nodes_held_by_karpenter_sh_do_not_disrupt(suite: Suite, where: str) -> None:
    with_pool(suite)
    n = suite.claim_and_node("held", drifted="NodePoolDrifted")
    if where == "node":
        suite.env.client.patch(path_of("v1", "nodes", name="held"), {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}})
        eventually(lambda: (suite.env.state.nodes.get("", "held") or n)["metadata"].get("annotations"))
    else:
        suite.running("held", "precious", annotations={DO_NOT_DISRUPT: "true"})
    plan = suite.plan(first_only=False)
    kept = plan.verdict("held")
    assert kept is not None and not hasattr(kept, "kind")
    assert kept.reason.startswith("drifted (NodePoolDrifted), but ") and DO_NOT_DISRUPT in kept.reason
    suite.reconcile()
    suite.env.clock.step(15)
    suite.reconcile()
    assert not suite.deleting("held")


def disrupted_for_drift() -> float:
    """karpenter_nodeclaims_disrupted_total{reason="drifted"} of a NodePool under the default consolidation policy,
    over all its other labels."""
    return sum(sample.value for metric in REGISTRY.collect() if metric.name == "karpenter_nodeclaims_disrupted_total"
               for sample in metric.samples if sample.labels.get("reason") == "drifted"
               and sample.labels.get("consolidation_policy") == "WhenEmptyOrUnderutilized")


def test_can_delete_drifted_nodes_whose_pods_fit_elsewhere(suite: Suite) -> None:
    """An empty drifted node is deleted without a replacement, after the validation wait and tainted first."""
    with_pool(suite)
    suite.claim_and_node("drifted", drifted="NodePoolDrifted")
    suite.reconcile()
    proposal = suite.consolidation._proposal
    assert proposal is not None and proposal.action.drifted == "NodePoolDrifted" and proposal.action.kind == "delete"
    assert not suite.deleting("drifted")           # decided, not yet carried out: v1 validates after 15 s
    disrupted = disrupted_for_drift()
    suite.env.clock.step(15)
    suite.reconcile()
    assert suite.deleting("drifted") and suite.tainted("drifted")
    assert disrupted_for_drift() == disrupted + 1
    assert suite.new_nodes("drifted") == []


def test_can_replace_drifted_nodes_the_replacement_initialized_first(suite: Suite) -> None:
    with_pool(suite)
    suite.claim_and_node("drifted", drifted="RequirementsDrifted")
    suite.running("drifted", "web", cpu="1")
    suite.reconcile()
    proposal = suite.consolidation._proposal
    assert proposal is not None and proposal.action.kind == "replace" and proposal.action.drifted == "RequirementsDrifted"
    suite.env.clock.step(15)
    suite.reconcile()                              # taints the old node, launches the replacement through the launcher
    (new,) = suite.new_nodes("drifted")
    assert suite.tainted("drifted") and not suite.deleting("drifted")
    claim = suite.env.client.get(path_of(*CLAIMS, name="replacement-0"))
    # launched from today's template: not drifted itself
    assert claim["metadata"]["annotations"][NODEPOOL_HASH] == pool_hash(nodepool())[NODEPOOL_HASH]
    suite.reconcile()
    assert not suite.deleting("drifted")           # the replacement is not initialized yet: the old node stays
    suite.initialize(new)
    suite.reconcile()
    assert suite.deleting("drifted")


def test_should_untaint_nodes_when_the_drift_replacement_never_initializes(suite: Suite) -> None:
    with_pool(suite)
    suite.claim_and_node("drifted", drifted="NodePoolDrifted")
    suite.running("drifted", "web", cpu="1")
    suite.reconcile()
    suite.env.clock.step(15)
    suite.reconcile()
    assert suite.tainted("drifted")
    suite.env.clock.step(consolidation.REPLACEMENT_TIMEOUT.total_seconds())
    suite.reconcile()
    eventually(lambda: not suite.tainted("drifted"))
    assert not suite.deleting("drifted") and suite.live("drifted")["spec"].get("unschedulable") is not True


def test_should_not_drift_more_nodes_than_the_drifted_budget_allows_oldest_first(suite: Suite) -> None:
    with_pool(suite, nodepool(budgets=[{"nodes": "1", "reasons": ["Drifted"]}]))
    for name in ("first", "second"):
        suite.claim_and_node(name, drifted="NodePoolDrifted")
        suite.running(name, f"web-{name}", cpu="1")
    plan = suite.plan(first_only=False)
    assert [a.nodes for a in plan.actions] == [("first",)]
    held = plan.verdict("second")
    assert held is not None and "allows 1 Drifted disruption(s) of 2 node(s) and 1 are already disrupting" in held.reason


def test_drift_goes_before_consolidation(suite: Suite) -> None:
    """Methods in v1's order: with an underutilized node and a drifted one, Drift's command comes first."""
    with_pool(suite, nodepool(consolidationPolicy="WhenEmptyOrUnderutilized", consolidateAfter="0s"))
    suite.claim_and_node("idle")
    suite.running("idle", "small-pod", cpu="100m")
    suite.claim_and_node("drifted", drifted="NodePoolDrifted")
    suite.running("drifted", "web", cpu="1")
    plan = suite.plan(first_only=True)
    assert [(a.nodes, a.drifted) for a in plan.actions] == [(("drifted",), "NodePoolDrifted")]


# --- validation and the disrupted taint (suite_test.go) -----------------------------------------------------------

def test_should_not_disrupt_when_the_decision_becomes_invalid_during_validation(suite: Suite) -> None:
    with_pool(suite)
    suite.claim_and_node("drifted", drifted="NodePoolDrifted")
    suite.reconcile()
    assert suite.consolidation._proposal is not None
    suite.running("drifted", "arrived", annotations={DO_NOT_DISRUPT: "true"})   # during the 15 s
    suite.env.clock.step(15)
    suite.reconcile()
    assert not suite.deleting("drifted") and not suite.tainted("drifted")
    assert suite.consolidation._proposal is None or suite.consolidation._proposal.action.nodes != ("drifted",)


def test_a_provisioners_node_is_cordoned_without_the_v1_taint() -> None:
    """v0.16's nodes keep v0.16's cordon: only a NodePool's node gets karpenter.sh/disrupted."""
    taints = [{"key": "team", "value": "a", "effect": "NoSchedule"}]
    on = consolidation.disrupted_taints(taints, on=True)
    assert on == taints + [{"key": DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}]
    assert consolidation.disrupted_taints(on, on=True) == on           # set, not toggled
    assert consolidation.disrupted_taints(on, on=False) == taints


# --- the Drifted condition (pkg/controllers/nodeclaim/disruption/drift_test.go) ------------------------------------

def test_nodepool_drift_is_marked_and_cleared_with_the_template(suite: Suite) -> None:
    manifest = with_pool(suite)
    suite.claim_and_node("n", annotations=pool_hash(manifest))
    marker = DriftMarker(suite.env.state, suite.env.clock)
    suite.mark(marker)
    assert suite.condition("n") is None
    live = suite.env.client.get(path_of("karpenter.sh/v1", "nodepools", name="general"))
    assert live["metadata"]["annotations"][NODEPOOL_HASH] == pool_hash(manifest)[NODEPOOL_HASH]
    suite.env.client.patch(path_of("karpenter.sh/v1", "nodepools", name="general"),
                           {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})
    eventually(lambda: any(p.name == "general" and (p.spec.labels or {}).get("team") == "b"
                           for p in suite.env.state.live_provisioners()))
    suite.mark(marker)
    assert (suite.condition("n") or {}).get("reason") == "NodePoolDrifted"
    suite.env.client.patch(path_of("karpenter.sh/v1", "nodepools", name="general"),
                           {"spec": {"template": {"metadata": {"labels": {"team": "a"}}}}})
    eventually(lambda: any(p.name == "general" and (p.spec.labels or {}).get("team") == "a"
                           for p in suite.env.state.live_provisioners()))
    suite.mark(marker)
    assert suite.condition("n") is None


def test_requirements_drift_when_the_nodepool_no_longer_allows_the_nodes_labels(suite: Suite) -> None:
    manifest = nodepool()
    manifest["spec"]["template"]["spec"]["requirements"] = [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}]
    with_pool(suite, manifest)
    suite.claim_and_node("n", annotations=pool_hash(manifest))        # launched on-demand
    suite.mark()
    assert (suite.condition("n") or {}).get("reason") == "RequirementsDrifted"


@pytest.mark.parametrize("gate", [False, True], ids=["gate-off", "gate-on"])
def test_a_provisioners_nodes_drift_only_behind_the_drift_gate(suite: Suite, gate: bool) -> None:
    manifest = provisioner("default", labels={"team": "a"})
    suite.env.apply(manifest)
    eventually(lambda: suite.env.state.provisioners.get("", "default"))
    launched_with = provisioner_hash(Provisioner.model_validate(manifest))
    suite.claim_and_node("n", owner="default", label=wk.PROVISIONER_NAME, annotations={PROVISIONER_HASH: launched_with})
    marker = DriftMarker(suite.env.state, suite.env.clock, provisioner_drift=gate)
    suite.mark(marker)
    stamped = (suite.env.client.get(path_of("karpenter.sh/v1alpha5", "provisioners", name="default"))["metadata"]
               .get("annotations") or {}).get(PROVISIONER_HASH)
    assert stamped == (launched_with if gate else None)   # v0.16 behaviour unchanged with the gate off
    suite.env.client.patch(path_of("karpenter.sh/v1alpha5", "provisioners", name="default"), {"spec": {"labels": {"team": "b"}}})
    eventually(lambda: ((suite.env.state.provisioners.get("", "default") or {}).get("spec") or {}).get("labels") == {"team": "b"})
    suite.mark(marker)
    assert (suite.condition("n") or {}).get("reason") == ("ProvisionerDrifted" if gate else None)


def test_a_launch_from_a_nodepool_carries_its_hash_so_it_is_not_drifted(suite: Suite) -> None:
    manifest = copy.deepcopy(nodepool())
    with_pool(suite, manifest)
    suite.env.provision(unschedulable_pod("pending", cpu="1"))
    claim = eventually(lambda: suite.env.client.get(path_of(*CLAIMS))["items"])[0]
    assert {k: claim["metadata"]["annotations"].get(k) for k in pool_hash(manifest)} == pool_hash(manifest)
    suite.mark()
    assert suite.condition(claim["metadata"]["name"]) is None


def claim_lists(suite: Suite) -> int:
    """How many times the local cluster's API server has listed every NodeClaim, for any client."""
    text = urllib.request.urlopen(f"{suite.env.kube.cluster.url}/metrics", timeout=10).read().decode()
    return sum(int(m[1]) for m in re.finditer(r'^apiserver_request_total\{[^}]*verb="LIST",resource="nodeclaims"\} (\d+)$',
                                              text, re.M))


def test_passes_that_only_read_claims_read_them_from_the_watch(suite: Suite) -> None:
    """Drift marking, the consolidation's drift check and expiry read NodeClaims from the informer, as Karpenter
    reads them from its cache: a pass lists none from the API server (launches still do, see ClusterState)."""
    with_pool(suite)
    suite.claim_and_node("n", drifted="NodePoolDrifted")
    suite.env.sync()
    before = claim_lists(suite)
    assert consolidation.marked_drifted(suite.env.state) == {"n": "NodePoolDrifted"}   # the claim as written
    DriftMarker(suite.env.state, suite.env.clock).reconcile()           # not suite.mark(): its sync lists them
    Expiration(suite.env.state, suite.env.clock).reconcile()          # a NodePool's node: its claim's expireAfter
    assert claim_lists(suite) == before


# --- the Consolidatable condition (pkg/controllers/nodeclaim/disruption/consolidation_test.go) ---------------------

def underutilized(suite: Suite, consolidate_after: str = "1m") -> None:
    with_pool(suite, nodepool(consolidationPolicy="WhenEmptyOrUnderutilized", consolidateAfter=consolidate_after))


def consolidatable(suite: Suite, claim: str) -> bool:
    return (suite.condition(claim, CONDITION_CONSOLIDATABLE) or {}).get("status") == "True"


def expect_consolidatable_a_minute_on(suite: Suite, claim: str) -> None:
    """Not Consolidatable yet; Consolidatable once consolidateAfter (1m) has passed."""
    marker = DriftMarker(suite.env.state, suite.env.clock)
    suite.mark(marker)
    assert not consolidatable(suite, claim)
    suite.env.clock.step(60)
    suite.mark(marker)
    assert consolidatable(suite, claim)


def test_should_mark_nodeclaims_as_consolidatable(suite: Suite) -> None:
    underutilized(suite)
    suite.claim_and_node("n")
    now = suite.env.clock.now()
    suite.claim_status("n", initialized_at=now - dt.timedelta(minutes=10), last_pod_event=now)
    expect_consolidatable_a_minute_on(suite, "n")


def test_should_mark_nodeclaims_as_consolidatable_based_on_the_nodeclaim_initialized_time(suite: Suite) -> None:
    underutilized(suite)
    suite.claim_and_node("n")
    suite.claim_status("n", initialized_at=suite.env.clock.now())    # no pod event yet
    expect_consolidatable_a_minute_on(suite, "n")


def test_should_remove_the_status_condition_when_last_pod_event_is_too_recent(suite: Suite) -> None:
    underutilized(suite)
    suite.claim_and_node("n")
    now = suite.env.clock.now()
    suite.claim_status("n", initialized_at=now - dt.timedelta(minutes=10), last_pod_event=now, consolidatable=True)
    suite.mark()
    assert suite.condition("n", CONDITION_CONSOLIDATABLE) is None


def test_should_remove_the_status_condition_when_consolidate_after_is_never(suite: Suite) -> None:
    with_pool(suite)                                                # consolidateAfter: Never
    suite.claim_and_node("n")
    suite.claim_status("n", initialized_at=suite.env.clock.now() - dt.timedelta(hours=1), consolidatable=True)
    assert suite.mark() == DRIFT_RESYNC_SECONDS   # nothing to wait for
    assert suite.condition("n", CONDITION_CONSOLIDATABLE) is None


@pytest.mark.parametrize("initialized", ["Unknown", "False"])
def test_should_remove_the_status_condition_when_the_nodeclaim_is_not_initialized(suite: Suite, initialized: str) -> None:
    underutilized(suite)
    suite.claim_and_node("n")
    suite.claim_status("n", initialized=initialized, initialized_at=suite.env.clock.now() - dt.timedelta(hours=1),
                       consolidatable=True)
    suite.mark()
    assert suite.condition("n", CONDITION_CONSOLIDATABLE) is None


def test_a_pod_scheduled_to_the_node_restarts_the_wait(suite: Suite) -> None:
    """karpy reads pod events off the node's pods as well as lastPodEventTime: a pod arriving clears the condition,
    and the pass comes again when it would turn Consolidatable (sooner than its resync)."""
    underutilized(suite, "20s")
    suite.claim_and_node("n")
    suite.claim_status("n", initialized_at=suite.env.clock.now() - dt.timedelta(hours=1))
    marker = DriftMarker(suite.env.state, suite.env.clock)
    suite.mark(marker)
    assert consolidatable(suite, "n")
    suite.running("n", "arrived")
    suite.env.sync()
    assert suite.mark(marker) == pytest.approx(20, abs=3)
    assert suite.condition("n", CONDITION_CONSOLIDATABLE) is None
    suite.env.clock.step(21)
    suite.mark(marker)
    assert consolidatable(suite, "n")


def test_a_provisioners_nodeclaim_gets_no_consolidatable_condition(suite: Suite) -> None:
    suite.env.apply(provisioner("default", consolidation={"enabled": True}))
    eventually(lambda: suite.env.state.provisioners.get("", "default"))
    suite.claim_and_node("n", owner="default", label=wk.PROVISIONER_NAME)
    suite.mark()
    assert suite.condition("n", CONDITION_CONSOLIDATABLE) is None


# --- karpy explain node -------------------------------------------------------------------------------------------

def test_karpy_explain_node_names_the_drift_and_what_holds_a_drifted_node(suite: Suite, tmp_path: Path) -> None:
    catalog_file = tmp_path / "catalog.yaml"
    catalog_file.write_text(yaml.safe_dump(CATALOG_DOC))
    opened = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)      # a window closed to drift for an hour
    closed = {"nodes": "0", "reasons": ["Drifted"], "schedule": f"{opened.minute} {opened.hour} * * *", "duration": "1h"}
    with_pool(suite, nodepool(budgets=[closed, {"nodes": "100%"}]))
    suite.claim_and_node("drifted", drifted="NodePoolDrifted")

    def explain(name: str) -> dict[str, Any]:
        run = subprocess.run([sys.executable, "-m", "karpy.main", "explain", "node", name, "--kubeconfig",
                              str(suite.env.kube.kubeconfig), "--catalog", str(catalog_file),
                              "--consolidation-min-node-age", "0", "-o", "json"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return dict(json.loads(run.stdout))

    held = explain("drifted")
    assert held["verdict"] == "keep", held
    assert held["reason"].startswith('drifted (NodePoolDrifted), but NodePool "general" allows 0 Drifted disruption(s)')
    assert held["reason"].endswith(f" until {rfc3339(opened.replace(second=0, microsecond=0) + dt.timedelta(hours=1))}")
    suite.env.client.patch(path_of("karpenter.sh/v1", "nodepools", name="general"),
                           {"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}})
    moved = explain("drifted")                   # a fresh command reads the NodePool as the API server has it now
    assert (moved["verdict"], moved["drifted"]) == ("delete", "NodePoolDrifted"), moved


# --- end to end ---------------------------------------------------------------------------------------------------

def test_karpy_controller_replaces_a_node_whose_nodepool_template_changed(tmp_path: Path) -> None:
    """The loops wired together: the NodePool's template changes, its node is marked Drifted, a replacement from the
    new template comes up, and only then is the old node drained and deleted."""
    with controller_for_nodepool(tmp_path, catalog_doc=CATALOG_DOC, nodepool=nodepool(),
                                 pod=unschedulable_pod("web", cpu="1", owner=OWNER),      # so it drains
                                 args=["--metrics-port", "0", "--consolidation-stabilization", "1",
                                       "--feature-gates", "Drift=true"]) as kube:

        def initialized(team: str) -> list[str]:
            return [n.metadata.name for n in kube.core.list_node().items
                    if (n.metadata.labels or {}).get(wk.INITIALIZED) == "true" and n.metadata.labels.get("team") == team
                    and not n.metadata.deletion_timestamp]
        (old,) = eventually(lambda: initialized("a"), timeout=30)
        kube.kubectl("patch", "nodepool", "general", "--type", "merge",
                     "-p", json.dumps({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}}))
        (new,) = eventually(lambda: initialized("b"), timeout=45)
        eventually(lambda: old not in {n.metadata.name for n in kube.core.list_node().items}, timeout=30)
        text = (tmp_path / "controller.log").read_text()
        assert f"Marked node claim {old} drifted (NodePoolDrifted)" in text
        assert text.index(f"Replacement(s) {new} ready; deleting node(s) {old}") > text.index("Marked node claim")
