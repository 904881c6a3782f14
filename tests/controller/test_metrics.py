"""The controller's metrics under Karpenter v0.16's names and labels: the cluster-state gauges read from the caches
at each scrape (so they fall back when pods and nodes leave), and counters named exactly as Karpenter's."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from karpy.controller.metrics import CLUSTER, NODES_CREATED, cluster_samples
from karpy.kubeclient.raw import path_of
from tests.builders import node, provisioner, unschedulable_pod
from tests.conftest import free_port
from tests.controller.conftest import Env
from tests.expectations import eventually
from tests.simulator.conftest import start

ROOT = Path(__file__).resolve().parents[2]


def scraped(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each sample of a Prometheus text page by its sample name, as Prometheus would store it."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def samples_of(env: Env) -> dict[str, list[tuple[dict[str, str], float]]]:
    return cluster_samples(pods=env.state.pods.items(), nodes=env.state.nodes.items(),
                           provisioners=env.state.provisioners.items(), pending_pods=0)


def test_pods_nodes_and_provisioners_are_described_with_karpenters_labels(env: Env) -> None:
    (pod,) = env.provision(provisioner("default", limits={"resources": {"cpu": "100"}}),
                           unschedulable_pod("web", cpu="1"))
    node_name = pod["spec"]["nodeName"]
    node = env.settle(lambda: env.state.nodes.get("", node_name))
    labels = node["metadata"]["labels"]
    samples = samples_of(env)

    (state,) = [s for s in samples["karpenter_pods_state"] if s[0]["name"] == "web"]
    assert state == ({"name": "web", "namespace": "default", "owner": "N/A", "node": node_name, "provisioner": "default",
                      "zone": labels["topology.kubernetes.io/zone"], "arch": labels["kubernetes.io/arch"],
                      "capacity_type": labels["karpenter.sh/capacity-type"],
                      "instance_type": labels["node.kubernetes.io/instance-type"], "phase": pod["status"]["phase"]}, 1.0)
    allocatable = {s[0]["resource_type"]: s[1] for s in samples["karpenter_nodes_allocatable"] if s[0]["node_name"] == node_name}
    assert allocatable["cpu"] > 0 and allocatable["memory"] > 0
    limit = {(s[0]["provisioner"], s[0]["resource_type"]): s[1] for s in samples["karpenter_provisioner_limit"]}
    usage = {(s[0]["provisioner"], s[0]["resource_type"]): s[1] for s in samples["karpenter_provisioner_usage"]}
    percent = {(s[0]["provisioner"], s[0]["resource_type"]): s[1] for s in samples["karpenter_provisioner_usage_pct"]}
    capacity_cpu = float(node["status"]["capacity"]["cpu"])
    assert limit[("default", "cpu")] == 100 and usage[("default", "cpu")] == capacity_cpu
    assert percent[("default", "cpu")] == capacity_cpu             # of a limit of 100

    # the page Prometheus scrapes carries them under these names, and follows the cluster as it changes
    CLUSTER.watch(lambda: samples_of(env))
    try:
        page = scraped(generate_latest(REGISTRY).decode())
        assert any(s[0].get("name") == "web" for s in page["karpenter_pods_state"])
        env.client.delete(path_of("v1", "pods", "default", "web"))
        env.settle(lambda: env.state.pods.get("default", "web") is None)
        page = scraped(generate_latest(REGISTRY).decode())
        assert not any(s[0].get("name") == "web" for s in page.get("karpenter_pods_state", []))
    finally:
        CLUSTER.watch(None)


def test_counters_keep_karpenters_names_without_a_total_suffix() -> None:
    before = REGISTRY.get_sample_value("karpenter_nodes_created", {"reason": "provisioning", "provisioner": "p"}) or 0
    NODES_CREATED.inc("provisioning", "p")
    assert REGISTRY.get_sample_value("karpenter_nodes_created", {"reason": "provisioning", "provisioner": "p"}) == before + 1
    page = scraped(generate_latest(REGISTRY).decode())
    assert ({"reason": "provisioning", "provisioner": "p"}, before + 1) in page["karpenter_nodes_created"]
    # v1's karpenter_nodes_created_total counts NodePool nodes under its own labels: never a Provisioner's
    assert all("provisioner" not in labels for labels, _ in page.get("karpenter_nodes_created_total", []))


@pytest.mark.slow      # runs the controller on the local cluster
def test_the_running_controller_reports_pending_pods_until_they_run_and_then_none(tmp_path: Path) -> None:
    """`karpy_provisioner_pending_pods` is the pods waiting now: it rises with an unschedulable pod and falls back
    once karpy has launched a node and bound it, with no further batch to write it."""
    cluster, kube = start(tmp_path, system_nodes=0, boot_delay=0.2)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    port = free_port()
    log = tmp_path / "controller.log"
    with open(log, "wb") as out:
        controller = subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kube.kubeconfig), "--cloud-provider",
             "fake", "--cluster-name", "test", "--metrics-port", str(port), "--health-port", "0"],
            stdout=out, stderr=subprocess.STDOUT, env={k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"})
    try:
        def metric(metric_name: str, **labels: str) -> float | None:
            try:
                page = scraped(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
            except requests.ConnectionError:
                return None
            return next((v for s, v in page.get(metric_name, []) if labels.items() <= s.items()), None)

        kube.core.create_namespaced_pod("default", unschedulable_pod("web", cpu="1"))     # no Provisioner yet
        eventually(lambda: metric("karpy_provisioner_pending_pods") == 1, timeout=30)
        kube.custom.create_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", provisioner("default"))
        eventually(lambda: kube.core.read_namespaced_pod("web", "default").spec.node_name, timeout=30)
        eventually(lambda: metric("karpy_provisioner_pending_pods") == 0, timeout=30)
        assert metric("karpenter_nodes_created", reason="provisioning", provisioner="default") == 1
        node = kube.core.read_namespaced_pod("web", "default").spec.node_name
        assert metric("karpenter_pods_state", name="web", node=node, provisioner="default") == 1
    finally:
        controller.terminate()
        controller.wait(timeout=10)
        kube.api_client.close()
        cluster.stop()


def controller_metric_names() -> set[str]:
    """The sample names the controller serves, from a fresh process that loads the controller only (so no other
    part's metrics are mixed in): a counter's with `_total`, a histogram's `_bucket`, `_sum`, `_count`."""
    program = ("import json, karpy.controller.operator\nfrom prometheus_client import REGISTRY\n"
               "print(json.dumps([[f.name, f.type] for f in REGISTRY.collect()]))")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120).stdout
    names: set[str] = set()
    for name, kind in json.loads(out):
        if name.startswith(("karpenter_", "karpy_")):
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])
            names |= {name + s for s in suffixes}
    return names


def test_docs_and_the_grafana_dashboard_name_the_metrics_the_controller_serves() -> None:
    served = controller_metric_names()
    assert {"karpenter_nodes_created", "karpenter_pods_state", "karpenter_provisioner_usage",
            "karpy_provisioner_pending_pods"} <= served
    documented = set(re.findall(r"`((?:karpenter|karpy)_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in served}
    assert {b for b in bases if b + "_bucket" in served or b in served} - documented == set()
    dashboard = json.loads((ROOT / "manifests" / "grafana" / "karpy-dashboard.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\b((?:karpenter|karpy)_[a-z_]+)", target["expr"])}
    assert queried and queried - served == set()
    panels = {p["title"] for p in dashboard["panels"]}
    assert len(panels) == len(dashboard["panels"])


def test_cloud_provider_calls_are_timed_by_controller_method_and_provider(env: Env) -> None:
    import threading

    from karpy.controller.metrics import MeasuredCloud

    cloud = MeasuredCloud(env.cloud)
    labels = {"controller": "termination", "method": "GetInstanceTypes", "provider": env.cloud.name}
    before = REGISTRY.get_sample_value("karpenter_cloudprovider_duration_seconds_count", labels) or 0
    worker = threading.Thread(target=cloud.instance_types, name="termination")
    worker.start()
    worker.join()
    assert REGISTRY.get_sample_value("karpenter_cloudprovider_duration_seconds_count", labels) == before + 1
    assert cloud.catalog == env.cloud.catalog                  # anything else passes through


def test_a_nodepools_allowed_disruptions_follow_its_active_budgets_per_reason() -> None:
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"disruption": {"budgets": [{"nodes": "50%"}, {"nodes": "1", "reasons": ["Drifted"]},
                                                {"nodes": "0", "schedule": "0 9 * * *", "duration": "1h",
                                                 "reasons": ["Empty"]}]},
                     "template": {"spec": {"requirements": [], "nodeClassRef": {
                         "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}
    nodes = [node(f"n{i}", labels={"karpenter.sh/nodepool": "general"}, initialized=True) for i in range(3)]

    def allowed(at: dt.datetime) -> dict[str, float]:
        samples = cluster_samples(pods=[], nodes=nodes, provisioners=[], pending_pods=0, nodepools=[pool], now=at)
        return {labels["reason"]: value for labels, value in samples["karpenter_nodepools_allowed_disruptions"]
                if labels["nodepool"] == "general"}

    assert allowed(dt.datetime(2024, 1, 8, 12, tzinfo=dt.timezone.utc)) == {"Empty": 2, "Drifted": 1, "Underutilized": 2}
    assert allowed(dt.datetime(2024, 1, 8, 9, 30, tzinfo=dt.timezone.utc))["Empty"] == 0
