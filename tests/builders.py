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
