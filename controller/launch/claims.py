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
from karpy.apis import launch_record as rec
from karpy.apis.launch_record import PodReference
from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources
from karpy.apis.v1 import nodeclaim as v1
from karpy.controller.cloudprovider.types import Instance, InstanceType, NodeRequest

Obj = dict[str, Any]
PROVISIONER_API_VERSION = "karpenter.sh/v1alpha5"
# requirement keys v1's NodeClaim refuses (its CEL rules): the owner is a label there, the hostname is the Node's
LAUNCHED_LABELS = (wk.INSTANCE_TYPE, wk.ZONE, wk.CAPACITY_TYPE)


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference Karpenter puts on what it launches (v0.16 on nodes, to their Provisioner; v1 on
    NodeClaims, to their NodePool): deleting the owner deletes them."""
    return {"apiVersion": owner.get("apiVersion") or PROVISIONER_API_VERSION, "kind": owner.get("kind") or "Provisioner",
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "blockOwnerDeletion": True}


def unregistered_taints(labels: Mapping[str, str], owner: str) -> list[Obj]:
    """v1: a NodePool's node starts with `karpenter.sh/unregistered:NoExecute`, removed once it registers
    (controller/node/initialization.py); a Provisioner's node does not."""
    return [{"key": wk.TAINT_UNREGISTERED, "effect": "NoExecute"}] if wk.owner_label(labels, owner) == wk.NODEPOOL else []


def node_class_ref(owner: Mapping[str, Any] | None, name: str) -> dict[str, str]:
    """v1's required spec.nodeClassRef: a NodePool's own; a Provisioner's providerRef (an AWSNodeTemplate); else the
    Provisioner itself, whose `provider` (or the cloud's defaults) is the node class."""
    spec = (owner or {}).get("spec") or {}
    if (owner or {}).get("kind") == "NodePool":
        return dict(((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {})
    ref = spec.get("providerRef")
    if ref and ref.get("name"):
        group = str(ref.get("apiVersion") or "karpenter.k8s.aws/v1alpha1").split("/")[0]
        return {"group": group, "kind": str(ref.get("kind") or "AWSNodeTemplate"), "name": str(ref["name"])}
    return {**rec.NODECLASS_PROVISIONER, "name": name}


def lifetime(owner: Mapping[str, Any] | None) -> Obj:
    """A NodeClaim's expireAfter and terminationGracePeriod: a NodePool's template's, fixed when the claim is
    written, as v1 stamps them; `Never` for a Provisioner's, whose nodes expire by its ttlSecondsUntilExpired
    (controller/node/expiration.py) and drain as long as it takes."""
    if (owner or {}).get("kind") != "NodePool":
        return {"expireAfter": "Never"}
    template = (((owner or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    grace = template.get("terminationGracePeriod")
    return {"expireAfter": template.get("expireAfter") or v1.DEFAULT_EXPIRE_AFTER,
            **({"terminationGracePeriod": grace} if grace else {})}


def claim_requirements(requirements: Requirements, options: Sequence[str]) -> list[Obj]:
    """Pure: the requirements a v1 NodeClaim records: the request's, less what v1 refuses (karpenter.sh keys other
    than capacity-type and nodepool; the hostname), with the instance type narrowed to `options` in their order
    (cheapest first: the order create() tries them)."""
    out = [r for r in requirements.to_manifest()
           if r["key"] != wk.INSTANCE_TYPE and r["key"] != wk.HOSTNAME
           and (not str(r["key"]).split("/")[0].endswith(wk.GROUP) or r["key"] in (wk.CAPACITY_TYPE, wk.NODEPOOL))]
    if options:
        out.append({"key": wk.INSTANCE_TYPE, "operator": "In", "values": list(options)})
    return out


def claim_manifest(request: NodeRequest, *, pods: Sequence[PodReference], bind: bool,
                   owner: Mapping[str, Any] | None) -> Obj:
    """The karpenter.sh/v1 NodeClaim recording `request` before anything is launched; `owner` is the Provisioner
    (or NodePool) as read, None when it is gone."""
    options = [t.name for t in request.instance_type_options]
    spec: Obj = {"requirements": claim_requirements(request.requirements, options),
                 "nodeClassRef": node_class_ref(owner, request.provisioner), **lifetime(owner)}
    if request.taints:
        spec["taints"] = [dict(t) for t in request.taints]
    return {"apiVersion": v1.GROUP_VERSION, "kind": v1.KIND,
            "metadata": {"name": request.node_name, "finalizers": [wk.TERMINATION_FINALIZER],
                         "labels": {**request.labels, wk.owner_label(request.labels, request.provisioner): request.provisioner},
                         "annotations": {**request.annotations, rec.PODS: rec.pods_annotation(pods, bind=bind)},
                         **({"ownerReferences": [owner_reference(owner)]} if owner else {})},
            "spec": spec}


def options_of(claim: Mapping[str, Any]) -> list[str]:
    """The instance types a claim may launch, in the order it lists them."""
    for r in (claim.get("spec") or {}).get("requirements") or []:
        if r.get("key") == wk.INSTANCE_TYPE and r.get("operator") == "In":
            return [str(v) for v in r.get("values") or []]
    return []


def request_of(claim: Obj, instance_types: Sequence[InstanceType]) -> NodeRequest:
    """The NodeRequest a claim records, its options looked up by name in today's catalog."""
    spec, meta = claim.get("spec") or {}, claim["metadata"]
    known = {t.name: t for t in instance_types}
    owner = rec.owner_name(claim)
    requirements = Requirements.from_node_selector_requirements(spec.get("requirements"))
    if (meta.get("labels") or {}).get(wk.PROVISIONER_NAME):
        requirements = requirements.intersection(Requirements.from_labels({wk.PROVISIONER_NAME: owner}))
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != rec.PODS}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in LAUNCHED_LABELS}
    return NodeRequest(node_name=meta["name"], provisioner=owner, requirements=requirements,
                       instance_type_options=tuple(known[n] for n in options_of(claim) if n in known),
                       labels=labels, taints=tuple(spec.get("taints") or ()), annotations=annotations)


def launched_labels(instance: Instance) -> dict[str, str]:
    """The labels a claim gains once its instance exists (v1's printer columns show them)."""
    wanted = {wk.INSTANCE_TYPE: instance.instance_type, wk.ZONE: instance.zone, wk.CAPACITY_TYPE: instance.capacity_type}
    return {k: v for k, v in wanted.items() if v}


def launched_status(claim: Obj, instance: Instance, instance_type: InstanceType | None, *, now: str) -> Obj:
    """What a claim records once its instance exists: providerID, node name, image, capacity, and Launched."""
    status: Obj = {"providerID": instance.provider_id, "nodeName": instance.node_name,
                   "conditions": rec.with_conditions(claim, now, **{rec.LAUNCHED: True})}
    if instance.image_id:
        status["imageID"] = instance.image_id            # what AMI drift compares with the EC2NodeClass's AMIs
    capacity = instance.capacity or (instance_type.capacity if instance_type is not None else None)
    allocatable = instance.allocatable or (instance_type.allocatable if instance_type is not None else None)
    if capacity is not None and allocatable is not None:
        status.update(capacity=capacity.to_manifest(), allocatable=allocatable.to_manifest())
    return status


def node_manifest(claim: Obj, instance: Instance, instance_type: InstanceType | None) -> Obj:
    """The Node for a launched claim: the claim's labels, taints and annotations, the launched offering's labels
    and capacity, the termination finalizer and the claim's owner reference."""
    spec, status, meta = claim.get("spec") or {}, claim.get("status") or {}, claim["metadata"]
    name = status.get("nodeName") or instance.node_name
    labels = {**(meta.get("labels") or {}), **instance.labels, wk.HOSTNAME: name}
    owner = rec.owner_name(claim)
    capacity, allocatable, price = instance.capacity, instance.allocatable, instance.price_per_hour
    if instance_type is not None:
        for key, value in instance_type.requirements.single_values().items():
            labels.setdefault(key, value)
        capacity, allocatable = capacity or instance_type.capacity, allocatable or instance_type.allocatable
        if price is None:
            price = next((o.price_per_hour for o in instance_type.offerings
                          if o.zone == instance.zone and o.capacity_type == instance.capacity_type), None)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != rec.PODS}
    if price is not None:
        annotations[wk.PRICE_PER_HOUR] = str(price)
    body: Obj = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations, "finalizers": [wk.TERMINATION_FINALIZER],
                     "ownerReferences": [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Provisioner"]},
        "spec": {"providerID": instance.provider_id,
                 "taints": [dict(t) for t in spec.get("taints") or []] + unregistered_taints(meta.get("labels") or {}, owner)
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
    CREATE = "create"                 # not Launched: create() (which adopts one launched before a crash)
    NODE = "node"                     # Launched, not Registered: write (or adopt) its Node
    BIND = "bind"                     # Registered, pods not yet bound
    DELETE = "delete"                 # its Node was written and is gone since: the claim goes too
    INITIALIZE = "initialize"         # its Node is initialized: say so on the claim (Initialized, Ready)
    DONE = "done"


@dataclasses.dataclass(frozen=True)
class Situation:
    """What exists now, as launcher.py read it."""

    node_exists: bool
    node_initialized: bool = False


def node_matters(claim: Obj) -> bool:
    """Pure: whether next_step turns on the claim's Node: only once it is Registered (before that, and while the
    claim is deleted, its Node need not be read)."""
    return not claim["metadata"].get("deletionTimestamp") and launched(claim) and rec.is_true(claim, rec.REGISTERED)


def launched(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("providerID"))


def next_step(claim: Obj, now: Situation) -> Step:
    """Pure: the next step of `claim` (see Step)."""
    if claim["metadata"].get("deletionTimestamp"):
        return Step.FINALIZE
    if not launched(claim):
        return Step.CREATE
    if not rec.is_true(claim, rec.REGISTERED):
        return Step.NODE
    if not now.node_exists:
        return Step.DELETE
    if rec.binds(claim) and not rec.is_true(claim, rec.PODS_BOUND):
        return Step.BIND
    if now.node_initialized and not rec.is_true(claim, rec.INITIALIZED):
        return Step.INITIALIZE
    return Step.DONE


def initialized(node: Obj | None) -> bool:
    return node is not None and (node["metadata"].get("labels") or {}).get(wk.INITIALIZED) == "true"


def pods_of(claim: Obj) -> list[PodReference]:
    return rec.pods_of(claim)


def that_fit(requests: list[tuple[Any, Resources]], room: Resources) -> list[Any]:
    """Pure: the keys of the pods, in order, that fit into `room` one after another. A restarted launcher binds
    onto a node kube-scheduler may already have placed other pods on: binding past its room would overfill it."""
    fitting = []
    for key, asked in requests:
        if not asked.exceeding(room):
            fitting.append(key)
            room = room - asked
    return fitting
