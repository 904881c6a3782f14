"""Reading status conditions of any object (Ready on nodes and pods, PodScheduled, ...), and whether a node
is initialized. Pure."""

from __future__ import annotations

from typing import Any, Mapping

from karpy.apis.labels import INITIALIZED


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """True when `obj` has a status condition of type `kind` with status "True"."""
    return any(c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def unschedulable(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """kube-scheduler's `PodScheduled=False, reason=Unschedulable` condition on a pod, if it is there."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"),
                None)


def ready(obj: Mapping[str, Any]) -> bool:
    """The Ready condition of a node or pod is True."""
    return condition_true(obj, "Ready")


def initialized(node: Mapping[str, Any]) -> bool:
    """karpy has labelled the node `karpenter.sh/initialized=true`: it was Ready with its startup taints gone
    (controller/node/initialization.py), so it is up and running rather than being launched."""
    return ((node.get("metadata") or {}).get("labels") or {}).get(INITIALIZED) == "true"
