"""Each controller built alone against a local cluster over HTTP, with a stepped clock."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
import yaml

from karpy.controller.clock import FakeClock
from karpy.controller.cloudprovider.catalog import catalog_from_document
from karpy.controller.cloudprovider.fake import FakeCloudProvider
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import RawClient, path_of
from tests.builders import catalog, instance_type
from tests.conftest import stop_process
from tests.expectations import eventually
from tests.simulator.conftest import Kube, start

ROOT = Path(__file__).resolve().parents[2]
CATALOG_DOC = catalog(
    instance_type("small", cpu="2", memory="4Gi", pods="10", price=0.1, zones=("zone-a", "zone-b")),
    instance_type("large", cpu="8", memory="16Gi", pods="40", price=0.4, zones=("zone-a", "zone-b")),
)
CATALOG = catalog_from_document(CATALOG_DOC)


@contextlib.contextmanager
def controller_for_nodepool(tmp_path: Path, *, catalog_doc: dict[str, Any], nodepool: dict[str, Any],
                            pod: dict[str, Any], args: Sequence[str]) -> Iterator[Kube]:
    """A local cluster with the CRDs, `nodepool` and the pending `pod` applied, and `karpy controller` (fake cloud
    provider over `catalog_doc`, with `args` more) watching it; it logs to tmp_path/controller.log. All of it is
    stopped when the block ends."""
    (tmp_path / "catalog.json").write_text(json.dumps(catalog_doc))
    (tmp_path / "nodepool.yaml").write_text(yaml.safe_dump(nodepool))
    cluster, kube = start(tmp_path, system_nodes=0, boot_delay=0.2)
    log = open(tmp_path / "controller.log", "wb")
    controller: subprocess.Popen[bytes] | None = None
    try:
        kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
        kube.kubectl("apply", "-f", str(tmp_path / "nodepool.yaml"))
        kube.core.create_namespaced_pod("default", pod)
        controller = subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kube.kubeconfig),
             "--catalog", str(tmp_path / "catalog.json"), "--health-port", "0",
             "--batch-idle-duration", "0.3", "--batch-max-duration", "2", *args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        yield kube
    finally:
        if controller is not None:
            stop_process(controller)
        log.close()
        kube.api_client.close()
        cluster.stop()


@dataclasses.dataclass
class Env:
    kube: Kube
    client: RawClient
    state: ClusterState
    cloud: FakeCloudProvider
    clock: FakeClock

    def apply(self, *objects: dict[str, Any]) -> None:
        """Create objects through the API server and wait until the controller's caches show them."""
        for obj in objects:
            kind, meta = obj["kind"], obj["metadata"]
            plural = {"Pod": "pods", "Node": "nodes", "Provisioner": "provisioners", "NodePool": "nodepools", "DaemonSet": "daemonsets",
                      "PodDisruptionBudget": "poddisruptionbudgets", "Deployment": "deployments"}[kind]
            namespaced = kind in ("Pod", "DaemonSet", "PodDisruptionBudget", "Deployment")
            self.client.create(path_of(obj["apiVersion"], plural, meta.get("namespace", "default") if namespaced else None), obj)
            informer = {"pods": self.state.pods, "nodes": self.state.nodes, "provisioners": self.state.provisioners,
                        "nodepools": self.state.nodepools,
                        "daemonsets": self.state.daemonsets, "poddisruptionbudgets": self.state.pdbs}.get(plural)
            if informer is not None:
                ns = meta.get("namespace", "default") if namespaced else ""
                eventually(lambda: informer.get(ns, meta["name"]) is not None)  # noqa: B023 — run before the loop moves on

    def provision(self, *objects: dict[str, Any], **options: Any) -> list[dict[str, Any]]:
        """ExpectProvisioned on the local cluster: apply `objects`, run one provisioning pass (launch and bind, with
        the Provisioner's keyword `options`), and return the pods among `objects` as the API server now holds them."""
        from karpy.controller.provisioning.provisioner import Provisioner

        self.apply(*objects)
        Provisioner(self.state, self.cloud, CATALOG, **options).reconcile()
        return [self.client.get(path_of("v1", "pods", o["metadata"].get("namespace", "default"), o["metadata"]["name"]))
                for o in objects if o["kind"] == "Pod"]

    def settle(self, check: Any, timeout: float = 10) -> Any:
        return eventually(check, timeout=timeout)

    def sync(self) -> None:
        """Wait until the controller's caches hold every node, pod, PDB and NodeClaim as the API server does now, so a
        reconcile called next decides from what the test just wrote (a controller reading its client directly,
        as Karpenter's suites do, would see it at once)."""
        def versions(objects: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
            return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                    for o in objects}

        def same() -> bool:
            return all(versions(informer.items()) == versions(self.client.get(path_of(api_version, plural))["items"])
                       for informer, api_version, plural in ((self.state.nodes, "v1", "nodes"), (self.state.pods, "v1", "pods"),
                                                             (self.state.pdbs, "policy/v1", "poddisruptionbudgets"),
                                                             (self.state.claims, "karpenter.sh/v1", "nodeclaims")))
        self.settle(same)


def _clean_up(env: Env) -> None:
    """Karpenter's ExpectCleanedUp: every pod, budget, node, NodeClaim, NodePool and Provisioner goes, finalizers or
    not."""
    for pod in env.client.get(path_of("v1", "pods"))["items"]:
        env.client.delete(path_of("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]), gracePeriodSeconds=0)
    for pdb in env.client.get(path_of("policy/v1", "poddisruptionbudgets"))["items"]:
        env.client.delete(path_of("policy/v1", "poddisruptionbudgets", pdb["metadata"]["namespace"], pdb["metadata"]["name"]))
    for api_version, plural in (("v1", "nodes"), ("karpenter.sh/v1", "nodeclaims"), ("karpenter.sh/v1", "nodepools"),
                                ("karpenter.sh/v1alpha5", "provisioners")):
        for obj in env.client.get(path_of(api_version, plural))["items"]:
            path = path_of(api_version, plural, name=obj["metadata"]["name"])
            if obj["metadata"].get("finalizers"):
                env.client.patch(path, {"metadata": {"finalizers": None}})
            if not obj["metadata"].get("deletionTimestamp"):
                env.client.delete(path)
    env.settle(lambda: not env.state.nodes.items() and not env.state.pods.items() and not env.state.provisioners.items())


def _running(cluster: Any, kube: Kube) -> Iterator[Env]:
    """An Env over a started local cluster with karpy's CRDs applied, torn down when the fixture ends."""
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    client = RawClient(kube.api_client)
    state = ClusterState(client)
    state.start()
    yield Env(kube, client, state, FakeCloudProvider(client, CATALOG), FakeClock())
    state.stop()
    kube.api_client.close()
    cluster.stop()


@pytest.fixture(scope="session")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """The local cluster's API server alone, as Karpenter's controller suites run on envtest: no scheduler,
    kubelets or workload controllers, so pods stay as a test writes them (an evicted pod stays terminating
    until the test deletes it). Started once and shared (its start is most of a short test's time); `bare`
    cleans up after each test."""
    yield from _running(*start(tmp_path_factory.mktemp("bare"), system_nodes=0, controllers=False))


@pytest.fixture
def bare(bare_cluster: Env) -> Iterator[Env]:
    """`bare_cluster` for one test, its clock at the wall clock's now (the API server stamps objects with it)."""
    bare_cluster.clock = FakeClock(dt.datetime.now(dt.timezone.utc))
    bare_cluster.cloud = FakeCloudProvider(bare_cluster.client, CATALOG)     # no faults or calls left by another test
    yield bare_cluster
    _clean_up(bare_cluster)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    yield from _running(*start(tmp_path, system_nodes=0, boot_delay=0.2))
