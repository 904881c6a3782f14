"""What a launch writes, and what it does next: NodeClaim and Node manifests, and the next step of a claim.

Pure: manifests are built from what was planned and what the provider
returned; `next_step` reads a claim and what exists now and names the one
step that moves it on. The I/O is in launcher.py.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis import nodeclaim as api
from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources
from karpy.controller.cloudprovider.types import Instance, InstanceType, NodeRequest

Obj = dict[str, Any]
PROVISIONER_API_VERSION = "karpenter.sh/v1alpha5"


def owner_reference(provisioner: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference Karpenter (since v0.12) puts on its nodes: deleting the Provisioner (or NodePool, given
    with its apiVersion and kind) deletes them."""
    return {"apiVersion": provisioner.get("apiVersion", PROVISIONER_API_VERSION), "kind": provisioner.get("kind", "Provisioner"),
            "name": provisioner["metadata"]["name"], "uid": provisioner["metadata"]["uid"], "blockOwnerDeletion": True}


def unregistered_taints(labels: Mapping[str, str], owner: str) -> list[Obj]:
    """v1: a NodePool's node starts with `karpenter.sh/unregistered:NoExecute`, removed once it registers
    (controller/node/initialization.py); a Provisioner's node does not."""
    return [{"key": wk.TAINT_UNREGISTERED, "effect": "NoExecute"}] if wk.owner_label(labels, owner) == wk.NODEPOOL else []


def claim_manifest(request: NodeRequest, *, pods: Sequence[tuple[str, str, str | None]], bind: bool,
                   owner: Mapping[str, Any] | None) -> Obj:
    """The NodeClaim recording `request` before anything is launched; `pods` are (namespace, name, uid)."""
    spec: Obj = {"provisioner": request.provisioner, "requirements": request.requirements.to_manifest(),
                 "instanceTypes": [t.name for t in request.instance_type_options], "labels": dict(request.labels),
                 "annotations": dict(request.annotations), "taints": [dict(t) for t in request.taints],
                 "pods": [{"namespace": ns, "name": n, **({"uid": uid} if uid else {})} for ns, n, uid in pods], "bind": bind}
    return {"apiVersion": api.GROUP_VERSION, "kind": api.KIND,
            "metadata": {"name": request.node_name, "finalizers": [wk.TERMINATION_FINALIZER],
                         "labels": {wk.owner_label(request.labels, request.provisioner): request.provisioner},
                         **({"ownerReferences": [owner_reference(owner)]} if owner else {})},
            "spec": spec}


def request_of(claim: Obj, instance_types: Sequence[InstanceType]) -> NodeRequest:
    """The NodeRequest a claim records, its options looked up by name in today's catalog."""
    spec = claim.get("spec") or {}
    known = {t.name: t for t in instance_types}
    return NodeRequest(node_name=claim["metadata"]["name"], provisioner=spec.get("provisioner", ""),
                       requirements=Requirements.from_node_selector_requirements(spec.get("requirements")),
                       instance_type_options=tuple(known[n] for n in spec.get("instanceTypes") or [] if n in known),
                       labels=dict(spec.get("labels") or {}), taints=tuple(spec.get("taints") or ()),
                       annotations=dict(spec.get("annotations") or {}))


def launched_status(instance: Instance) -> Obj:
    """What a claim records once its instance exists."""
    return {"providerID": instance.provider_id, "nodeName": instance.node_name, "instanceType": instance.instance_type,
            "zone": instance.zone, "capacityType": instance.capacity_type}


def node_manifest(claim: Obj, instance: Instance, instance_type: InstanceType | None) -> Obj:
    """The Node for a launched claim: the claim's labels, taints and annotations, the launched offering's labels
    and capacity, the termination finalizer and the owner reference to the Provisioner."""
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    name = status.get("nodeName") or instance.node_name
    owner = spec.get("provisioner", "")
    labels = {**(spec.get("labels") or {}), **instance.labels, wk.owner_label(spec.get("labels") or {}, owner): owner,
              wk.HOSTNAME: name}
    capacity, allocatable, price = instance.capacity, instance.allocatable, instance.price_per_hour
    if instance_type is not None:
        for key, value in instance_type.requirements.single_values().items():
            labels.setdefault(key, value)
        capacity, allocatable = capacity or instance_type.capacity, allocatable or instance_type.allocatable
        if price is None:
            price = next((o.price_per_hour for o in instance_type.offerings
                          if o.zone == instance.zone and o.capacity_type == instance.capacity_type), None)
    annotations = dict(spec.get("annotations") or {})
    if price is not None:
        annotations[wk.PRICE_PER_HOUR] = str(price)
    body: Obj = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations, "finalizers": [wk.TERMINATION_FINALIZER],
                     "ownerReferences": list(claim["metadata"].get("ownerReferences") or [])},
        "spec": {"providerID": instance.provider_id,
                 "taints": [dict(t) for t in spec.get("taints") or []] + unregistered_taints(spec.get("labels") or {}, owner)
                 + [{"key": wk.TAINT_NOT_READY, "effect": "NoSchedule"}]},
    }
    if capacity is not None and allocatable is not None:
        body["status"] = {"capacity": capacity.to_manifest(), "allocatable": allocatable.to_manifest(),
                          "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeBooting",
                                          "message": "launched by karpy"}]}
    return body


def adoption_patch(node: Obj, wanted: Obj) -> Obj | None:
    """Pure: the patch that puts karpy's labels, annotations, finalizer and owner reference on a Node the kubelet
    registered first, or None when it has them already."""
    meta, want = node["metadata"], wanted["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    owners = list(meta.get("ownerReferences") or [])
    patch: Obj = {}
    if any((meta.get("labels") or {}).get(k) != v for k, v in want["labels"].items()):
        patch["labels"] = want["labels"]
    if any((meta.get("annotations") or {}).get(k) != v for k, v in want["annotations"].items()):
        patch["annotations"] = want["annotations"]
    if wk.TERMINATION_FINALIZER not in finalizers:
        patch["finalizers"] = [*finalizers, wk.TERMINATION_FINALIZER]
    missing = [o for o in want.get("ownerReferences") or [] if all(o["uid"] != h.get("uid") for h in owners)]
    if missing:
        patch["ownerReferences"] = owners + missing
    return {"metadata": patch} if patch else None


class Step(enum.Enum):
    """The one thing a claim needs next, in launch order."""

    FINALIZE = "finalize"             # being deleted: delete its Node, terminate its instance, drop the finalizer
    CREATE = "create"                 # no instance recorded: create() (which adopts one launched before a crash)
    NODE = "node"                     # launched, no Node written yet: write (or adopt) it
    BIND = "bind"                     # Node written, pods not yet bound
    DELETE = "delete"                 # its Node was written and is gone since: the claim goes too
    DONE = "done"


@dataclasses.dataclass(frozen=True)
class Situation:
    """What exists now, as launcher.py read it."""

    node_exists: bool


def node_matters(claim: Obj) -> bool:
    """Pure: whether next_step turns on the Node's existence: only once the claim records the Node was created
    (before that, and while the claim is deleted, its Node need not be read)."""
    status = claim.get("status") or {}
    return not claim["metadata"].get("deletionTimestamp") and bool(status.get("providerID")) and bool(status.get("nodeCreated"))


def next_step(claim: Obj, now: Situation) -> Step:
    """Pure: the next step of `claim` (see Step)."""
    status = claim.get("status") or {}
    if claim["metadata"].get("deletionTimestamp"):
        return Step.FINALIZE
    if not status.get("providerID"):
        return Step.CREATE
    if not status.get("nodeCreated"):
        return Step.NODE
    if not now.node_exists:
        return Step.DELETE
    if (claim.get("spec") or {}).get("bind", True) and not status.get("podsBound"):
        return Step.BIND
    return Step.DONE


def pods_of(claim: Obj) -> list[tuple[str, str, str | None]]:
    return [(p["namespace"], p["name"], p.get("uid")) for p in (claim.get("spec") or {}).get("pods") or []]


def that_fit(requests: list[tuple[Any, Resources]], room: Resources) -> list[Any]:
    """Pure: the keys of the pods, in order, that fit into `room` one after another. A restarted launcher binds
    onto a node kube-scheduler may already have placed other pods on: binding past its room would overfill it."""
    fitting = []
    for key, asked in requests:
        if not asked.exceeding(room):
            fitting.append(key)
            room = room - asked
    return fitting
