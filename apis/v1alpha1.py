"""karpenter.k8s.aws/v1alpha1: the AWS settings of a node, inline or as an AWSNodeTemplate.

`AWS` is the block a Provisioner may carry inline as `spec.provider`;
`AWSNodeTemplateSpec` is the same block plus `userData` and `amiSelector`,
referenced by `spec.providerRef`. Types only; rules live in
`apis/awsnodetemplate_validation.py`. Pure.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from karpy.apis.meta import Object, Open, QuantityStr, Spec

AWS_GROUP_VERSION: Final = "karpenter.k8s.aws/v1alpha1"
AWS_NODE_TEMPLATE_KIND: Final = "AWSNodeTemplate"

AMI_FAMILY_AL2 = "AL2"
AMI_FAMILY_BOTTLEROCKET = "Bottlerocket"
AMI_FAMILY_UBUNTU = "Ubuntu"
AMI_FAMILY_CUSTOM = "Custom"
AMI_FAMILIES: tuple[str, ...] = (AMI_FAMILY_AL2, AMI_FAMILY_BOTTLEROCKET, AMI_FAMILY_UBUNTU, AMI_FAMILY_CUSTOM)
VOLUME_TYPES: tuple[str, ...] = ("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3")


class MetadataOptions(Spec):
    http_endpoint: str | None = None
    http_protocol_ipv6: str | None = Field(default=None, alias="httpProtocolIPv6")
    http_put_response_hop_limit: int | None = None
    http_tokens: str | None = None


class BlockDevice(Spec):
    delete_on_termination: bool | None = None
    encrypted: bool | None = None
    iops: int | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    throughput: int | None = None
    volume_size: QuantityStr | None = None
    volume_type: str | None = None


class BlockDeviceMapping(Spec):
    device_name: str | None = None
    ebs: BlockDevice | None = None


class AWSSettings(Spec):
    """What the inline `provider` block and an AWSNodeTemplate's spec share."""

    ami_family: str | None = None
    context: str | None = None
    instance_profile: str | None = None
    subnet_selector: dict[str, str] | None = None
    security_group_selector: dict[str, str] | None = None
    tags: dict[str, str] | None = None
    launch_template_name: str | None = Field(default=None, alias="launchTemplate")
    metadata_options: MetadataOptions | None = None
    block_device_mappings: list[BlockDeviceMapping] | None = None


class AWS(AWSSettings):
    """The inline `provider` block of a Provisioner."""

    api_version: str | None = None  # Karpenter's inline blocks may carry these two
    kind: str | None = None


class AWSNodeTemplateSpec(AWSSettings):
    user_data: str | None = None
    ami_selector: dict[str, str] | None = None


class AWSNodeTemplateStatus(Open):
    subnets: list[dict[str, Any]] | None = None
    security_groups: list[dict[str, Any]] | None = None
    amis: list[dict[str, Any]] | None = None


class AWSNodeTemplate(Object):
    api_version: Literal["karpenter.k8s.aws/v1alpha1"] = AWS_GROUP_VERSION
    kind: Literal["AWSNodeTemplate"] = AWS_NODE_TEMPLATE_KIND
    spec: AWSNodeTemplateSpec = Field(default_factory=AWSNodeTemplateSpec)
    status: AWSNodeTemplateStatus | None = None
