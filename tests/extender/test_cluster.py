"""The extender on the local cluster: its scheduler reads manifests/extender/scheduler-config.yaml and calls
`karpy extender --kubeconfig` over HTTP; gaps are reported, listed, announced by Event, and closed by binding."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from karpy.apis import launch_record as rec
from karpy.apis.launch_record import PodReference
from tests.builders import node, pod, provisioner
from tests.conftest import free_port
from tests.expectations import eventually
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parents[2]


class Extender:
    def __init__(self, url: str, process: subprocess.Popen[bytes]) -> None:
        self.url, self.process = url, process

    def gaps(self) -> dict[str, dict[str, Any]]:
        return {g["pod"]: g for g in requests.get(self.url + "/capacity-gaps", timeout=5).json()}


def healthy(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Kube, Extender]]:
    port = free_port()
    local, kube = start(tmp_path, system_nodes=0, boot_delay=0.2,
                        scheduler_config=str(ROOT / "manifests" / "extender" / "scheduler-config.yaml"),
                        extender_url=f"http://127.0.0.1:{port}/scheduler")
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    kube.custom.create_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners",
                                             provisioner("default", ttlSecondsAfterEmpty=30))
    with open(tmp_path / "extender.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "karpy.main", "extender", "--host", "127.0.0.1", "--port", str(port),
                                    "--kubeconfig", str(kube.kubeconfig)], stdout=log, stderr=subprocess.STDOUT)
    extender = Extender(f"http://127.0.0.1:{port}", process)
    try:
        eventually(lambda: healthy(extender.url), timeout=20)
        yield kube, extender
    finally:
        process.terminate()
        process.wait(timeout=10)
        local.stop()


def pod_events(kube: Kube, name: str) -> list[Any]:
    return [e for e in kube.core.list_namespaced_event("default").items if e.involved_object.name == name]


def test_a_pod_only_nodes_being_removed_could_take_is_a_gap_until_it_is_bound(cluster: tuple[Kube, Extender]) -> None:
    kube, extender = cluster
    doomed = node("doomed", provisioner="default", initialized=True)
    doomed["metadata"]["annotations"] = {"karpenter.sh/emptiness-timestamp": "2020-01-01T00:00:00Z"}
    kube.core.create_node(doomed)
    kube.core.create_namespaced_pod("default", pod("web", cpu="100m", owner=None))

    gap = eventually(lambda: extender.gaps().get("default/web"), timeout=15)
    # the extender's own summary ("... karpy removes ...") or kube-scheduler's, which quotes its per-node
    # reason ("1 node(s) are being removed by karpy."): whichever reached the pod first
    assert "karpy remove" in gap["reason"] or "removed by karpy" in gap["reason"], gap["reason"]
    event = eventually(lambda: next((e for e in pod_events(kube, "web") if e.reason == "CapacityGap"), None))
    assert event.type == "Warning" and "removed by karpy" in event.message
    described = kube.kubectl("describe", "pod", "web").stdout
    assert "CapacityGap" in described
    assert kube.core.read_namespaced_pod("web", "default").spec.node_name is None      # never on the doomed node

    kube.core.create_node(node("fresh"))
    eventually(lambda: kube.core.read_namespaced_pod("web", "default").spec.node_name == "fresh", timeout=15)
    eventually(lambda: "default/web" not in extender.gaps())


def test_gaps_kube_scheduler_meets_on_its_own_are_learned_from_the_pod(cluster: tuple[Kube, Extender]) -> None:
    kube, extender = cluster
    kube.core.create_node(node("small", allocatable={"cpu": "2", "memory": "4Gi", "pods": "10"}))
    kube.core.create_namespaced_pod("default", pod("huge", cpu="64", owner=None))
    gap = eventually(lambda: extender.gaps().get("default/huge"), timeout=15)
    assert "Insufficient cpu" in gap["reason"]
    kube.core.delete_namespaced_pod("huge", "default", grace_period_seconds=0)
    eventually(lambda: "default/huge" not in extender.gaps())


def test_the_extender_binds_through_pods_binding_and_prefers_the_node_launched_for_the_pod(cluster: tuple[Kube, Extender]) -> None:
    kube, extender = cluster
    for name in ("other-1", "other-2"):
        kube.core.create_node(node(name, allocatable={"cpu": "8", "memory": "16Gi", "pods": "50"}))
    launched = node("launched", provisioner="default", allocatable={"cpu": "8", "memory": "16Gi", "pods": "50"})
    kube.core.create_node(launched)
    # its NodeClaim says which pods it was launched for (the Node itself no longer does)
    kube.custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "launched", "labels": {"karpenter.sh/provisioner-name": "default"},
                     "annotations": {rec.PODS: rec.pods_annotation([PodReference("default", "chosen")], bind=True)}},
        "spec": {"requirements": [], "nodeClassRef": {**rec.NODECLASS_PROVISIONER, "name": "default"}}})
    kube.custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "launched",
                                                   {"status": {"nodeName": "launched", "providerID": "fake://launched"}})
    kube.core.create_namespaced_pod("default", pod("chosen", cpu="1", owner=None))
    eventually(lambda: kube.core.read_namespaced_pod("chosen", "default").spec.node_name == "launched", timeout=15)
    scheduled = eventually(lambda: next((e for e in pod_events(kube, "chosen") if e.reason == "Scheduled"), None))
    assert "launched" in scheduled.message

    r = requests.post(extender.url + "/scheduler/bind", timeout=5,
                      json={"PodName": "missing", "PodNamespace": "default", "PodUID": "u", "Node": "other-1"})
    assert r.status_code == 200 and "404" in r.json()["Error"]


def test_a_nodes_capacity_its_nodeclaim_promised_to_a_pending_pod_is_kept_for_it_in_both_modes(
        cluster: tuple[Kube, Extender]) -> None:
    kube, extender = cluster
    launched = node("launched", provisioner="default", allocatable={"cpu": "8", "memory": "16Gi", "pods": "50"})
    kube.core.create_node(launched)
    # pending for another scheduler: the local one leaves it be, so the promise stands
    kube.core.create_namespaced_pod("default", pod("waiting", cpu="6", owner=None, schedulerName="another-scheduler"))
    kube.custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "launched", "labels": {"karpenter.sh/provisioner-name": "default"},
                     "annotations": {rec.PODS: rec.pods_annotation([PodReference("default", "waiting")], bind=True)}},
        "spec": {"requirements": [], "nodeClassRef": {**rec.NODECLASS_PROVISIONER, "name": "default"}}})

    def failed(body: dict[str, Any]) -> dict[str, str]:
        return requests.post(extender.url + "/scheduler/filter", timeout=5, json=body).json()["FailedNodes"]

    newcomer = pod("newcomer", cpu="4", owner=None)
    full = {"Pod": newcomer, "NodeNames": None, "Nodes": {"apiVersion": "v1", "kind": "NodeList", "items": [launched]}}
    named = {"Pod": newcomer, "Nodes": None, "NodeNames": ["launched"]}
    eventually(lambda: failed(named) == {}, timeout=10)                # watched, and no claim lands on it yet
    assert failed(full) == {}
    kube.custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "launched",
                                                   {"status": {"nodeName": "launched", "providerID": "fake://launched"}})
    promised = {"launched": "node's free capacity is promised to 1 pod(s) karpy launched it for"}
    eventually(lambda: failed(named) == promised, timeout=10)
    assert failed(full) == promised                                    # sent in full: the claim's promise all the same
    kube.custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "launched", {"status": {
        "conditions": [{"type": "PodsBound", "status": "True", "reason": "PodsBound", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    eventually(lambda: failed(named) == {}, timeout=10)                # done binding: nothing promised any more
    assert failed(full) == {}


def test_a_node_whose_nodeclaim_is_being_deleted_is_being_removed_in_both_modes(cluster: tuple[Kube, Extender]) -> None:
    """The NodeClaim goes first (v1 deletes the claim; the Node's deletion follows): the extender counts the node
    as leaving from the claim's deletionTimestamp, whether kube-scheduler sends names or whole Nodes."""
    kube, extender = cluster
    going = node("going", provisioner="default", allocatable={"cpu": "8", "memory": "16Gi", "pods": "50"})
    kube.core.create_node(going)
    kube.custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "going", "labels": {"karpenter.sh/provisioner-name": "default"},
                     "finalizers": ["karpenter.sh/termination"]},            # held, as the terminator holds it
        "spec": {"requirements": [], "nodeClassRef": {**rec.NODECLASS_PROVISIONER, "name": "default"}}})
    kube.custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "going",
                                                   {"status": {"nodeName": "going", "providerID": "fake://going"}})

    def failed(body: dict[str, Any]) -> dict[str, str]:
        return requests.post(extender.url + "/scheduler/filter", timeout=5, json=body).json()["FailedNodes"]

    newcomer = pod("newcomer", cpu="1", owner=None)
    full = {"Pod": newcomer, "NodeNames": None, "Nodes": {"apiVersion": "v1", "kind": "NodeList", "items": [going]}}
    named = {"Pod": newcomer, "Nodes": None, "NodeNames": ["going"]}
    eventually(lambda: failed(named) == {}, timeout=10)
    assert failed(full) == {}
    try:
        kube.custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "going")
        leaving = {"going": "node is being deleted (cordoned and draining)"}
        eventually(lambda: failed(named) == leaving, timeout=10)
        assert failed(full) == leaving
    finally:
        kube.custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "going",
                                                {"metadata": {"finalizers": None}})


def test_filter_with_full_nodes_subtracts_the_pods_bound_there(cluster: tuple[Kube, Extender]) -> None:
    kube, extender = cluster
    busy = node("busy", allocatable={"cpu": "4", "memory": "16Gi", "pods": "20"})
    kube.core.create_node(busy)
    kube.core.create_namespaced_pod("default", pod("tenant", cpu="3", owner=None, node_name="busy"))

    def judged(cpu: str) -> dict[str, Any]:
        return requests.post(extender.url + "/scheduler/filter", timeout=5, json={
            "Pod": pod(f"new-{cpu}", cpu=cpu, owner=None), "NodeNames": None,
            "Nodes": {"apiVersion": "v1", "kind": "NodeList", "items": [busy]}}).json()

    eventually(lambda: judged("2")["FailedNodes"] == {"busy": "Insufficient cpu"}, timeout=10)
    assert [n["metadata"]["name"] for n in judged("1")["Nodes"]["items"]] == ["busy"]
    assert "default/new-2" in extender.gaps()
    named = requests.post(extender.url + "/scheduler/filter", timeout=5, json={
        "Pod": pod("named", cpu="2", owner=None), "Nodes": None, "NodeNames": ["busy"]}).json()
    assert named["FailedNodes"] == {"busy": "Insufficient cpu"}          # the watched Node, in NodeNames mode too

    kube.core.delete_namespaced_pod("tenant", "default", grace_period_seconds=0)     # facts kept between calls follow
    eventually(lambda: judged("2")["FailedNodes"] == {}, timeout=10)


def test_pods_of_an_owner_consolidation_moves_go_to_the_node_waiting_for_them_until_it_holds_its_count(
        cluster: tuple[Kube, Extender]) -> None:
    """kube-scheduler's own score (least allocated) prefers the empty, larger node; the node consolidation
    marked for two of the owner's pods gets those two, and the third goes where kube-scheduler would put it."""
    kube, _ = cluster
    kube.core.create_node(node("roomy", allocatable={"cpu": "16", "memory": "64Gi", "pods": "50"}))
    planned = node("planned", allocatable={"cpu": "6", "memory": "16Gi", "pods": "50"})
    first = pod("web-0", cpu="1", owner=("ReplicaSet", "web"))
    owner = first["metadata"]["ownerReferences"][0]["uid"]
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    planned["metadata"]["annotations"] = {"karpy.dev/moving-in": json.dumps({"until": until, "owners": {owner: 2}})}
    kube.core.create_node(planned)
    kube.core.create_namespaced_pod("default", pod("base", cpu="2", memory="8Gi", owner=("ReplicaSet", "base"),
                                                   node_name="planned"))

    def placed(name: str) -> str | None:
        return kube.core.read_namespaced_pod(name, "default").spec.node_name

    kube.core.create_namespaced_pod("default", pod("other", cpu="1", owner=("ReplicaSet", "other")))
    assert eventually(lambda: placed("other"), timeout=15) == "roomy"     # not its owner's mark: the usual scores
    kube.core.create_namespaced_pod("default", first)
    assert eventually(lambda: placed("web-0"), timeout=15) == "planned"
    kube.core.create_namespaced_pod("default", pod("web-1", cpu="1", owner=("ReplicaSet", "web")))
    assert eventually(lambda: placed("web-1"), timeout=15) == "planned"
    # the node holds the two it waited for (the extender counts them from its watch) and has room for a
    # third: no more steering
    eventually(lambda: len([p for p in kube.core.list_namespaced_pod("default").items
                            if p.spec.node_name == "planned"]) == 3, timeout=15)
    time.sleep(1)
    kube.core.create_namespaced_pod("default", pod("web-2", cpu="1", owner=("ReplicaSet", "web")))
    assert eventually(lambda: placed("web-2"), timeout=15) == "roomy"


def test_pods_scheduled_faster_than_the_watch_reports_bindings_do_not_overfill_a_waiting_node(
        cluster: tuple[Kube, Extender]) -> None:
    """The node waits for one pod of the owner; three come at once. The extender counts each pod it binds at
    once (kube-scheduler binds the next within milliseconds), so one goes there and the others go by the
    usual scores."""
    kube, extender = cluster
    kube.core.create_node(node("roomy", allocatable={"cpu": "32", "memory": "128Gi", "pods": "50"}))
    planned = node("planned", allocatable={"cpu": "8", "memory": "16Gi", "pods": "50"})
    burst = [pod(f"web-{i}", cpu="1", owner=("ReplicaSet", "web")) for i in range(3)]
    owner = burst[0]["metadata"]["ownerReferences"][0]["uid"]
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    planned["metadata"]["annotations"] = {"karpy.dev/moving-in": json.dumps({"until": until, "owners": {owner: 1}})}
    kube.core.create_node(planned)
    kube.core.create_namespaced_pod("default", pod("base", cpu="4", memory="8Gi", owner=("ReplicaSet", "base"),
                                                   node_name="planned"))
    def steered() -> bool:                      # the extender has seen the mark and the pod bound there
        scores = requests.post(extender.url + "/scheduler/prioritize", timeout=5, json={
            "Pod": pod("probe", cpu="1", owner=("ReplicaSet", "web")), "Nodes": None, "NodeNames": ["planned", "roomy"]}).json()
        return {h["Host"]: h["Score"] for h in scores} == {"planned": 10, "roomy": 0}
    eventually(steered, timeout=15)
    for p in burst:
        kube.core.create_namespaced_pod("default", p)

    def placed() -> list[str]:
        return [kube.core.read_namespaced_pod(p["metadata"]["name"], "default").spec.node_name or "" for p in burst]
    eventually(lambda: all(placed()), timeout=15)
    assert sorted(placed()) == ["planned", "roomy", "roomy"]
