"""karpy.dev/v1alpha1 NodeClaim: how earlier versions of karpy recorded a launch, kept for the upgrade.

Launches are now recorded as karpenter.sh/v1 NodeClaims (apis/v1/nodeclaim.py,
apis/launch_record.py). The controller reads claims of this kind once, at
start, and rewrites them as v1 ones (controller/launch/migration.py); its CRD
stays installed until no cluster holds one (docs/launch.md). Types only. Pure.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from karpy.apis.meta import Object, Spec
from karpy.apis.v1alpha5 import NodeSelectorRequirement, Taint

GROUP = "karpy.dev"
GROUP_VERSION: Final = "karpy.dev/v1alpha1"
KIND: Final = "NodeClaim"
PLURAL = "nodeclaims"


class PodReference(Spec):
    namespace: str
    name: str
    uid: str | None = None


class NodeClaimSpec(Spec):
    provisioner: str = ""
    requirements: list[NodeSelectorRequirement] | None = None     # the provisioner's, narrowed by the pods'
    instance_types: list[str] | None = None                        # the options, cheapest first
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    taints: list[Taint] | None = None
    pods: list[PodReference] | None = None                         # bound to the node once it exists
    bind: bool = True                                              # False for replacements: kube-scheduler places those pods


class NodeClaimStatus(Spec):
    provider_id: str | None = Field(default=None, alias="providerID")
    node_name: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    node_created: bool | None = None       # the Node was written (so a Node gone since means the node was deleted)
    pods_bound: bool | None = None


class NodeClaim(Object):
    api_version: Literal["karpy.dev/v1alpha1"] = GROUP_VERSION
    kind: Literal["NodeClaim"] = KIND
    spec: NodeClaimSpec = Field(default_factory=NodeClaimSpec)
    status: NodeClaimStatus | None = None
