"""The local cluster at work: scheduler, kubelets and workload controllers, driven with kubectl."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from karpy.kubeclient.raw import RawClient
from tests.builders import node, pod
from tests.expectations import eventually, expect_events
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts the local cluster


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    cluster, kube = start(tmp_path_factory.mktemp("live"), system_nodes=2, boot_delay=0.3)
    yield kube
    kube.api_client.close()
    cluster.stop()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def pods_of(kube: Kube, selector: str) -> list[Any]:
    return kube.core.list_namespaced_pod("default", label_selector=selector).items


def test_a_deployment_scaled_with_kubectl_runs_its_pods(live: Kube) -> None:
    d = name("web")
    live.kubectl("create", "deployment", d, "--image=registry.k8s.io/pause:3.9", "--replicas=0")
    live.kubectl("scale", f"deployment/{d}", "--replicas=3")
    eventually(lambda: [p.status.phase for p in pods_of(live, f"app={d}")] == ["Running"] * 3)
    live.kubectl("wait", "--for=condition=Ready", "pod", "-l", f"app={d}", "--timeout=10s")
    eventually(lambda: live.apps.read_namespaced_deployment(d, "default").status.ready_replicas == 3)
    assert "3/3" in live.kubectl("get", "deployment", d).stdout
    live.kubectl("scale", f"deployment/{d}", "--replicas=1")
    eventually(lambda: len([p for p in pods_of(live, f"app={d}") if not p.metadata.deletion_timestamp]) == 1)
    live.kubectl("delete", "deployment", d)
    eventually(lambda: pods_of(live, f"app={d}") == [])


def test_pods_that_fit_nowhere_are_marked_unschedulable_like_kube_scheduler(live: Kube) -> None:
    n = name("huge")
    live.core.create_namespaced_pod("default", pod(n, cpu="64"))

    def marked() -> Any:
        conditions = live.core.read_namespaced_pod(n, "default").status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    condition = eventually(marked)
    assert condition.reason == "Unschedulable"
    assert condition.message == "0/2 nodes are available: 2 Insufficient cpu."
    (event,) = expect_events(RawClient(live.api_client), {"kind": "Pod", "metadata": {"name": n, "namespace": "default"}},
                             "FailedScheduling", event_type="Warning")
    assert event["message"] == condition.message and event["source"]["component"] == "default-scheduler"
    live.core.delete_namespaced_pod(n, "default")


def test_a_new_node_becomes_ready_after_its_boot_delay_and_takes_pending_pods(live: Kube) -> None:
    waiting = name("waiting")
    label = name("pool")
    live.core.create_namespaced_pod("default", pod(waiting, cpu="1", nodeSelector={"pool": label}))
    eventually(lambda: any(c.reason == "Unschedulable" for c in live.core.read_namespaced_pod(waiting, "default").status.conditions or []))
    fresh = node(name("node"), labels={"pool": label}, allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"},
                 taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    fresh["status"]["conditions"] = []
    live.core.create_node(fresh)
    assert live.core.read_node(fresh["metadata"]["name"]).status.conditions in (None, [])
    eventually(lambda: live.core.read_namespaced_pod(waiting, "default").status.phase == "Running")
    ready = live.core.read_node(fresh["metadata"]["name"])
    assert any(c.type == "Ready" and c.status == "True" for c in ready.status.conditions)
    assert not ready.spec.taints
    live.core.delete_node(fresh["metadata"]["name"])
    eventually(lambda: not live.core.list_namespaced_pod("default", field_selector=f"metadata.name={waiting}").items)


def test_daemonsets_run_one_pod_per_node_and_statefulsets_name_their_pods(live: Kube, tmp_path: Path) -> None:
    ds = name("agent")
    live.apps.create_namespaced_daemon_set("default", {
        "metadata": {"name": ds}, "spec": {"selector": {"matchLabels": {"app": ds}}, "template": {
            "metadata": {"labels": {"app": ds}}, "spec": {"containers": [{"name": "a", "image": "x"}]}}}})
    eventually(lambda: sorted(p.spec.node_name for p in pods_of(live, f"app={ds}")) == ["system-0", "system-1"])
    eventually(lambda: live.apps.read_namespaced_daemon_set(ds, "default").status.number_ready == 2)
    sts = name("db")
    live.apps.create_namespaced_stateful_set("default", {
        "metadata": {"name": sts}, "spec": {"replicas": 2, "serviceName": sts, "selector": {"matchLabels": {"app": sts}},
                                            "template": {"metadata": {"labels": {"app": sts}},
                                                         "spec": {"containers": [{"name": "a", "image": "x"}]}}}})
    eventually(lambda: sorted(p.metadata.name for p in pods_of(live, f"app={sts}")) == [f"{sts}-0", f"{sts}-1"])
    live.apps.delete_namespaced_daemon_set(ds, "default")
    live.apps.delete_namespaced_stateful_set(sts, "default")
    eventually(lambda: not pods_of(live, f"app={ds}") and not pods_of(live, f"app={sts}"))


def test_daemonset_pods_follow_the_daemonset_controllers_rules_not_the_schedulers(live: Kube) -> None:
    pool = name("pool")
    target = node(name("node"), labels={"pool": pool}, allocatable={"cpu": "0", "memory": "0", "pods": "0"})
    n = target["metadata"]["name"]
    live.core.create_node(target)
    ds = name("agent")
    live.apps.create_namespaced_daemon_set("default", {
        "metadata": {"name": ds}, "spec": {"selector": {"matchLabels": {"app": ds}}, "template": {
            "metadata": {"labels": {"app": ds}}, "spec": {"nodeSelector": {"pool": pool},
                                                          "containers": [{"name": "a", "image": "x"}]}}}})
    try:
        # no room by kube-scheduler's measure, and the node not Ready at first: still one pod, once it is Ready
        (agent,) = eventually(lambda: [p for p in pods_of(live, f"app={ds}") if p.spec.node_name == n])
        assert [p.spec.node_name for p in pods_of(live, f"app={ds}")] == [n]          # only the selected node
        tolerated = {(t.key, t.effect) for t in agent.spec.tolerations}
        assert {("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unschedulable", "NoSchedule")} <= tolerated

        def taint(*taints: dict[str, str]) -> None:
            live.core.patch_node(n, {"spec": {"taints": list(taints)}})

        taint({"key": "dedicated", "effect": "NoSchedule"})       # keeps new daemon pods off, evicts none
        eventually(lambda: live.apps.read_namespaced_daemon_set(ds, "default").status.number_misscheduled == 1)
        assert [p.metadata.uid for p in pods_of(live, f"app={ds}")] == [agent.metadata.uid]
        taint({"key": "dedicated", "effect": "NoExecute"})        # evicts
        eventually(lambda: not pods_of(live, f"app={ds}"))
        taint()
        eventually(lambda: [p.spec.node_name for p in pods_of(live, f"app={ds}")] == [n])
    finally:
        live.apps.delete_namespaced_daemon_set(ds, "default")
        live.core.delete_node(n)
    eventually(lambda: not pods_of(live, f"app={ds}"))


def test_kubectl_drain_evicts_only_what_the_pod_disruption_budget_allows(live: Kube) -> None:
    d = name("guarded")
    live.kubectl("create", "deployment", d, "--image=pause", "--replicas=4")
    live.kubectl("wait", "--for=condition=Ready", "pod", "-l", f"app={d}", "--timeout=10s")
    eventually(lambda: len(pods_of(live, f"app={d}")) == 4)
    live.kubectl("create", "pdb", d, f"--selector=app={d}", "--min-available=3")
    eventually(lambda: live.policy.read_namespaced_pod_disruption_budget(d, "default").status.disruptions_allowed == 1)
    for target in ("system-0", "system-1"):
        live.kubectl("cordon", target)
    try:
        before = {p.metadata.name for p in pods_of(live, f"app={d}")}
        # kubectl drain sends every eviction at once: the budget lets one through
        result = live.kubectl("drain", "system-0", "system-1", "--ignore-daemonsets", "--timeout=3s", check=False)
        assert result.returncode != 0                                # the budget holds the rest back
        after = [p for p in pods_of(live, f"app={d}") if p.metadata.name in before and not p.metadata.deletion_timestamp]
        assert len(after) == 3
    finally:                                                         # the cluster's later tests need the nodes
        for target in ("system-0", "system-1"):
            live.kubectl("uncordon", target)
        live.kubectl("delete", "deployment", d)
        live.kubectl("delete", "pdb", d)


def test_kubectl_get_watch_streams_changes(live: Kube) -> None:
    n = name("watched")
    live.core.create_namespaced_config_map("default", {"metadata": {"name": n}})
    result = live.kubectl("get", "configmap", n, "-w", "--request-timeout=2s", check=False, timeout=20)
    assert n in result.stdout


def test_objects_whose_controller_is_gone_are_collected(live: Kube) -> None:
    orphan = name("orphan")
    live.apps.create_namespaced_replica_set("default", {
        "metadata": {"name": orphan, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "gone",
                                                          "uid": "00000000-0000-0000-0000-000000000000", "controller": True}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": orphan}},
                 "template": {"metadata": {"labels": {"app": orphan}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    eventually(lambda: not live.apps.list_namespaced_replica_set("default", field_selector=f"metadata.name={orphan}").items, timeout=15)
    eventually(lambda: not pods_of(live, f"app={orphan}"), timeout=15)


def test_a_burst_fills_the_nodes_and_every_pod_left_over_is_marked_unschedulable(live: Kube) -> None:
    d = name("burst")
    live.kubectl("create", "deployment", d, "--image=registry.k8s.io/pause:3.9", "--replicas=0")
    live.kubectl("set", "resources", f"deployment/{d}", "--requests=cpu=900m")
    live.kubectl("scale", f"deployment/{d}", "--replicas=40")

    def settled() -> Any:
        pods = pods_of(live, f"app={d}")
        bound = [p for p in pods if p.spec.node_name]
        marked = [c for p in pods if not p.spec.node_name for c in p.status.conditions or []
                  if c.type == "PodScheduled" and c.status == "False"]
        return (bound, marked) if len(pods) == 40 and len(bound) + len(marked) == 40 else None

    bound, marked = eventually(settled, timeout=30)
    nodes = live.core.list_node().items
    # nodes of 2 cpu take two pods of 900m at most; the pods left over share one verdict
    assert 0 < len(bound) <= 2 * len(nodes)
    assert len({c.message for c in marked}) == 1
    assert marked[0].message.startswith(f"0/{len(nodes)} nodes are available: ") and "Insufficient cpu" in marked[0].message
    live.kubectl("delete", "deployment", d)
    eventually(lambda: pods_of(live, f"app={d}") == [])
