"""karpenter.sh/v1alpha5: the Provisioner.

Every field of Karpenter v0.16's Provisioner, as pydantic models with the
wire names as aliases. Types only: validation is in
`apis/provisioner_validation.py`, defaulting in `apis/provisioner_defaults.py`.
Pure.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from pydantic import Field

from karpy.apis import labels as wk
from karpy.apis.meta import Object, Open, ResourceList, Spec
from karpy.apis.requirements import Requirements
from karpy.apis.v1alpha1 import AWS

GROUP_VERSION: Final = "karpenter.sh/v1alpha5"
PROVISIONER_KIND: Final = "Provisioner"


class Taint(Spec):
    key: str = ""
    value: str | None = None
    effect: str = ""
    time_added: str | None = None


class NodeSelectorRequirement(Spec):
    key: str
    operator: str
    values: list[str] | None = None


class KubeletConfiguration(Spec):
    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")
    container_runtime: str | None = None
    max_pods: int | None = None
    pods_per_core: int | None = None
    system_reserved: ResourceList | None = None
    kube_reserved: ResourceList | None = None
    eviction_hard: dict[str, str] | None = None


class ProviderRef(Spec):
    api_version: str | None = None
    kind: str | None = None
    name: str


class Limits(Spec):
    resources: ResourceList | None = None


class Consolidation(Spec):
    enabled: bool | None = None


class ProvisionerSpec(Spec):
    labels: dict[str, str] | None = None
    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: list[NodeSelectorRequirement] | None = None
    kubelet_configuration: KubeletConfiguration | None = None
    provider: AWS | None = None
    provider_ref: ProviderRef | None = None
    ttl_seconds_after_empty: int | None = None
    ttl_seconds_until_expired: int | None = None
    limits: Limits | None = None
    weight: int | None = None
    consolidation: Consolidation | None = None


class ProvisionerStatus(Open):
    last_scale_time: str | None = None
    conditions: list[dict[str, Any]] | None = None
    resources: ResourceList | None = None


class Provisioner(Object):
    api_version: Literal["karpenter.sh/v1alpha5"] = GROUP_VERSION
    kind: Literal["Provisioner"] = PROVISIONER_KIND
    spec: ProvisionerSpec = Field(default_factory=ProvisionerSpec)
    status: ProvisionerStatus | None = None

    # What the engine reads beyond v0.16's fields, so a v1 NodePool (apis/v1/pool.py) schedules through the same path:
    # the label naming its nodes' owner, the owner's kind, and v1's per-key minValues and node annotations.
    owner_label: ClassVar[str] = wk.PROVISIONER_NAME
    owner_kind: ClassVar[str] = PROVISIONER_KIND

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def min_values(self) -> dict[str, int]:
        return {}

    @property
    def node_annotations(self) -> dict[str, str]:
        """Nothing in v0.16. With the Drift feature gate the controller stamps `karpenter.sh/provisioner-hash` on
        the Provisioner (as v0.21-v0.31 did); then each node is launched with the hash of the spec it came from."""
        from karpy.apis.v1.disruption.drift import PROVISIONER_HASH, provisioner_hash  # drift reads this module

        if PROVISIONER_HASH not in (self.metadata.annotations or {}):
            return {}
        return {PROVISIONER_HASH: provisioner_hash(self)}

    def node_requirements(self) -> Requirements:
        """The provisioner's requirements and labels as one requirement set.

        Assumes a validated object (operators known)."""
        spec = self.spec
        reqs = Requirements.from_node_selector_requirements(
            [r.model_dump(exclude_none=True) for r in spec.requirements or []]
        )
        for r in Requirements.from_labels(spec.labels).values():
            reqs.add(r)
        return reqs
