"""karpenter.sh/v1 NodeClaim: Karpenter v1's record of one node, from request to registration.

Also the pieces a NodePool's template shares with it (requirements with
minValues, taints, nodeClassRef). Fields and defaults follow the published
CRD (karpenter.sh_nodeclaims.yaml beside this file). Types only. Pure.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from karpy.apis.meta import Object, Open, ResourceList, Spec

GROUP: Final = "karpenter.sh"
GROUP_VERSION: Final = "karpenter.sh/v1"
KIND: Final = "NodeClaim"
PLURAL: Final = "nodeclaims"
DEFAULT_EXPIRE_AFTER: Final = "720h"

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeSelectorRequirement(Spec):
    """A requirement; `minValues` asks that at least that many values stay possible for flexibility."""

    key: str
    operator: Operator
    values: list[str] | None = None
    min_values: int | None = None


class Taint(Spec):
    key: str
    value: str | None = None
    effect: Effect
    time_added: str | None = None


class NodeClassReference(Spec):
    group: str
    kind: str
    name: str


class ResourceRequirements(Spec):
    requests: ResourceList | None = None


class NodeClaimSpec(Spec):
    taints: list[Taint] | None = None
    startup_taints: list[Taint] | None = None
    requirements: list[NodeSelectorRequirement]
    resources: ResourceRequirements | None = None
    node_class_ref: NodeClassReference
    termination_grace_period: str | None = None
    expire_after: str = DEFAULT_EXPIRE_AFTER


class Condition(Open):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str
    observed_generation: int | None = None


class NodeClaimStatus(Open):
    node_name: str | None = None
    provider_id: str | None = Field(default=None, alias="providerID")
    image_id: str | None = Field(default=None, alias="imageID")
    capacity: ResourceList | None = None
    allocatable: ResourceList | None = None
    conditions: list[Condition] | None = None
    last_pod_event_time: str | None = None


class NodeClaim(Object):
    api_version: Literal["karpenter.sh/v1"] = GROUP_VERSION
    kind: Literal["NodeClaim"] = KIND
    spec: NodeClaimSpec
    status: NodeClaimStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

