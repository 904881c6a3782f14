"""Karpenter v1's cluster-state gauges, for NodePools and the nodes and pods they hold, under v1's names and labels.

Pure: samples (labels, value) from plain objects. controller/metrics.py serves them beside v0.16's, whose
Provisioner-labelled samples keep their own label sets: a pod on a NodePool's node is described as v1 describes it
(`nodepool`, `scheduled`, `ready`, `managed`), a pod anywhere else as v0.16 does. Quantities are in v1's units:
CPU in cores, everything else in its base unit; resource names are snake_case (`ephemeral_storage`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Mapping

from karpy.apis import labels as wk
from karpy.apis.pods import pod_requests, terminal
from karpy.apis.quantity import Quantity, QuantityError
from karpy.apis.resources import PODS, Resources
from karpy.apis.timestamps import parse_time

Obj = dict[str, Any]
Sample = tuple[dict[str, str], float]
# the resources a NodePool's usage always reports, zero when it has no nodes (v1's nodepool counter `BaseResources`)
BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage", "nodes")
# v1's WellKnownLabels, each as its metric label (the part after the slash, snake_case), on every node gauge
WELL_KNOWN = {wk.NODEPOOL: "nodepool", wk.ZONE: "zone", wk.REGION: "region", wk.INSTANCE_TYPE: "instance_type",
              wk.ARCH: "arch", wk.OS: "os", wk.CAPACITY_TYPE: "capacity_type",
              "node.kubernetes.io/windows-build": "windows_build"}
NODE_GAUGES = ("karpenter_nodes_allocatable", "karpenter_nodes_system_overhead", "karpenter_nodes_total_pod_requests",
               "karpenter_nodes_current_lifetime_seconds")

DOCUMENTATION = {
    "karpenter_nodepools_limit": "Limits specified on the nodepool that restrict the quantity of resources provisioned. "
                                 "Labeled by nodepool name and resource type.",
    "karpenter_nodepools_usage": "The amount of resources that have been provisioned for a nodepool. Labeled by "
                                 "nodepool name and resource type.",
    "karpenter_nodes_system_overhead": "Node system daemon overhead are the resources reserved for system overhead, the "
                                       "difference between the node's capacity and allocatable values are reported by "
                                       "the status.",
    "karpenter_nodes_total_pod_requests": "Node total pod requests are the resources requested by pods bound to nodes, "
                                          "including the DaemonSet pods.",
    "karpenter_nodes_current_lifetime_seconds": "Node age in seconds",
}


def resource_label(name: str) -> str:
    """v1's resource_type value: `ephemeral-storage` -> `ephemeral_storage`."""
    return name.lower().replace("-", "_")


def amount(value: object) -> float | None:
    """A quantity in v1's units (CPU in cores: a Quantity's value is the amount itself), or None when unparsable."""
    try:
        return float(Quantity.parse(value))
    except QuantityError:
        return None


def nodepool_of(node: Obj | None) -> str | None:
    return (((node or {}).get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL) or None


def node_labels(node: Obj) -> dict[str, str]:
    """The labels v1 puts on every node gauge: its well-known labels (empty when unset), name, phase, managed."""
    labels = node["metadata"].get("labels") or {}
    out = {metric: labels.get(key, "") for key, metric in WELL_KNOWN.items()}
    out.update(node_name=node["metadata"]["name"], phase=(node.get("status") or {}).get("phase") or "",
               managed="true" if labels.get(wk.NODEPOOL) else "false")
    return out


def pod_labels(pod: Obj, node: Obj | None) -> dict[str, str]:
    """`karpenter_pods_state`'s labels as v1 writes them, for a pod and the node it is bound to (None: unbound)."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    owners = meta.get("ownerReferences") or []
    owner = (f"/apis/{owners[0].get('apiVersion')}/namespaces/{meta.get('namespace')}/"
             f"{str(owners[0].get('kind', '')).lower()}s/{owners[0].get('name')}") if owners else ""
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    on = ((node or {}).get("metadata") or {}).get("labels") or {}
    return {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "owner": owner,
            "node": spec.get("nodeName") or "", "scheduled": "true" if spec.get("nodeName") else "false",
            "nodepool": on.get(wk.NODEPOOL, ""), "zone": on.get(wk.ZONE, ""), "arch": on.get(wk.ARCH, ""),
            "capacity_type": on.get(wk.CAPACITY_TYPE, ""), "instance_type": on.get(wk.INSTANCE_TYPE, ""),
            "phase": status.get("phase") or "", "ready": "true" if ready else "false",
            "managed": "true" if on.get(wk.NODEPOOL) else "false"}


def _per_resource(metric: str, labels: Mapping[str, str], resources: Mapping[str, object]) -> list[tuple[str, Sample]]:
    out = []
    for resource, value in resources.items():
        if (quantity := amount(value)) is not None:
            out.append((metric, ({**labels, "resource_type": resource_label(resource)}, quantity)))
    return out


def node_samples(node: Obj, pods: Iterable[Obj], now: dt.datetime) -> list[tuple[str, Sample]]:
    """(metric, sample) pairs of a NodePool's node: allocatable, system overhead (capacity less allocatable), what
    its pods request, and its age."""
    labels = node_labels(node)
    status = node.get("status") or {}
    out = _per_resource("karpenter_nodes_allocatable", labels, status.get("allocatable") or {})
    capacity, allocatable_raw = status.get("capacity") or {}, status.get("allocatable") or {}
    overhead = {}
    for resource, value in capacity.items():
        total, left = amount(value), amount(allocatable_raw.get(resource, "0"))
        if total is not None and left is not None:
            overhead[resource] = total - left
    out += [("karpenter_nodes_system_overhead", ({**labels, "resource_type": resource_label(r)}, v))
            for r, v in overhead.items()]
    requested = Resources()
    for pod in pods:
        if not terminal(pod):
            try:
                requested = requested + pod_requests(pod.get("spec") or {})
            except QuantityError:
                continue                                  # the API server would not have taken it
    out += [("karpenter_nodes_total_pod_requests", ({**labels, "resource_type": resource_label(r)}, milli / 1000))
            for r, milli in requested.items() if r != PODS]
    created = parse_time(node["metadata"].get("creationTimestamp"))
    if created is not None:
        out.append(("karpenter_nodes_current_lifetime_seconds", (labels, (now - created).total_seconds())))
    return out


def nodepool_samples(nodepools: Iterable[Obj], nodes: Iterable[Obj]) -> dict[str, list[Sample]]:
    """`karpenter_nodepools_limit` (spec.limits) and `karpenter_nodepools_usage` per NodePool and resource: usage is
    the NodePool's status.resources when it reports them, else the capacity of its nodes and their count, as v1's
    nodepool counter would write it."""
    used: dict[str, dict[str, float]] = {}
    for node in nodes:
        owner = nodepool_of(node)
        if owner is None:
            continue
        sums = used.setdefault(owner, dict.fromkeys(BASE_RESOURCES, 0.0))
        sums["nodes"] += 1
        for resource, value in ((node.get("status") or {}).get("capacity") or {}).items():
            if (quantity := amount(value)) is not None:
                sums[resource] = sums.get(resource, 0.0) + quantity
    out: dict[str, list[Sample]] = {"karpenter_nodepools_limit": [], "karpenter_nodepools_usage": []}
    for pool in nodepools:
        name = pool["metadata"]["name"]
        reported = (pool.get("status") or {}).get("resources")
        usage = ({r: a for r, v in reported.items() if (a := amount(v)) is not None} if reported
                 else used.get(name, dict.fromkeys(BASE_RESOURCES, 0.0)))
        out["karpenter_nodepools_usage"] += [({"resource_type": resource_label(r), "nodepool": name}, v)
                                             for r, v in usage.items()]
        for resource, value in ((pool.get("spec") or {}).get("limits") or {}).items():
            if (limit := amount(value)) is not None:
                out["karpenter_nodepools_limit"].append(({"resource_type": resource_label(resource), "nodepool": name}, limit))
    return out
