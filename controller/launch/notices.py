"""The Events a launch writes, worded as Karpenter writes them: v0.16's for a Provisioner's pods, v1's for a
NodePool's pods and NodeClaims (its `pkg/controllers/provisioning/scheduling/events.go` and
`pkg/controllers/nodeclaim/lifecycle/events.go`).

Pure: each function returns the Event's reason, message and type; launcher.py sends them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.types import Instance

MAX_MESSAGE = 300          # v1 truncates a cloud provider's error to this many characters in an Event


@dataclasses.dataclass(frozen=True)
class Notice:
    reason: str
    message: str
    type: str = "Normal"


def from_nodepool(claim: Mapping[str, Any]) -> bool:
    """Whether a claim was launched for a NodePool (v1's Events) rather than a Provisioner (v0.16's)."""
    return bool(((claim.get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL))


def truncated(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def nominated_to_claim(claim_name: str) -> Notice:
    """v1: a pod is told the NodeClaim written for it, as soon as it is written."""
    return Notice("Nominated", f"Pod should schedule on: nodeclaim/{claim_name}")


def nominated_to_node(instance: Instance) -> Notice:
    """v0.16: a pod is told the node launched for it, once the Node is written."""
    return Notice("Nominated", f"Pod should schedule on node {instance.node_name}: launched {instance.instance_type} "
                               f"({instance.capacity_type}) in {instance.zone} for it, as {instance.provider_id}")


def insufficient_capacity(claim_name: str, error: str) -> Notice:
    """v1, on the NodeClaim: no offering could be launched; the claim is deleted and its pods planned again."""
    return Notice("InsufficientCapacityError", f"NodeClaim {claim_name} event: {truncated(error)}", "Warning")


def unregistered_taint_missing() -> Notice:
    """v1, on the NodeClaim: its Node registered without the taint that keeps pods off it until karpy adopts it."""
    return Notice("UnregisteredTaintMissing", f"Missing {wk.TAINT_UNREGISTERED} taint which prevents registration "
                                              "related race conditions on Karpenter-managed nodes", "Warning")


def failed_to_schedule(reason: str) -> Notice:
    """v1, on a pod no NodePool can schedule (kept while the reason stays the same)."""
    return Notice("FailedScheduling", f"Failed to schedule pod, {reason}", "Warning")


def failed_to_provision(reason: str) -> Notice:
    """v0.16, on a pod no Provisioner can schedule."""
    return Notice("FailedProvisioning", reason, "Warning")


def no_compatible_instance_types() -> Notice:
    """v1, on a NodePool whose requirements leave it no instance type to launch."""
    return Notice("NoCompatibleInstanceTypes", "NodePool requirements filtered out all compatible available instance types",
                  "Warning")
