"""The launch record is a karpenter.sh/v1 NodeClaim: its labels, pods and conditions through launch, registration
and initialization, what `kubectl get nodeclaims` shows, the in-flight index, and the migration of claims an older
karpy wrote as karpy.dev/v1alpha1."""

from __future__ import annotations

import json
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis import launch_record as rec
from karpy.apis import nodeclaim as legacy
from karpy.apis.launch_record import PodReference
from karpy.apis.v1 import nodeclaim as v1
from karpy.controller.inflight import landing, launched_for, leaving, promised
from karpy.controller.launch.launcher import Launcher
from karpy.controller.launch.migration import converted, migrate
from karpy.controller.node.initialization import Initialization
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env

NOW = "2026-01-01T00:00:00Z"
CLAIMS = path_of(v1.GROUP_VERSION, v1.PLURAL)
LEGACY = path_of(legacy.GROUP_VERSION, legacy.PLURAL)


def conditions(claim: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in claim["status"].get("conditions") or []}


@pytest.mark.slow
def test_a_launch_is_recorded_as_a_v1_nodeclaim_from_launch_to_initialization(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m"))
    launcher = Launcher(env.state, env.cloud, lambda: CATALOG)
    Provisioner(env.state, env.cloud, CATALOG, launcher=launcher).reconcile()
    (claim,) = env.client.get(CLAIMS)["items"]
    pod = env.client.get(path_of("v1", "pods", "default", "web-0"))
    labels = claim["metadata"]["labels"]
    assert labels[wk.PROVISIONER_NAME] == "default" and labels[wk.INSTANCE_TYPE] and labels[wk.ZONE]
    assert rec.pods_of(claim) == [PodReference("default", "web-0", pod["metadata"]["uid"])] and rec.binds(claim)
    assert claim["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    assert claim["spec"]["nodeClassRef"] == {"group": "karpenter.sh", "kind": "Provisioner", "name": "default"}
    assert claim["status"]["providerID"] == f"fake://{claim['metadata']['name']}" and claim["status"]["capacity"]["cpu"]
    assert conditions(claim) == {"Launched": "True", "Registered": "True", "PodsBound": "True"}
    assert pod["spec"]["nodeName"] == claim["status"]["nodeName"]

    initialization = Initialization(env.state, env.clock)        # the kubelet makes the Node Ready, then this marks it

    def initialized() -> dict[str, Any] | None:
        initialization.reconcile()
        launcher.reconcile()
        now = env.client.get(path_of(v1.GROUP_VERSION, v1.PLURAL, name=claim["metadata"]["name"]))
        return now if conditions(now).get("Initialized") == "True" else None
    assert conditions(env.settle(initialized, timeout=20))["Ready"] == "True"

    table = env.kube.kubectl("get", "nodeclaims", "-o", "wide").stdout.split("\n")
    assert table[0].split() == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE", "IMAGEID", "ID", "NODEPOOL",
                                "NODECLASS", "DRIFTED"]
    row = table[1].split()
    assert row[0] == claim["metadata"]["name"] and row[1] == labels[wk.INSTANCE_TYPE] and row[5] == "True"


def legacy_claim(name: str, *, uid: str, launched: bool) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": legacy.GROUP_VERSION, "kind": legacy.KIND,
        "metadata": {"name": name, "finalizers": [wk.TERMINATION_FINALIZER], "labels": {wk.PROVISIONER_NAME: "default"}},
        "spec": {"provisioner": "default", "instanceTypes": ["small", "large"], "labels": {"team": "a"},
                 "annotations": {wk.LAUNCHED_FOR: "default/web-0"},
                 "requirements": [{"key": wk.PROVISIONER_NAME, "operator": "In", "values": ["default"]},
                                  {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                 "pods": [{"namespace": "default", "name": "web-0", "uid": uid}], "bind": True}}
    if launched:
        claim["status"] = {"providerID": f"fake://{name}", "nodeName": name, "instanceType": "small", "zone": "zone-a",
                           "capacityType": "on-demand", "nodeCreated": True, "podsBound": True}
    return claim


def test_a_legacy_claim_converts_to_a_v1_claim_with_its_progress_as_conditions() -> None:
    body, status = converted(legacy_claim("default-abcde", uid="u1", launched=True), None, now=NOW)
    assert body["apiVersion"] == "karpenter.sh/v1" and body["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    assert body["metadata"]["labels"] == {"team": "a", wk.PROVISIONER_NAME: "default", wk.INSTANCE_TYPE: "small",
                                          wk.ZONE: "zone-a", wk.CAPACITY_TYPE: "on-demand"}
    assert json.loads(body["metadata"]["annotations"][rec.PODS]) == {
        "bind": True, "pods": [{"namespace": "default", "name": "web-0", "uid": "u1"}]}
    assert wk.LAUNCHED_FOR not in body["metadata"]["annotations"]
    assert body["spec"]["requirements"] == [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                            {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["small", "large"]}]
    assert status is not None and status["providerID"] == "fake://default-abcde"
    assert conditions({"status": status}) == {"Launched": "True", "Registered": "True", "PodsBound": "True"}
    assert converted(legacy_claim("default-fghij", uid="u2", launched=False), None, now=NOW)[1] is None


@pytest.mark.slow
def test_claims_an_older_karpy_wrote_are_migrated_and_finished(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m"))
    uid = env.client.get(path_of("v1", "pods", "default", "web-0"))["metadata"]["uid"]
    env.client.create(LEGACY, legacy_claim("default-old01", uid=uid, launched=False))   # written before the cloud call
    env.client.create(LEGACY, {**legacy_claim("default-old02", uid="gone", launched=False),
                               "metadata": {"name": "default-old02", "finalizers": [wk.TERMINATION_FINALIZER]}})
    env.client.create(CLAIMS, converted(legacy_claim("default-old02", uid="gone", launched=False), None, now=NOW)[0])
    # (a migration stopped after writing default-old02's new record, before deleting the old one)

    assert migrate(env.state, now=NOW) == 2
    assert env.client.get(LEGACY)["items"] == []                        # the old ones go once the new exist
    assert sorted(c["metadata"]["name"] for c in env.client.get(CLAIMS)["items"]) == ["default-old01", "default-old02"]
    assert promised(env.client.get(CLAIMS)["items"]) == {uid, "gone"}   # still promised: no batch plans them again
    assert migrate(env.state, now=NOW) == 0

    Launcher(env.state, env.cloud, lambda: CATALOG).reconcile()           # the new controller finishes the launch
    claim = env.client.get(path_of(v1.GROUP_VERSION, v1.PLURAL, name="default-old01"))
    assert conditions(claim) == {"Launched": "True", "Registered": "True", "PodsBound": "True"}
    assert env.client.get(path_of("v1", "pods", "default", "web-0"))["spec"]["nodeName"] == "default-old01"
    assert sorted(r.node_name for r in env.cloud.create_calls) == ["default-old01", "default-old02"]   # once each


def test_the_index_promises_the_pods_of_live_claims_until_they_are_bound() -> None:
    def claim(name: str, *, bind: bool = True, deleting: bool = False, **conds: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "annotations": {
            rec.PODS: rec.pods_annotation([PodReference("default", name, f"uid-{name}")], bind=bind)}}
        if deleting:
            meta["deletionTimestamp"] = NOW
        return {"metadata": meta, "status": {"conditions": rec.with_conditions({}, NOW, **conds)}}

    claims = [claim("launching"), claim("registered", Registered=True), claim("bound", Registered=True, PodsBound=True),
              claim("replacement", bind=False), claim("deleting", deleting=True)]
    assert promised(claims) == {"uid-launching", "uid-registered"}


def test_the_index_says_which_node_a_claim_lands_and_which_pods_wait_for_it_there() -> None:
    def claim(name: str, *, node_name: str | None = "n", bind: bool = True, **conds: bool) -> dict[str, Any]:
        return {"metadata": {"name": name, "annotations": {rec.PODS: rec.pods_annotation(
                    [PodReference("default", "a", "u1"), PodReference("default", "b", "u2")], bind=bind)}},
                "status": {**({"nodeName": node_name} if node_name else {}),
                           "conditions": rec.with_conditions({}, NOW, **conds)}}

    assert landing(claim("launched")) == ("n", ("default/a", "default/b"))
    assert landing(claim("registered", Registered=True)) == ("n", ("default/a", "default/b"))
    assert landing(claim("bound", PodsBound=True)) is None                    # its pods are on it: nothing waits
    assert landing(claim("replacement", bind=False)) is None                  # kube-scheduler places those
    assert landing(claim("not-launched", node_name=None)) is None
    broken = claim("broken")
    broken["metadata"]["annotations"][rec.PODS] = "{not json"
    assert landing(broken) is None
    # a Node an older karpy launched names its pods itself
    assert launched_for({"metadata": {"annotations": {wk.LAUNCHED_FOR: "default/a, default/b"}}}) == ("default/a", "default/b")
    assert launched_for({"metadata": {}}) == ()


def test_the_index_says_which_nodes_are_leaving_by_their_node_or_their_claim() -> None:
    def obj(name: str, *, deleting: bool = False, node_name: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, **({"deletionTimestamp": NOW} if deleting else {})}
        return {"metadata": meta, "status": {"nodeName": node_name} if node_name else {}}

    nodes = [obj("kept"), obj("deleted", deleting=True), obj("claim-deleted"), obj("claim-live")]
    claims = [obj("c1", deleting=True, node_name="claim-deleted"), obj("c2", node_name="claim-live"),
              obj("c3", deleting=True, node_name="not-a-listed-node"), obj("c4", deleting=True)]
    assert leaving(nodes) == {"deleted"}
    assert leaving(nodes, claims) == {"deleted", "claim-deleted"}      # only nodes asked about, never a claim's name
    assert leaving([], claims) == set()
