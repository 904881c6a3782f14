"""Each controller built alone against a local cluster over HTTP, with a stepped clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

import pytest

from karpy.controller.clock import FakeClock
from karpy.controller.cloudprovider.catalog import catalog_from_document
from karpy.controller.cloudprovider.fake import FakeCloudProvider
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import RawClient, path_of
from tests.builders import catalog, instance_type
from tests.expectations import eventually
from tests.simulator.conftest import Kube, start

ROOT = Path(__file__).resolve().parents[2]
CATALOG_DOC = catalog(
    instance_type("small", cpu="2", memory="4Gi", pods="10", price=0.1, zones=("zone-a", "zone-b")),
    instance_type("large", cpu="8", memory="16Gi", pods="40", price=0.4, zones=("zone-a", "zone-b")),
)
CATALOG = catalog_from_document(CATALOG_DOC)


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
            plural = {"Pod": "pods", "Node": "nodes", "Provisioner": "provisioners", "DaemonSet": "daemonsets",
                      "PodDisruptionBudget": "poddisruptionbudgets", "Deployment": "deployments"}[kind]
            namespaced = kind in ("Pod", "DaemonSet", "PodDisruptionBudget", "Deployment")
            self.client.create(path_of(obj["apiVersion"], plural, meta.get("namespace", "default") if namespaced else None), obj)
            informer = {"pods": self.state.pods, "nodes": self.state.nodes, "provisioners": self.state.provisioners,
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


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    cluster, kube = start(tmp_path, system_nodes=0, boot_delay=0.2)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    client = RawClient(kube.api_client)
    state = ClusterState(client)
    state.start()
    yield Env(kube, client, state, FakeCloudProvider(client, CATALOG), FakeClock())
    state.stop()
    kube.api_client.close()
    cluster.stop()
