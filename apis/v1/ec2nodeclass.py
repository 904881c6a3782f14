"""karpenter.k8s.aws/v1 EC2NodeClass: how Karpenter v1 launches nodes on AWS (AMIs, subnets, security groups,
role, user data, disks, kubelet).

Fields and defaults follow the published CRD (karpenter.k8s.aws_ec2nodeclasses.yaml
beside this file); the kubelet settings a v1alpha5 Provisioner held live
here in v1. Types only. Pure.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from karpy.apis.meta import Object, Open, ResourceList, Spec
from karpy.apis.v1.nodeclaim import Condition

GROUP: Final = "karpenter.k8s.aws"
GROUP_VERSION: Final = "karpenter.k8s.aws/v1"
KIND: Final = "EC2NodeClass"
PLURAL: Final = "ec2nodeclasses"

AMIFamily = Literal["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"]


class SubnetSelectorTerm(Spec):
    tags: dict[str, str] | None = None
    id: str | None = None


class SecurityGroupSelectorTerm(Spec):
    tags: dict[str, str] | None = None
    id: str | None = None
    name: str | None = None


class CapacityReservationSelectorTerm(Spec):
    tags: dict[str, str] | None = None
    id: str | None = None
    owner_id: str | None = Field(default=None, alias="ownerID")
    instance_match_criteria: Literal["open", "targeted"] | None = None


class AMISelectorTerm(Spec):
    """One way to pick AMIs: an `alias` (family@version, e.g. al2023@latest), an id, a name, tags, or an SSM parameter."""

    alias: str | None = None
    tags: dict[str, str] | None = None
    id: str | None = None
    name: str | None = None
    owner: str | None = None
    ssm_parameter: str | None = None


class PlacementGroupSelector(Spec):
    id: str | None = None
    name: str | None = None


class KubeletConfiguration(Spec):
    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")
    max_pods: int | None = None
    pods_per_core: int | None = None
    system_reserved: ResourceList | None = None
    kube_reserved: ResourceList | None = None
    eviction_hard: dict[str, str] | None = None
    eviction_soft: dict[str, str] | None = None
    eviction_soft_grace_period: dict[str, str] | None = None
    eviction_max_pod_grace_period: int | None = None
    image_gc_high_threshold_percent: int | None = Field(default=None, alias="imageGCHighThresholdPercent")
    image_gc_low_threshold_percent: int | None = Field(default=None, alias="imageGCLowThresholdPercent")
    cpu_cfs_quota: bool | None = Field(default=None, alias="cpuCFSQuota")


class MetadataOptions(Spec):
    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    http_protocol_ipv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    http_put_response_hop_limit: int = 1
    http_tokens: Literal["required", "optional"] = "required"


class BlockDevice(Spec):
    delete_on_termination: bool | None = None
    encrypted: bool | None = None
    iops: int | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    throughput: int | None = None
    volume_initialization_rate: int | None = None
    volume_size: str | None = None
    volume_type: Literal["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"] | None = None


class BlockDeviceMapping(Spec):
    device_name: str | None = None
    ebs: BlockDevice | None = None
    root_volume: bool | None = None


class ConnectionTracking(Spec):
    tcp_established_timeout: int | None = None
    udp_stream_timeout: int | None = None
    udp_timeout: int | None = None


class CPUOptions(Spec):
    nested_virtualization: Literal["enabled", "disabled"] | None = None


class NetworkInterface(Spec):
    network_card_index: int
    device_index: int
    interface_type: Literal["interface", "efa-only"]


class EC2NodeClassSpec(Spec):
    subnet_selector_terms: list[SubnetSelectorTerm]
    security_group_selector_terms: list[SecurityGroupSelectorTerm]
    capacity_reservation_selector_terms: list[CapacityReservationSelectorTerm] | None = None
    placement_group_selector: PlacementGroupSelector | None = None
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    ami_selector_terms: list[AMISelectorTerm]
    ami_family: AMIFamily | None = None
    user_data: str | None = None
    role: str | None = None
    instance_profile: str | None = None
    tags: dict[str, str] | None = None
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: list[BlockDeviceMapping] | None = None
    instance_store_policy: Literal["RAID0"] | None = None
    detailed_monitoring: bool | None = None
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions)
    context: str | None = None
    ip_prefix_count: int | None = Field(default=None, alias="ipPrefixCount")
    network_interfaces: list[NetworkInterface] | None = None
    connection_tracking: ConnectionTracking | None = None
    cpu_options: CPUOptions | None = Field(default=None, alias="cpuOptions")


class Subnet(Open):
    id: str
    zone: str
    zone_id: str | None = Field(default=None, alias="zoneID")


class SecurityGroup(Open):
    id: str
    name: str | None = None


class AMIRequirement(Open):
    key: str
    operator: str
    values: list[str] | None = None


class AMI(Open):
    id: str
    name: str | None = None
    deprecated: bool | None = None
    requirements: list[AMIRequirement]


class CapacityReservation(Open):
    availability_zone: str
    id: str
    instance_match_criteria: Literal["open", "targeted"]
    instance_type: str
    owner_id: str = Field(alias="ownerID")
    end_time: str | None = None
    interruptible: bool | None = None
    reservation_type: Literal["default", "capacity-block"] = "default"
    state: Literal["active", "expiring"] = "active"


class EC2NodeClassStatus(Open):
    subnets: list[Subnet] | None = None
    security_groups: list[SecurityGroup] | None = None
    capacity_reservations: list[CapacityReservation] | None = None
    amis: list[AMI] | None = None
    instance_profile: str | None = None
    conditions: list[Condition] | None = None


class EC2NodeClass(Object):
    api_version: Literal["karpenter.k8s.aws/v1"] = GROUP_VERSION
    kind: Literal["EC2NodeClass"] = KIND
    spec: EC2NodeClassSpec
    status: EC2NodeClassStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""
