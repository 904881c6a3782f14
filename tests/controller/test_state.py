"""The controller's caches survive dropped watches and 410s without losing an object."""

from __future__ import annotations

from pathlib import Path

import pytest

from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import RawClient, path_of
from tests.builders import pod
from tests.controller.conftest import CATALOG, Env
from tests.expectations import eventually
from tests.simulator.conftest import start

pytestmark = pytest.mark.slow      # starts the local cluster


def test_caches_converge_after_dropped_watches_and_gone_resource_versions(tmp_path: Path) -> None:
    cluster, kube = start(tmp_path, system_nodes=0, controllers=False, history=20)
    client = RawClient(kube.api_client)
    state = ClusterState(client)
    try:
        kube.kubectl("apply", "-f", str(Path(__file__).resolve().parents[2] / "manifests" / "crds"))
        state.start()
        for i in range(5):
            client.create(path_of("v1", "nodes"), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
        eventually(lambda: len(state.nodes.items()) == 5)
        cluster.store.drop_watches()                                   # every watch breaks
        for i in range(5, 10):
            client.create(path_of("v1", "nodes"), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
        eventually(lambda: len(state.nodes.items()) == 10)
        state.nodes.stop()                                             # fall far behind: the history moves on
        for i in range(60):
            client.patch(path_of("v1", "nodes", name="n0"), {"metadata": {"labels": {"i": str(i)}}})
        client.delete(path_of("v1", "nodes", name="n1"))
        fresh = ClusterState(client)
        fresh.nodes.start()
        eventually(lambda: fresh.nodes.get("", "n0") is not None and fresh.nodes.get("", "n0")["metadata"]["labels"]["i"] == "59")
        cluster.store.drop_watches()
        client.delete(path_of("v1", "nodes", name="n2"))
        eventually(lambda: sorted(n["metadata"]["name"] for n in fresh.nodes.items()) == ["n0"] + [f"n{i}" for i in range(3, 10)])
        fresh.stop()
    finally:
        state.stop()
        kube.api_client.close()
        cluster.stop()


def test_the_pods_by_node_index_follows_binds_deletes_and_relists(tmp_path: Path) -> None:
    cluster, kube = start(tmp_path, system_nodes=0, controllers=False, history=20)
    client = RawClient(kube.api_client)
    state = ClusterState(client)

    def by_filter() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in state.pods.items():
            if node := p["spec"].get("nodeName"):
                out.setdefault(node, []).append(p["metadata"]["name"])
        return {n: sorted(names) for n, names in out.items()}

    def by_index() -> dict[str, list[str]]:
        return {n: sorted(p["metadata"]["name"] for p in state.pods_on(n)) for n in ("n0", "n1", "n2") if state.pods_on(n)}

    try:
        kube.kubectl("apply", "-f", str(Path(__file__).resolve().parents[2] / "manifests" / "crds"))
        state.start()
        for i in range(6):
            client.create(path_of("v1", "pods", "default"), pod(f"p{i}"))
        for i in range(4):
            client.bind("default", f"p{i}", f"n{i % 2}")
        eventually(lambda: by_index() == by_filter() == {"n0": ["p0", "p2"], "n1": ["p1", "p3"]})
        assert sorted(p["metadata"]["name"] for p in state.bound_pods()) == ["p0", "p1", "p2", "p3"]
        client.delete(path_of("v1", "pods", "default", "p0"), gracePeriodSeconds=0)
        client.bind("default", "p4", "n2")
        eventually(lambda: by_index() == by_filter() == {"n0": ["p2"], "n1": ["p1", "p3"], "n2": ["p4"]})
        cluster.store.drop_watches()                                   # the pods are listed again
        client.delete(path_of("v1", "pods", "default", "p1"), gracePeriodSeconds=0)
        client.bind("default", "p5", "n0")
        eventually(lambda: by_index() == by_filter() == {"n0": ["p2", "p5"], "n1": ["p3"], "n2": ["p4"]})
    finally:
        state.stop()
        kube.api_client.close()


def test_a_snapshot_parses_again_only_the_pods_whose_spec_or_labels_changed(env: Env) -> None:
    env.apply(*[pod(f"web-{i}", node_name="somewhere", labels={"app": "web"}) for i in range(3)],
              pod("waiting", schedulerName="another-scheduler"))

    def snapshot() -> dict[str, PodInfo]:
        waiting = env.state.pod_infos([p for p in env.state.pods.items() if not p["spec"].get("nodeName")])
        return {p.name: p for p in env.state.snapshot(CATALOG, env.state.bound_pods(), parsed=waiting).pods}

    first, again = snapshot(), snapshot()
    assert all(again[name] is first[name] for name in first)                # nothing changed: the same records
    env.client.patch(path_of("v1", "pods", "default", "web-0", "status"), {"status": {"phase": "Running"}})
    env.client.patch(path_of("v1", "pods", "default", "web-1"), {"metadata": {"labels": {"app": "api"}}})
    env.client.bind("default", "waiting", "somewhere")
    eventually(lambda: env.state.pods.get("default", "web-0")["status"].get("phase") == "Running"
               and env.state.pods.get("default", "web-1")["metadata"]["labels"]["app"] == "api"
               and env.state.pods.get("default", "waiting")["spec"].get("nodeName") == "somewhere")
    now = snapshot()
    assert now["web-0"].phase == "Running" and now["web-0"].raw is env.state.pods.get("default", "web-0")
    assert now["web-1"].labels == {"app": "api"}
    assert now["waiting"].node_name == "somewhere" and now["waiting"].raw is env.state.pods.get("default", "waiting")
    assert now["web-2"] is first["web-2"]
