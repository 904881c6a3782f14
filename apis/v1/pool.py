"""A karpenter.sh/v1 NodePool read through a Provisioner's fields, so one engine schedules and disrupts both.

The scheduler, the node controllers and consolidation read Provisioners;
`as_provisioner()` gives them a NodePool in those terms:

- `template.metadata.labels` -> labels, `template.spec.{requirements, taints,
  startupTaints}` alike (`Gte n`/`Lte n` as `Gt n-1`/`Lt n+1`), `minValues`
  kept per key, `template.metadata.annotations` put on its nodes;
- `limits`, `weight`, `status.resources` as they are; `nodeClassRef` as the
  provider reference, and the EC2NodeClass's `kubelet` (when given) as the
  kubelet configuration that sizes instance types;
- `expireAfter` -> ttlSecondsUntilExpired (`Never`: none);
- `consolidationPolicy: WhenEmptyOrUnderutilized` (or `Balanced`) ->
  consolidation enabled; `WhenEmpty` -> ttlSecondsAfterEmpty =
  `consolidateAfter` (`Never`: none): the nearest v0.16 behaviour.

Its nodes carry `karpenter.sh/nodepool` instead of `karpenter.sh/provisioner-name`.
The objects are already defaulted (the CRD's defaults are the models'). Pure.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Mapping

import pydantic
from pydantic import Field

from karpy.apis import labels as wk
from karpy.apis.errors import FieldError, from_validation_error
from karpy.apis.meta import ObjectMeta
from karpy.apis.v1 import nodepool as v1
from karpy.apis.v1.disruption.drift import ami_family, ec2nodeclass_hash_annotations, nodepool_hash_annotations
from karpy.apis.v1.duration import parse_nillable_duration
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1alpha1 import AWSSettings
from karpy.apis.v1alpha5 import (
    Consolidation,
    KubeletConfiguration,
    Limits,
    NodeSelectorRequirement,
    ProviderRef,
    Provisioner,
    ProvisionerSpec,
    ProvisionerStatus,
    Taint,
)


def duration_seconds(value: str) -> int | None:
    """A NillableDuration (`720h`, `1h30m`, `Never`) in whole seconds, None for `Never`; raises ValueError."""
    delta = parse_nillable_duration(value)
    return None if delta is None else int(delta.total_seconds())


class NodePoolProvisioner(Provisioner):
    """A NodePool as the engine reads a Provisioner; `node_pool` is the object itself."""

    owner_label: ClassVar[str] = wk.NODEPOOL
    owner_kind: ClassVar[str] = v1.KIND
    node_pool: v1.NodePool = Field(exclude=True)
    # what a node costs reads from its EC2NodeClass (volumes, AMI family), in v1alpha1's shape; None: not given
    node_class_settings: AWSSettings | None = Field(default=None, exclude=True)
    # the EC2NodeClass's hash annotations, stamped on each NodeClaim launched with it (drift); empty: not known
    node_class_hash: dict[str, str] = Field(default_factory=dict, exclude=True)

    @property
    def min_values(self) -> dict[str, int]:
        return {r.key: r.min_values for r in self.node_pool.spec.template.spec.requirements if r.min_values}

    @property
    def node_annotations(self) -> dict[str, str]:
        """The template's annotations, and the hashes drift compares (the NodePool's, the EC2NodeClass's) as v1
        stamps them on every NodeClaim at launch."""
        metadata = self.node_pool.spec.template.metadata
        own = dict(metadata.annotations or {}) if metadata else {}
        return {**own, **nodepool_hash_annotations(self.node_pool), **self.node_class_hash}


def _requirement(r: Any) -> NodeSelectorRequirement:
    """v1's Gte/Lte as the Gt/Lt every engine path knows (integer bounds, so the same set)."""
    if r.operator in ("Gte", "Lte") and len(r.values or []) == 1 and re.fullmatch(r"-?\d+", r.values[0]):
        bound = int(r.values[0])
        operator, value = ("Gt", bound - 1) if r.operator == "Gte" else ("Lt", bound + 1)
        return NodeSelectorRequirement(key=r.key, operator=operator, values=[str(value)])
    return NodeSelectorRequirement(key=r.key, operator=r.operator, values=r.values)


def _kubelet(node_class: EC2NodeClass | None) -> KubeletConfiguration | None:
    k = node_class.spec.kubelet if node_class is not None else None
    if k is None:
        return None
    shared = {"cluster_dns", "max_pods", "pods_per_core", "system_reserved", "kube_reserved", "eviction_hard"}
    return KubeletConfiguration.model_validate(k.model_dump(include=shared, by_alias=True, exclude_none=True))


def _settings(node_class: EC2NodeClass | None) -> AWSSettings | None:
    """The EC2NodeClass's AMI family (its own, else its first alias's: `al2@latest` -> AL2) and volumes."""
    if node_class is None:
        return None
    spec = node_class.spec
    family = ami_family(node_class)
    mappings = [m.model_dump(by_alias=True, exclude_none=True, include={"device_name", "ebs"})
                for m in spec.block_device_mappings or []]
    for m in mappings:
        if "ebs" in m:
            m["ebs"] = {k: v for k, v in m["ebs"].items() if k != "volumeInitializationRate"}
    return AWSSettings.model_validate({"amiFamily": family, "blockDeviceMappings": mappings or None})


def as_provisioner(pool: v1.NodePool, node_class: EC2NodeClass | None = None) -> NodePoolProvisioner:
    """`pool` (defaulted) in a Provisioner's terms; `node_class` is the EC2NodeClass its nodeClassRef names, if
    known. Raises ValueError naming the field a duration in it is malformed at."""
    spec, template = pool.spec, pool.spec.template
    disruption = spec.disruption
    try:
        expire = duration_seconds(template.spec.expire_after)
    except ValueError as e:
        raise ValueError(f"spec.template.spec.expireAfter: {e}") from None
    try:
        after = duration_seconds(disruption.consolidate_after)
    except ValueError as e:
        raise ValueError(f"spec.disruption.consolidateAfter: {e}") from None
    when_empty = disruption.consolidation_policy == "WhenEmpty"
    ref = template.spec.node_class_ref
    status = ProvisionerStatus(resources=pool.status.resources) if pool.status and pool.status.resources else None
    return NodePoolProvisioner(
        metadata=ObjectMeta.model_validate(pool.metadata.model_dump(by_alias=True, exclude_none=True)),
        spec=ProvisionerSpec(
            labels=dict((template.metadata.labels if template.metadata else None) or {}) or None,
            taints=[Taint(**t.model_dump(exclude_none=True)) for t in template.spec.taints or []] or None,
            startup_taints=[Taint(**t.model_dump(exclude_none=True)) for t in template.spec.startup_taints or []] or None,
            requirements=[_requirement(r) for r in template.spec.requirements],
            kubelet_configuration=_kubelet(node_class),
            provider_ref=ProviderRef(api_version=f"{ref.group}/v1", kind=ref.kind, name=ref.name),
            ttl_seconds_until_expired=expire,
            ttl_seconds_after_empty=after if when_empty else None,
            consolidation=None if when_empty else Consolidation(enabled=True),
            limits=Limits(resources=spec.limits) if spec.limits else None,
            weight=spec.weight,
        ),
        status=status,
        node_pool=pool,
        node_class_settings=_settings(node_class),
        node_class_hash=ec2nodeclass_hash_annotations(node_class) if node_class is not None else {},
    )


def read_nodepool(raw: Mapping[str, Any], node_classes: Mapping[str, EC2NodeClass] | None = None
                  ) -> tuple[NodePoolProvisioner | None, list[FieldError]]:
    """The NodePool in `raw` with the CRD's defaults, in a Provisioner's terms (`node_classes`: the EC2NodeClasses
    known, by name); or None and every field that does not decode. (The CRD's CEL rules are the API server's.)"""
    try:
        pool = v1.NodePool.model_validate(raw)
    except pydantic.ValidationError as e:
        return None, from_validation_error(e)
    ref = pool.spec.template.spec.node_class_ref
    node_class = (node_classes or {}).get(ref.name) if ref.kind == "EC2NodeClass" else None
    try:
        return as_provisioner(pool, node_class), []
    except ValueError as e:
        field, _, message = str(e).partition(": ")
        return None, [FieldError(field, message)]
