"""The fake cloud provider: instances are Node objects in the cluster it talks to (as Karpenter's KWOK provider).

`create` makes the Node (labels, taints, capacity and allocatable of the
cheapest launchable option, providerID `fake://<node name>`); the simulated
kubelets make it Ready. The Node is the instance: `delete` marks it
terminated (an annotation), so the termination controller can remove its
finalizer, and `list` finds every instance after a restart. Failures can be
injected (no capacity for some types, errors, slow launches), and every call
is recorded, like Karpenter's fake provider's CreateCalls.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Sequence

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.v1alpha5 import KubeletConfiguration
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import Instance, InstanceNotFound, InstanceType, InsufficientCapacity, NodeRequest, Offering
from karpy.controller.provisioning.scheduling.nodes import offering_allowed
from karpy.kubeclient.raw import RawClient, path_of

PROVIDER_ID_PREFIX = "fake://"
TERMINATED = "karpy.dev/instance-terminated"
FAKE_INSTANCE = "karpy.dev/fake-instance"


@dataclasses.dataclass
class Faults:
    """Failures a test can inject into the fake provider."""

    no_capacity: set[str] = dataclasses.field(default_factory=set)   # instance types with no capacity now
    create_error: str | None = None                                  # every create fails with this message
    launch_delay_seconds: float = 0.0


class FakeCloudProvider:
    name = "fake"

    def __init__(self, client: RawClient, catalog: Catalog, *, faults: Faults | None = None) -> None:
        self.client = client
        self.catalog = catalog
        self.faults = faults or Faults()
        self.create_calls: list[NodeRequest] = []
        self.delete_calls: list[str] = []
        self._lock = threading.Lock()

    def instance_types(self, kubelet: KubeletConfiguration | None = None) -> Sequence[InstanceType]:
        return self.catalog.instance_types(kubelet)

    def create(self, request: NodeRequest) -> Instance:
        with self._lock:
            self.create_calls.append(request)
        existing = self._node(request.node_name)
        if existing is not None:                              # idempotent: a retry returns what was launched
            return _instance(existing)
        if self.faults.create_error:
            raise RuntimeError(self.faults.create_error)
        chosen = self._cheapest(request)
        if chosen is None:
            raise InsufficientCapacity(f"no capacity for any of {len(request.instance_type_options)} instance type option(s)")
        it, offering = chosen
        if self.faults.launch_delay_seconds:
            time.sleep(self.faults.launch_delay_seconds)
        labels = {**request.labels, wk.INSTANCE_TYPE: it.name, wk.ZONE: offering.zone, wk.CAPACITY_TYPE: offering.capacity_type,
                  wk.HOSTNAME: request.node_name, FAKE_INSTANCE: "true"}
        for key, value in it.requirements.single_values().items():
            labels.setdefault(key, value)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": request.node_name, "labels": labels, "finalizers": [wk.TERMINATION_FINALIZER],
                         "annotations": {**request.annotations, wk.PRICE_PER_HOUR: str(offering.price_per_hour)}},
            "spec": {"providerID": PROVIDER_ID_PREFIX + request.node_name,
                     "taints": [dict(t) for t in request.taints] + [{"key": wk.TAINT_NOT_READY, "effect": "NoSchedule"}]},
            "status": {"capacity": it.capacity.to_manifest(), "allocatable": it.allocatable.to_manifest(),
                       "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeBooting", "message": "launched by karpy"}]},
        }
        try:
            created = self.client.create(path_of("v1", "nodes"), body)
        except ApiException as e:
            if e.status != 409:
                raise
            created = self._node(request.node_name) or body
        return _instance(created)

    def _cheapest(self, request: NodeRequest) -> tuple[InstanceType, Offering] | None:
        best: tuple[InstanceType, Offering] | None = None
        for it in request.instance_type_options:
            if it.name in self.faults.no_capacity:
                continue
            for o in it.offerings:
                if offering_allowed(o, request.requirements) and (
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
        node = self._node(provider_id.removeprefix(PROVIDER_ID_PREFIX))
        if node is None or (node["metadata"].get("annotations") or {}).get(TERMINATED) == "true":
            raise InstanceNotFound(provider_id)
        return _instance(node)

    def delete(self, provider_id: str) -> None:
        with self._lock:
            self.delete_calls.append(provider_id)
        name = provider_id.removeprefix(PROVIDER_ID_PREFIX)
        node = self._node(name)
        if node is None or (node["metadata"].get("annotations") or {}).get(TERMINATED) == "true":
            raise InstanceNotFound(provider_id)
        try:
            self.client.patch(path_of("v1", "nodes", name=name), {"metadata": {"annotations": {TERMINATED: "true"}}})
        except ApiException as e:
            if e.status == 404:
                raise InstanceNotFound(provider_id) from None
            raise

    def list(self) -> Sequence[Instance]:
        nodes = self.client.get(path_of("v1", "nodes"), labelSelector=f"{FAKE_INSTANCE}=true").get("items") or []
        return [_instance(n) for n in nodes if (n["metadata"].get("annotations") or {}).get(TERMINATED) != "true"]


def _instance(node: dict[str, Any]) -> Instance:
    return Instance(provider_id=(node.get("spec") or {}).get("providerID", PROVIDER_ID_PREFIX + node["metadata"]["name"]),
                    node_name=node["metadata"]["name"], labels=dict(node["metadata"].get("labels") or {}))
