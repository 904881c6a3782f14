"""Drift: whether a NodeClaim no longer matches what its NodePool and EC2NodeClass would launch today.

The NodePool's template hash follows Karpenter v1 (`NodePool.Hash`): it
covers the template's labels and annotations, taints and startup taints (as
sets: order does not matter), nodeClassRef, terminationGracePeriod and
expireAfter, and leaves out the requirements (drift checks those against the
NodeClaim's labels instead) and the whole of `disruption` (budgets,
consolidation: they change how nodes go, not what they are). Durations count
by value ("60m" is "1h"), and an empty map or list is the same as an absent
one. The digest is karpy's own, so it is stamped with karpy's hash version:
v1 compares hashes only when both sides carry the same version, and a node
launched by Karpenter itself is never taken as drifted on hash alone.

The EC2NodeClass's hash follows the AWS provider's (`EC2NodeClass.Hash`): its
spec without the selector terms (subnets, security groups, capacity
reservations, AMIs: what they resolve to is checked against the node
instead), `ipPrefixCount` and the AMI family as written, with the AMI family
as resolved (its alias's when not given) added.

A NodeClaim's Drifted reason, checked in v1's order: NodePoolDrifted (hashes
differ), RequirementsDrifted (its labels no longer satisfy the NodePool's
requirements), then the EC2NodeClass's: NodeClassDrift (its hash differs)
and AMIDrift (the image the node runs is no longer among those its AMI
selection resolves to).

A v1alpha5 Provisioner drifts as Karpenter v0.21-v0.31 let it behind the
Drift feature gate: its hash (`karpenter.sh/provisioner-hash`) covers the
node labels, annotations, taints, startup taints, kubelet configuration and
provider (inline or by reference), not its requirements (checked against the
node's labels), TTLs, limits, weight or consolidation. Pure.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Collection, Final, Literal, Mapping, Sequence

from karpy.apis.labels import AWS_GROUP, GROUP
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.v1.duration import parse_duration, parse_nillable_duration
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1.labels import NODEPOOL_HASH, NODEPOOL_HASH_VERSION
from karpy.apis.v1.nodeclaim import NodeClaim, NodeSelectorRequirement, Taint
from karpy.apis.v1.nodepool import NodePool
from karpy.apis.v1alpha5 import Provisioner
from karpy.apis.v1alpha5 import Taint as V1Alpha5Taint

NODEPOOL_HASH_VERSION_VALUE: Final = "karpy-v1"
EC2NODECLASS_HASH: Final = f"{AWS_GROUP}/ec2nodeclass-hash"
EC2NODECLASS_HASH_VERSION: Final = f"{AWS_GROUP}/ec2nodeclass-hash-version"
EC2NODECLASS_HASH_VERSION_VALUE: Final = "karpy-v1"
PROVISIONER_HASH: Final = f"{GROUP}/provisioner-hash"
HASH_ANNOTATIONS: Final = frozenset({NODEPOOL_HASH, NODEPOOL_HASH_VERSION, EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION,
                                     PROVISIONER_HASH})
# the selector terms resolve to what is checked against the node itself; ipPrefixCount is v1's own exception
EC2NODECLASS_UNHASHED: Final = frozenset({"subnet_selector_terms", "security_group_selector_terms",
                                          "capacity_reservation_selector_terms", "ami_selector_terms", "ami_family",
                                          "ip_prefix_count"})
ALIAS_FAMILIES: Final = {"al2": "AL2", "al2023": "AL2023", "bottlerocket": "Bottlerocket",
                         "windows2019": "Windows2019", "windows2022": "Windows2022"}

DriftReason = Literal["NodePoolDrifted", "RequirementsDrifted", "NodeClassDrift", "AMIDrift", "ProvisionerDrifted"]


def _taints(taints: Sequence[Taint | V1Alpha5Taint] | None) -> list[list[tuple[str, str]]]:
    """Taints as a set: each reduced to its set fields, then sorted."""
    reduced = [sorted((k, str(v)) for k, v in taint.model_dump(exclude_none=True).items() if v != "")
               for taint in taints or []]
    return sorted(reduced)


def _nanoseconds(duration: str | None, *, nillable: bool) -> int | None:
    if duration is None:
        return None
    value = parse_nillable_duration(duration) if nillable else parse_duration(duration)
    return None if value is None else value // dt.timedelta(microseconds=1) * 1000


def _template_fields(nodepool: NodePool) -> dict[str, Any]:
    """The template's hashed fields, zero values dropped, sets sorted (hashstructure's
    IgnoreZeroValue, ZeroNil and SlicesAsSets)."""
    template = nodepool.spec.template
    spec = template.spec
    metadata = template.metadata
    fields: dict[str, Any] = {
        "labels": dict(sorted((metadata.labels or {}).items())) if metadata else {},
        "annotations": dict(sorted((metadata.annotations or {}).items())) if metadata else {},
        "taints": _taints(spec.taints),
        "startupTaints": _taints(spec.startup_taints),
        "nodeClassRef": spec.node_class_ref.model_dump(),
        "terminationGracePeriod": _nanoseconds(spec.termination_grace_period, nillable=False),
        "expireAfter": _nanoseconds(spec.expire_after, nillable=True),
    }
    return {key: value for key, value in fields.items() if value not in (None, {}, [])}


def nodepool_hash(nodepool: NodePool) -> str:
    """The NodePool template's hash: a decimal uint64, as v1 prints its hashstructure digest."""
    return _digest(_template_fields(nodepool))


def _digest(fields: Any) -> str:
    """A decimal uint64 of `fields` (JSON, keys sorted), as v1 prints its hashstructure digests."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return str(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def _zeroless(value: Any) -> Any:
    """`value` with None, empty maps and empty lists dropped at every depth (hashstructure's IgnoreZeroValue)."""
    if isinstance(value, dict):
        kept = {k: _zeroless(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_zeroless(v) for v in value]
    return value


def ami_family(node_class: EC2NodeClass) -> str | None:
    """The AMI family the class launches: its own, else its alias's (`al2023@latest` -> AL2023)."""
    if node_class.spec.ami_family:
        return str(node_class.spec.ami_family)
    alias = next((t.alias for t in node_class.spec.ami_selector_terms if t.alias), None)
    return ALIAS_FAMILIES.get(alias.split("@")[0].lower()) if alias else None


def ec2nodeclass_hash(node_class: EC2NodeClass) -> str:
    """The EC2NodeClass's hash: its spec less the selector terms, with its resolved AMI family."""
    spec = node_class.spec.model_dump(mode="json", exclude=set(EC2NODECLASS_UNHASHED), exclude_none=True)
    return _digest(_zeroless({"spec": spec, "amiFamily": ami_family(node_class)}))


def ec2nodeclass_hash_annotations(node_class: EC2NodeClass) -> dict[str, str]:
    """The annotations the EC2NodeClass (and every NodeClaim launched with it) carries for drift."""
    return {EC2NODECLASS_HASH: ec2nodeclass_hash(node_class), EC2NODECLASS_HASH_VERSION: EC2NODECLASS_HASH_VERSION_VALUE}


def provisioner_hash(provisioner: Provisioner) -> str:
    """A v1alpha5 Provisioner's hash (v0.21-v0.31's `Provisioner.Hash`): what its nodes are, not how they go."""
    spec = provisioner.spec
    fields = {
        "labels": dict(sorted((spec.labels or {}).items())),
        "taints": _taints(spec.taints),
        "startupTaints": _taints(spec.startup_taints),
        "kubeletConfiguration": spec.kubelet_configuration.model_dump(mode="json", exclude_none=True)
        if spec.kubelet_configuration else None,
        "provider": spec.provider.model_dump(mode="json", exclude_none=True) if spec.provider else None,
        "providerRef": spec.provider_ref.model_dump(mode="json", exclude_none=True) if spec.provider_ref else None,
    }
    return _digest(_zeroless(fields))


def nodepool_hash_annotations(nodepool: NodePool) -> dict[str, str]:
    """The annotations the NodePool (and every NodeClaim launched from it) carries for drift."""
    return {NODEPOOL_HASH: nodepool_hash(nodepool), NODEPOOL_HASH_VERSION: NODEPOOL_HASH_VERSION_VALUE}


def _hash_drifted(owner: Mapping[str, str], claim: Mapping[str, str], *, key: str, version_key: str) -> bool:
    """v1's static drift: both sides carry a hash and the same hash version, and the hashes differ."""
    if not all(k in side for side in (owner, claim) for k in (key, version_key)):
        return False
    return owner[version_key] == claim[version_key] and owner[key] != claim[key]


def _requirement(r: NodeSelectorRequirement) -> Requirement:
    """v1's Gte/Lte as the Gt/Lt the algebra knows (integer bounds: >= n is > n-1)."""
    values = r.values or []
    if r.operator in ("Gte", "Lte") and len(values) == 1 and values[0].lstrip("-").isdigit():
        shifted = int(values[0]) + (-1 if r.operator == "Gte" else 1)
        return Requirement.of(r.key, "Gt" if r.operator == "Gte" else "Lt", [str(shifted)])
    return Requirement.of(r.key, r.operator, values)


def requirements_drifted(nodeclaim: NodeClaim, nodepool: NodePool) -> bool:
    """True when the NodeClaim's labels no longer satisfy every requirement of its NodePool (v1's
    `NewLabelRequirements(labels).Compatible(nodePoolRequirements)`: a required label it lacks is drift)."""
    pool = Requirements(_requirement(r) for r in nodepool.spec.template.spec.requirements)
    return Requirements.from_labels(nodeclaim.metadata.labels).compatible(pool, well_known=frozenset()) is not None


def drifted(nodeclaim: NodeClaim, nodepool: NodePool, *, nodeclass_annotations: Mapping[str, str] | None = None,
            image_ids: Collection[str] | None = None) -> DriftReason | None:
    """The reason `nodeclaim` has drifted from `nodepool` and its EC2NodeClass, or None.

    nodeclass_annotations: the EC2NodeClass's annotations (its hash and hash version); None skips the check.
    image_ids: the AMIs its selection resolves to now; None or empty skips the AMI check (nothing resolved
    is an error to report, not a reason to replace every node)."""
    claim = nodeclaim.metadata.annotations or {}
    if _hash_drifted(nodepool.metadata.annotations or {}, claim, key=NODEPOOL_HASH, version_key=NODEPOOL_HASH_VERSION):
        return "NodePoolDrifted"
    if requirements_drifted(nodeclaim, nodepool):
        return "RequirementsDrifted"
    if nodeclass_annotations is not None and _hash_drifted(
            nodeclass_annotations, claim, key=EC2NODECLASS_HASH, version_key=EC2NODECLASS_HASH_VERSION):
        return "NodeClassDrift"
    image_id = nodeclaim.status.image_id if nodeclaim.status else None
    if image_ids and image_id and image_id not in image_ids:
        return "AMIDrift"
    return None


def provisioner_drifted(provisioner: Provisioner, *, labels: Mapping[str, str],
                        annotations: Mapping[str, str]) -> DriftReason | None:
    """Why the node (or NodeClaim) with `labels` and `annotations` has drifted from its v1alpha5 `provisioner`, or
    None: ProvisionerDrifted when the hash it was launched with differs from the Provisioner's now (one launched
    without a hash is not taken for drifted), RequirementsDrifted when its labels no longer satisfy the
    Provisioner's requirements."""
    launched_with = annotations.get(PROVISIONER_HASH)
    if launched_with is not None and launched_with != provisioner_hash(provisioner):
        return "ProvisionerDrifted"
    wanted = Requirements(Requirement.of(r.key, r.operator, r.values or []) for r in provisioner.spec.requirements or [])
    if Requirements.from_labels(labels).compatible(wanted, well_known=frozenset()) is not None:
        return "RequirementsDrifted"
    return None
