"""karpenter.sh/v1 NodePool: what nodes Karpenter v1 may launch, and when it may disrupt them.

Fields and defaults follow the published CRD (karpenter.sh_nodepools.yaml
beside this file): disruption defaults to consolidating empty or
underutilized nodes at once (`consolidateAfter: 0s`) with a budget of 10% of
the nodes, and nodes expire after 720h. Types only. Pure.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from karpy.apis.meta import Object, Open, ResourceList, Spec
from karpy.apis.v1.nodeclaim import DEFAULT_EXPIRE_AFTER, Condition, NodeClassReference, NodeSelectorRequirement, Taint

GROUP: Final = "karpenter.sh"
GROUP_VERSION: Final = "karpenter.sh/v1"
KIND: Final = "NodePool"
PLURAL: Final = "nodepools"
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"

ConsolidationPolicy = Literal["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"]
DisruptionReason = Literal["Underutilized", "Empty", "Drifted"]


class Budget(Spec):
    """At most `nodes` (a count or a percentage) disrupted at once, during `schedule` for `duration` if given."""

    reasons: list[DisruptionReason] | None = None
    nodes: str = "10%"
    schedule: str | None = None
    duration: str | None = None


def _default_budgets() -> list[Budget]:
    return [Budget(nodes="10%")]


class Disruption(Spec):
    consolidate_after: str = "0s"
    consolidation_policy: ConsolidationPolicy = "WhenEmptyOrUnderutilized"
    budgets: list[Budget] = Field(default_factory=_default_budgets)


class TemplateMetadata(Spec):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class NodeClaimTemplateSpec(Spec):
    """A NodeClaim's spec as a NodePool stamps it (no resources: those come from the pods)."""

    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: list[NodeSelectorRequirement]
    node_class_ref: NodeClassReference
    termination_grace_period: str | None = None
    expire_after: str = DEFAULT_EXPIRE_AFTER


class NodeClaimTemplate(Spec):
    metadata: TemplateMetadata | None = None
    spec: NodeClaimTemplateSpec


class NodePoolSpec(Spec):
    template: NodeClaimTemplate
    disruption: Disruption = Field(default_factory=Disruption)
    limits: ResourceList | None = None
    weight: int | None = None
    replicas: int | None = None      # a static NodePool keeps exactly this many nodes


class NodePoolStatus(Open):
    resources: ResourceList | None = None
    nodes: int = 0
    node_class_observed_generation: int | None = None
    conditions: list[Condition] | None = None


class NodePool(Object):
    api_version: Literal["karpenter.sh/v1"] = GROUP_VERSION
    kind: Literal["NodePool"] = KIND
    spec: NodePoolSpec
    status: NodePoolStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""
