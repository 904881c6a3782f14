"""The fake cloud provider: instances that live as long as their Node, as Karpenter's KWOK provider's do.

`create` "launches" the cheapest launchable option for a claim and returns
it; the instance is named after the claim (providerID `fake://<claim>`), so
launching the same claim twice returns the one instance. The launch module
writes the Node; the simulated kubelets make it Ready. Instances are kept in
memory and, because the Node is the instance, a Node with a `fake://`
providerID is one too: a restarted controller finds every instance that has
a Node. `delete` marks the instance terminated, so the termination
controller can remove its finalizer. Failures can be injected (no capacity
for some types, errors, slow launches), and every call is recorded, like
Karpenter's fake provider's CreateCalls. It reads Nodes and writes no
Kubernetes object.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Sequence

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.resources import Resources
from karpy.apis.v1alpha5 import KubeletConfiguration
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import (
    Instance,
    InstanceNotFound,
    InstanceType,
    InsufficientCapacity,
    InterruptionQueue,
    NodeRequest,
    Offering,
)
from karpy.kubeclient.raw import RawClient, path_of

PROVIDER_ID_PREFIX = "fake://"


@dataclasses.dataclass
class Faults:
    """Failures a test can inject into the fake provider."""

    no_capacity: set[str] = dataclasses.field(default_factory=set)   # instance types with no capacity now
    create_error: str | None = None                                  # every create fails with this message
    launch_delay_seconds: float = 0.0


class FakeCloudProvider:
    name = "fake"

    def __init__(self, client: RawClient, catalog: Catalog, *, faults: Faults | None = None) -> None:
        self.client = client                   # read only: the Nodes that are instances
        self._catalog = catalog
        self.faults = faults or Faults()
        self.create_calls: list[NodeRequest] = []
        self.delete_calls: list[str] = []
        self.launched: list[str] = []          # provider ids, in launch order: a second launch of a claim would show here
        self._instances: dict[str, Instance] = {}
        self._terminated: set[str] = set()
        self._lock = threading.Lock()

    def catalog(self) -> Catalog:
        return self._catalog

    def instance_types(self, kubelet: KubeletConfiguration | None = None) -> Sequence[InstanceType]:
        return self._catalog.instance_types(kubelet)

    def interruption_queue(self, name: str) -> InterruptionQueue | None:
        return None                            # nothing interrupts a fake instance

    def create(self, request: NodeRequest) -> Instance:
        provider_id = PROVIDER_ID_PREFIX + request.node_name
        with self._lock:
            self.create_calls.append(request)
        try:                                   # idempotent: a retry returns what was launched
            return dataclasses.replace(self.get(provider_id), adopted=True)
        except InstanceNotFound:
            pass
        if self.faults.create_error:
            raise RuntimeError(self.faults.create_error)
        chosen = self._cheapest(request)
        if chosen is None:
            raise InsufficientCapacity(f"no capacity for any of {len(request.instance_type_options)} instance type option(s)")
        it, offering = chosen
        if self.faults.launch_delay_seconds:
            time.sleep(self.faults.launch_delay_seconds)
        instance = Instance(provider_id=provider_id, node_name=request.node_name, claim_name=request.node_name,
                            labels={wk.INSTANCE_TYPE: it.name, wk.ZONE: offering.zone, wk.CAPACITY_TYPE: offering.capacity_type},
                            capacity=it.capacity, allocatable=it.allocatable, price_per_hour=offering.price_per_hour)
        with self._lock:
            self._instances[provider_id] = instance
            self._terminated.discard(provider_id)
            self.launched.append(provider_id)
        return instance

    def _cheapest(self, request: NodeRequest) -> tuple[InstanceType, Offering] | None:
        best: tuple[InstanceType, Offering] | None = None
        for it in request.instance_type_options:
            if it.name in self.faults.no_capacity:
                continue
            for o in it.offerings:
                if o.allowed_by(request.requirements) and (
                        best is None or (o.price_per_hour, it.name, o.zone) < (best[1].price_per_hour, best[0].name, best[1].zone)):
                    best = (it, o)
        return best

    def _node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(path_of("v1", "nodes", name=name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def get(self, provider_id: str) -> Instance:
        with self._lock:
            if provider_id in self._terminated:
                raise InstanceNotFound(provider_id)
            if provider_id in self._instances:
                return self._instances[provider_id]
        node = self._node(provider_id.removeprefix(PROVIDER_ID_PREFIX))
        if node is None or (node.get("spec") or {}).get("providerID") != provider_id:
            raise InstanceNotFound(provider_id)
        return _instance(node)

    def delete(self, provider_id: str) -> None:
        with self._lock:
            self.delete_calls.append(provider_id)
        self.get(provider_id)                  # InstanceNotFound once it is gone
        with self._lock:
            self._terminated.add(provider_id)
            self._instances.pop(provider_id, None)

    def list(self) -> Sequence[Instance]:
        nodes = self.client.get(path_of("v1", "nodes")).get("items") or []
        with self._lock:
            found = dict(self._instances)
            for node in nodes:
                provider_id = (node.get("spec") or {}).get("providerID") or ""
                if provider_id.startswith(PROVIDER_ID_PREFIX) and provider_id not in found:
                    found[provider_id] = _instance(node)
            return [i for pid, i in found.items() if pid not in self._terminated]


def _instance(node: dict[str, Any]) -> Instance:
    """The instance a fake Node stands for (after a restart, the Node is all there is of it)."""
    labels = node["metadata"].get("labels") or {}
    status = node.get("status") or {}
    name = node["metadata"]["name"]
    return Instance(provider_id=node["spec"]["providerID"], node_name=name, claim_name=name,
                    labels={k: labels[k] for k in (wk.INSTANCE_TYPE, wk.ZONE, wk.CAPACITY_TYPE) if k in labels},
                    capacity=Resources.parse(status["capacity"]) if status.get("capacity") else None,
                    allocatable=Resources.parse(status["allocatable"]) if status.get("allocatable") else None)
