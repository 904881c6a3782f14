"""Builders of plain manifest dicts, shaped as `kubectl get -o json` prints them.

Every argument is optional; names are random unless given. One object feeds
`karpy plan`, the API server and an AdmissionReview alike.
"""

from __future__ import annotations

import uuid
from typing import Any


def random_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def provisioner(name: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Provisioner; keyword arguments are spec fields by their wire names."""
    return {
        "apiVersion": "karpenter.sh/v1alpha5",
        "kind": "Provisioner",
        "metadata": {"name": name or random_name("provisioner")},
        "spec": dict(spec),
    }


def awsnodetemplate(name: str | None = None, **spec: Any) -> dict[str, Any]:
    """An AWSNodeTemplate; by default with the selectors it needs to be valid."""
    spec.setdefault("subnetSelector", {"karpenter.sh/discovery": "demo"})
    spec.setdefault("securityGroupSelector", {"karpenter.sh/discovery": "demo"})
    return {
        "apiVersion": "karpenter.k8s.aws/v1alpha1",
        "kind": "AWSNodeTemplate",
        "metadata": {"name": name or random_name("template")},
        "spec": {k: v for k, v in spec.items() if v is not None},
    }


def admission_review(obj: Any, *, operation: str = "CREATE", old: Any = None, uid: str | None = None) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview as the API server sends it."""
    kind = obj.get("kind", "") if isinstance(obj, dict) else ""
    api_version = obj.get("apiVersion", "") if isinstance(obj, dict) else ""
    group, _, version = api_version.rpartition("/")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin"},
        "object": obj if operation != "DELETE" else None,
        "oldObject": old,
        "dryRun": False,
    }
    if isinstance(obj, dict) and "name" in obj.get("metadata", {}):
        request["name"] = obj["metadata"]["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def pod(name: str | None = None, *, namespace: str = "default", cpu: str | None = "100m", memory: str | None = None,
        labels: dict[str, str] | None = None, node_name: str | None = None, owner: tuple[str, str] | None = ("ReplicaSet", "app"),
        annotations: dict[str, str] | None = None, phase: str | None = None, requests: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    """A Pod with one container; keyword arguments are extra spec fields by their wire names."""
    resources = dict(requests or {})
    if cpu:
        resources["cpu"] = cpu
    if memory:
        resources["memory"] = memory
    meta: dict[str, Any] = {"name": name or random_name("pod"), "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True,
                                    "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, owner[1]))}]
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                 "resources": {"requests": resources} if resources else {}}], **spec},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    if phase:
        body["status"] = {"phase": phase}
    return body


def unschedulable_pod(name: str | None = None, **kw: Any) -> dict[str, Any]:
    """A pending pod as kube-scheduler leaves it: PodScheduled=False, reason Unschedulable.

    No owner by default: in a live cluster a pod whose controller does not exist is garbage."""
    kw.setdefault("owner", None)
    body = pod(name, **kw)
    body["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    return body


def pods(count: int, prefix: str = "pod", **kw: Any) -> list[dict[str, Any]]:
    return [pod(f"{prefix}-{i}", **kw) for i in range(count)]


def node(name: str | None = None, *, labels: dict[str, str] | None = None, allocatable: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, provisioner: str | None = None, instance_type: str | None = None,
         zone: str | None = None, capacity_type: str | None = None, initialized: bool = False, unschedulable: bool = False,
         deleting: bool = False, created: str | None = None) -> dict[str, Any]:
    """A Node; `provisioner` adds karpenter.sh/provisioner-name, `initialized` karpenter.sh/initialized=true."""
    name = name or random_name("node")
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", **(labels or {})}
    for key, value in (("karpenter.sh/provisioner-name", provisioner), ("node.kubernetes.io/instance-type", instance_type),
                       ("topology.kubernetes.io/zone", zone), ("karpenter.sh/capacity-type", capacity_type)):
        if value:
            all_labels[key] = value
    if initialized:
        all_labels["karpenter.sh/initialized"] = "true"
    meta: dict[str, Any] = {"name": name, "labels": all_labels}
    if created:
        meta["creationTimestamp"] = created
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        meta["finalizers"] = ["karpenter.sh/termination"]
    allocatable = allocatable or {"cpu": "2", "memory": "8Gi", "pods": "29"}
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": meta,
        "spec": {"taints": list(taints or []), **({"unschedulable": True} if unschedulable else {})},
        "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable),
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _template(cpu: str | None, memory: str | None, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                     "resources": {"requests": requests}}], **spec}}


def deployment(name: str | None = None, *, replicas: int = 1, cpu: str | None = "1", memory: str | None = None,
               namespace: str = "default", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    name = name or random_name("deploy")
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": _template(cpu, memory, labels, **spec)}}


def daemonset(name: str | None = None, *, cpu: str | None = "100m", memory: str | None = None,
              namespace: str = "kube-system", **spec: Any) -> dict[str, Any]:
    name = name or random_name("ds")
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": labels}, "template": _template(cpu, memory, labels, **spec)}}


def catalog(*types: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "karpy.dev/v1alpha1", "kind": "InstanceTypeCatalog", "instanceTypes": list(types)}


def instance_type(name: str, *, cpu: str = "2", memory: str = "8Gi", pods: str = "110", price: float = 0.1,
                  zones: tuple[str, ...] = ("zone-a",), capacity_types: tuple[str, ...] = ("on-demand",),
                  **extra: Any) -> dict[str, Any]:
    offerings = [{"zone": z, "capacityType": c, "price": price if c == "on-demand" else round(price * 0.4, 6)}
                 for z in zones for c in capacity_types]
    return {"name": name, "capacity": {"cpu": cpu, "memory": memory, "pods": pods, **extra.pop("capacity", {})},
            "offerings": offerings, **extra}
