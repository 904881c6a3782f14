"""The local cluster's API server, driven by the official client and by kubectl over HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from karpy.simulator import disruption
from tests.builders import pod
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parents[2]


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def status_code(call: Any) -> int:
    with pytest.raises(ApiException) as info:
        call()
    return int(info.value.status)


def test_discovery_and_version(kube: Kube) -> None:
    version = kube.kubectl("version", "-o", "json").stdout
    server = json.loads(version)["serverVersion"]
    assert 27 <= int(server["minor"]) <= 33
    resources = kube.kubectl("api-resources").stdout
    for line in ("pods", "deployments", "poddisruptionbudgets", "customresourcedefinitions", "leases"):
        assert line in resources


def test_system_nodes_are_ready(kube: Kube) -> None:
    nodes = kube.core.list_node().items
    assert [n.metadata.name for n in nodes] == ["system-0", "system-1"]
    node = nodes[0]
    assert node.status.allocatable == {"cpu": "2", "memory": "8Gi", "pods": "29", "ephemeral-storage": "20Gi"}
    assert node.metadata.labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "m5.large"
    assert not node.spec.taints
    assert "Ready" in kube.kubectl("get", "nodes").stdout


def test_crud_with_uid_generate_name_and_resource_versions(kube: Kube) -> None:
    body = pod(None, labels={"app": "crud"})
    body["metadata"] = {"generateName": "crud-", "labels": {"app": "crud"}}
    created = kube.core.create_namespaced_pod("default", body)
    assert created.metadata.name.startswith("crud-") and created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    got = kube.core.read_namespaced_pod(created.metadata.name, "default")
    assert got.metadata.resource_version == created.metadata.resource_version
    assert status_code(lambda: kube.core.create_namespaced_pod("default", {**body, "metadata": {"name": created.metadata.name}})) == 409
    assert status_code(lambda: kube.core.read_namespaced_pod("nope", "default")) == 404
    assert status_code(lambda: kube.core.create_namespaced_pod("no-such-ns", pod("x", namespace="no-such-ns"))) == 404
    kube.core.delete_namespaced_pod(created.metadata.name, "default")
    assert status_code(lambda: kube.core.read_namespaced_pod(created.metadata.name, "default")) == 404


def test_update_with_a_stale_resource_version_is_a_conflict(kube: Kube) -> None:
    cm = kube.core.create_namespaced_config_map("default", {"metadata": {"name": name("cm")}, "data": {"a": "1"}})
    fresh = kube.core.read_namespaced_config_map(cm.metadata.name, "default")
    fresh.data = {"a": "2"}
    kube.core.replace_namespaced_config_map(cm.metadata.name, "default", fresh)
    cm.data = {"a": "3"}
    assert status_code(lambda: kube.core.replace_namespaced_config_map(cm.metadata.name, "default", cm)) == 409
    assert kube.core.read_namespaced_config_map(cm.metadata.name, "default").data == {"a": "2"}


def test_list_with_label_and_field_selectors_and_pages(kube: Kube) -> None:
    app = name("sel")
    for i in range(5):
        kube.core.create_namespaced_pod("default", pod(f"{app}-{i}", labels={"app": app, "idx": str(i)}, node_name="system-0" if i < 2 else None))
    assert len(kube.core.list_namespaced_pod("default", label_selector=f"app={app}").items) == 5
    assert len(kube.core.list_namespaced_pod("default", label_selector=f"app={app},idx in (1,2)").items) == 2
    assert len(kube.core.list_namespaced_pod("default", label_selector=f"app={app},idx!=1").items) == 4
    on_node = kube.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=system-0", label_selector=f"app={app}")
    assert sorted(p.metadata.name for p in on_node.items) == [f"{app}-0", f"{app}-1"]
    assert len(kube.core.list_namespaced_pod("default", field_selector=f"metadata.name={app}-3").items) == 1
    first = kube.core.list_namespaced_pod("default", label_selector=f"app={app}", limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    rest = kube.core.list_namespaced_pod("default", label_selector=f"app={app}", limit=10, _continue=first.metadata._continue)
    assert [p.metadata.name for p in first.items + rest.items] == [f"{app}-{i}" for i in range(5)]
    kube.kubectl("delete", "pods", "-l", f"app={app}", "--wait=false")


def test_merge_strategic_and_json_patches(kube: Kube) -> None:
    n = name("patch")
    body = pod(n)
    body["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    kube.core.create_namespaced_pod("default", body)
    kube.core.patch_namespaced_pod(n, "default", {"metadata": {"labels": {"a": "1"}}}, _content_type="application/merge-patch+json")
    kube.core.patch_namespaced_pod(n, "default", {"spec": {"containers": [{"name": "sidecar", "image": "busybox:2"}]}},
                                   _content_type="application/strategic-merge-patch+json")
    kube.core.patch_namespaced_pod(n, "default", [{"op": "add", "path": "/metadata/labels/b", "value": "2"}],
                                   _content_type="application/json-patch+json")
    got = kube.core.read_namespaced_pod(n, "default")
    assert got.metadata.labels == {"a": "1", "b": "2"}
    assert [(c.name, c.image) for c in got.spec.containers] == [("app", "registry.k8s.io/pause:3.9"), ("sidecar", "busybox:2")]
    bad = [{"op": "replace", "path": "/metadata/nope/x", "value": 1}]
    assert status_code(lambda: kube.core.patch_namespaced_pod(n, "default", bad, _content_type="application/json-patch+json")) == 422
    kube.core.delete_namespaced_pod(n, "default")


def test_watch_delivers_events_from_a_resource_version(kube: Kube) -> None:
    listed = kube.core.list_namespaced_config_map("default")
    n = name("watched")
    events: list[tuple[str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(kube.core.list_namespaced_config_map, "default", resource_version=listed.metadata.resource_version,
                              timeout_seconds=10):
            if event["object"].metadata.name == n:
                events.append((event["type"], event["object"].data.get("k", "") if event["object"].data else ""))
                if event["type"] == "DELETED":
                    w.stop()

    t = threading.Thread(target=consume)
    t.start()
    kube.core.create_namespaced_config_map("default", {"metadata": {"name": n}, "data": {"k": "1"}})
    kube.core.patch_namespaced_config_map(n, "default", {"data": {"k": "2"}})
    kube.core.delete_namespaced_config_map(n, "default")
    t.join(timeout=15)
    assert events == [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "2")]


def test_watch_from_a_trimmed_resource_version_is_gone(kube: Kube) -> None:
    start = kube.core.list_namespaced_config_map("default").metadata.resource_version
    n = name("churn")
    kube.core.create_namespaced_config_map("default", {"metadata": {"name": n}, "data": {"i": "0"}})
    for i in range(450):                    # the module's cluster keeps 200-400 events per resource
        kube.core.patch_namespaced_config_map(n, "default", {"data": {"i": str(i)}})
    with pytest.raises(ApiException) as info:
        for _ in watch.Watch().stream(kube.core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=5):
            pass
    assert info.value.status == 410


def test_finalizers_hold_deletion_until_removed(kube: Kube) -> None:
    n = name("fin")
    kube.core.create_namespaced_config_map("default", {"metadata": {"name": n, "finalizers": ["example.com/hold"]}})
    kube.core.delete_namespaced_config_map(n, "default")
    held = kube.core.read_namespaced_config_map(n, "default")
    assert held.metadata.deletion_timestamp is not None
    kube.core.patch_namespaced_config_map(n, "default", [{"op": "remove", "path": "/metadata/finalizers"}],
                                          _content_type="application/json-patch+json")
    assert status_code(lambda: kube.core.read_namespaced_config_map(n, "default")) == 404


def test_binding_sets_the_node_once(kube: Kube) -> None:
    n = name("bind")
    kube.core.create_namespaced_pod("default", pod(n))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": n}, "target": {"kind": "Node", "name": "system-1"}}
    kube.core.create_namespaced_binding("default", binding, _preload_content=False)
    got = kube.core.read_namespaced_pod(n, "default")
    assert got.spec.node_name == "system-1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in got.status.conditions)
    assert status_code(lambda: kube.core.create_namespaced_binding("default", binding, _preload_content=False)) == 409
    kube.core.delete_namespaced_pod(n, "default", grace_period_seconds=0)


def running(kube: Kube, pod_name: str) -> None:
    kube.core.patch_namespaced_pod_status(pod_name, "default", {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}})


def test_eviction_honours_pod_disruption_budgets(kube: Kube) -> None:
    app = name("pdb")
    for i in range(3):
        kube.core.create_namespaced_pod("default", pod(f"{app}-{i}", labels={"app": app}, node_name="system-0"))
        running(kube, f"{app}-{i}")
    kube.policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": app}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}}})
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": f"{app}-0"}, "deleteOptions": {"gracePeriodSeconds": 0}}
    kube.core.create_namespaced_pod_eviction(f"{app}-0", "default", eviction)
    assert status_code(lambda: kube.core.read_namespaced_pod(f"{app}-0", "default")) == 404
    with pytest.raises(ApiException) as info:
        kube.core.create_namespaced_pod_eviction(f"{app}-1", "default", {**eviction, "metadata": {"name": f"{app}-1"}})
    assert info.value.status == 429
    assert "disruption budget" in json.loads(info.value.body)["message"]
    assert kube.core.read_namespaced_pod(f"{app}-1", "default").metadata.deletion_timestamp is None


# The eviction API's documented handling of pods that are not healthy: a pod that is not Running (Pending,
# Succeeded, Failed) costs the budget nothing; a Running pod that is not Ready may go only while the budget holds
# (currentHealthy >= desiredHealthy, unhealthyPodEvictionPolicy IfHealthyBudget, the default).
@pytest.mark.parametrize("healthy_others, phase, allowed", [
    pytest.param(2, "Pending", True, id="pending-pod-goes-though-no-disruption-is-allowed"),
    pytest.param(0, "Pending", True, id="pending-pod-goes-while-the-budget-is-broken"),
    pytest.param(2, "Running", True, id="not-ready-pod-goes-while-the-budget-holds"),
    pytest.param(1, "Running", False, id="not-ready-pod-stays-while-the-budget-is-broken"),
])
def test_eviction_of_pods_that_are_not_healthy(kube: Kube, healthy_others: int, phase: str, allowed: bool) -> None:
    app = name("sick")
    for i in range(healthy_others):
        kube.core.create_namespaced_pod("default", pod(f"{app}-{i}", labels={"app": app}, node_name="system-0"))
        running(kube, f"{app}-{i}")
    sick = f"{app}-sick"
    kube.core.create_namespaced_pod("default", pod(sick, labels={"app": app}, node_name="system-0"))
    kube.core.patch_namespaced_pod_status(sick, "default", {"status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "False"}]}})
    kube.policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": app}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}}})
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": sick}, "deleteOptions": {"gracePeriodSeconds": 0}}
    try:
        kube.core.create_namespaced_pod_eviction(sick, "default", eviction)
        code = 201
    except ApiException as e:
        code = int(e.status)
    assert code == (201 if allowed else 429), code
    gone = not kube.core.list_namespaced_pod("default", field_selector=f"metadata.name={sick}").items
    assert gone is allowed


def test_percentage_max_unavailable_counts_the_pods_the_controller_wants(kube: Kube) -> None:
    app = name("pct")
    rs = kube.apps.create_namespaced_replica_set("default", {
        "metadata": {"name": app}, "spec": {"replicas": 4, "selector": {"matchLabels": {"app": app}},
                                            "template": {"metadata": {"labels": {"app": app}},
                                                         "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    for i in range(4):
        body = pod(f"{app}-{i}", labels={"app": app}, node_name="system-1", owner=None)
        body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                                                "uid": rs.metadata.uid, "controller": True}]
        kube.core.create_namespaced_pod("default", body)
        running(kube, f"{app}-{i}")
    kube.policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": app}, "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": app}}}})
    evict = {"apiVersion": "policy/v1", "kind": "Eviction", "deleteOptions": {"gracePeriodSeconds": 0}}
    kube.core.create_namespaced_pod_eviction(f"{app}-0", "default", {**evict, "metadata": {"name": f"{app}-0"}})
    assert status_code(lambda: kube.core.create_namespaced_pod_eviction(f"{app}-1", "default", {**evict, "metadata": {"name": f"{app}-1"}})) == 429


def test_custom_resources_are_served_with_their_schema(kube: Kube) -> None:
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    kube.kubectl("wait", "--for", "condition=established", "crd/provisioners.karpenter.sh", "--timeout=10s")
    n = name("prov")
    created = kube.custom.create_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", {
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": n},
        "spec": {"ttlSecondsAfterEmpty": 30, "unknownThing": 1}})
    assert created["spec"] == {"ttlSecondsAfterEmpty": 30}               # pruned, as the API server prunes
    with pytest.raises(ApiException) as info:
        kube.custom.create_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", {
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": name("bad")},
            "spec": {"ttlSecondsAfterEmpty": "soon"}})
    assert info.value.status == 422 and "spec.ttlSecondsAfterEmpty" in info.value.body
    kube.custom.patch_cluster_custom_object_status("karpenter.sh", "v1alpha5", "provisioners", n,
                                                   {"status": {"resources": {"cpu": "4"}}})
    got = kube.custom.get_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", n)
    assert got["status"] == {"resources": {"cpu": "4"}}
    assert n in kube.kubectl("get", "provisioners").stdout


def test_strict_field_validation_through_kubectl_apply(kube: Kube, tmp_path: Path) -> None:
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    manifest = tmp_path / "p.yaml"
    manifest.write_text("apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: strict}\nspec: {weight: 10, bogus: 1}\n")
    result = kube.kubectl("apply", "-f", str(manifest), check=False)
    assert result.returncode != 0 and 'unknown field "spec.bogus"' in result.stderr


def test_owner_references_are_garbage_collected(kube: Kube) -> None:
    owner = kube.core.create_namespaced_config_map("default", {"metadata": {"name": name("owner")}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid}
    dependent = name("dep")
    kube.core.create_namespaced_pod("default", {**pod(dependent, owner=None), "metadata": {"name": dependent, "ownerReferences": [ref]}})
    kube.apps.create_namespaced_deployment("default", {
        "metadata": {"name": name("d")},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    deploy = kube.apps.list_namespaced_deployment("default").items[-1]
    rs = name("rs")
    kube.apps.create_namespaced_replica_set("default", {
        "metadata": {"name": rs, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": deploy.metadata.name,
                                                      "uid": deploy.metadata.uid, "controller": True}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    kube.apps.delete_namespaced_deployment(deploy.metadata.name, "default")
    assert status_code(lambda: kube.apps.read_namespaced_replica_set(rs, "default")) == 404


def test_a_nodes_mirror_pods_stay_while_its_finalizer_holds_it_and_go_with_it(kube: Kube) -> None:
    """Background propagation: the garbage collector deletes dependents once the owner is really gone."""
    node_name = name("held")
    node = kube.core.create_node({"metadata": {"name": node_name, "finalizers": ["karpenter.sh/termination"]}})
    mirror = name("static")
    kube.core.create_namespaced_pod("default", {**pod(mirror, owner=None, node_name=node_name), "metadata": {
        "name": mirror, "annotations": {"kubernetes.io/config.mirror": "x"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node.metadata.uid}]}})
    kube.kubectl("delete", "node", node_name, "--wait=false")
    assert kube.core.read_node(node_name).metadata.deletion_timestamp is not None
    assert kube.core.read_namespaced_pod(mirror, "default").metadata.deletion_timestamp is None
    kube.core.patch_node(node_name, {"metadata": {"finalizers": None}})
    assert status_code(lambda: kube.core.read_node(node_name)) == 404
    assert status_code(lambda: kube.core.read_namespaced_pod(mirror, "default")) == 404


def test_orphaned_dependents_stay_without_their_owner_reference(kube: Kube) -> None:
    rs = kube.apps.create_namespaced_replica_set("default", {
        "metadata": {"name": name("rs")},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs.metadata.name, "uid": rs.metadata.uid, "controller": True}
    dependent = name("dep")
    kube.core.create_namespaced_pod("default", {**pod(dependent, owner=None), "metadata": {"name": dependent, "ownerReferences": [ref]}})
    kube.kubectl("delete", "replicaset", rs.metadata.name, "--cascade=orphan")
    assert not kube.core.read_namespaced_pod(dependent, "default").metadata.owner_references


def test_malformed_requests_get_status_errors_not_500(kube: Kube) -> None:
    base = kube.cluster.url
    for method, path, body, expected in [
        ("POST", "/api/v1/namespaces/default/pods", b"{not json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"[1,2]", 400),
        ("GET", "/api/v1/nothings", None, 404),
        ("GET", "/apis/example.com/v1/widgets", None, 404),
        ("PATCH", "/api/v1/nodes/system-0", b"{}", 415),
        ("PUT", "/api/v1/namespaces/default/pods", b"{}", 405),
    ]:
        request = urllib.request.Request(base + path, data=body, method=method, headers={"Content-Type": "text/plain"}
                                         if method == "PATCH" else {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        assert info.value.code == expected, (method, path)
        document = json.loads(info.value.read())
        assert document["kind"] == "Status" and document["code"] == expected


def test_kubectl_create_scale_cordon_describe_and_delete(kube: Kube) -> None:
    d = name("web")
    kube.kubectl("create", "deployment", d, "--image=registry.k8s.io/pause:3.9", "--replicas=0")
    kube.kubectl("scale", f"deployment/{d}", "--replicas=3")
    assert kube.apps.read_namespaced_deployment(d, "default").spec.replicas == 3
    kube.kubectl("cordon", "system-1")
    assert kube.core.read_node("system-1").spec.unschedulable is True
    assert "SchedulingDisabled" in kube.kubectl("get", "node", "system-1").stdout
    kube.kubectl("uncordon", "system-1")
    assert "system-0" in kube.kubectl("describe", "node", "system-0").stdout
    wide = kube.kubectl("get", "pods", "-A", "-o", "wide").stdout
    assert "NODE" in wide.splitlines()[0] or wide == ""
    kube.kubectl("delete", "deployment", d)
    kube.kubectl("wait", "--for=delete", f"deployment/{d}", "--timeout=10s")


def test_pods_listed_by_node_follow_binds_and_deletes(kube: Kube) -> None:
    app = name("by-node")
    kube.core.create_namespaced_pod("default", pod(f"{app}-a", labels={"app": app}))
    kube.core.create_namespaced_pod("default", pod(f"{app}-b", labels={"app": app}, node_name="system-1"))

    def on(node: str) -> list[str]:
        found = kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}", label_selector=f"app={app}")
        return sorted(p.metadata.name for p in found.items)

    assert on("system-1") == [f"{app}-b"] and on("") == [f"{app}-a"]
    kube.core.create_namespaced_binding("default", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"{app}-a"},
                                                    "target": {"kind": "Node", "name": "system-1"}}, _preload_content=False)
    assert on("system-1") == [f"{app}-a", f"{app}-b"] and on("") == []
    both_terms = kube.core.list_namespaced_pod("default", field_selector=f"spec.nodeName=system-1,metadata.name={app}-b")
    assert [p.metadata.name for p in both_terms.items] == [f"{app}-b"]
    kube.core.delete_namespaced_pod(f"{app}-b", "default", grace_period_seconds=0)
    assert on("system-1") == [f"{app}-a"]
    kube.core.delete_namespaced_pod(f"{app}-a", "default", grace_period_seconds=0)
    assert on("system-1") == []


def test_evictions_at_once_take_no_more_than_the_budget_allows(kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = disruption.eviction_verdict

    def slow_verdict(*args: Any) -> Any:
        time.sleep(0.05)                              # every request reads the budget before any pod goes
        return verdict(*args)

    monkeypatch.setattr(disruption, "eviction_verdict", slow_verdict)
    app = name("race")
    count = 8
    for i in range(count):
        kube.core.create_namespaced_pod("default", pod(f"{app}-{i}", labels={"app": app}, node_name="system-0"))
        running(kube, f"{app}-{i}")
    kube.policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": app}, "spec": {"minAvailable": count - 1, "selector": {"matchLabels": {"app": app}}}})
    start = threading.Barrier(count)
    codes: list[int] = []

    def evict(i: int) -> None:
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": f"{app}-{i}"},
                    "deleteOptions": {"gracePeriodSeconds": 0}}
        start.wait()
        try:
            kube.core.create_namespaced_pod_eviction(f"{app}-{i}", "default", eviction)
            codes.append(201)
        except ApiException as e:
            codes.append(int(e.status))

    threads = [threading.Thread(target=evict, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(codes) == [201] + [429] * (count - 1), codes      # sent at once, as kubectl drain sends them
    left = [p for p in kube.core.list_namespaced_pod("default", label_selector=f"app={app}").items]
    assert len(left) == count - 1
    for p in left:
        kube.core.delete_namespaced_pod(p.metadata.name, "default", grace_period_seconds=0)
