"""What a launch asks EC2 for, built from facts: AMI parameter names, user data, the launch template's
content and name, and the CreateFleet request. Pure: the provider does the calls."""

from __future__ import annotations

import base64
import dataclasses
import email
import email.message
import hashlib
import json
import tomllib
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from typing import Any, Mapping, Sequence

import yaml

from karpy.apis import labels as wk
from karpy.apis.quantity import Quantity
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.controller.cloudprovider.aws.amifamily import ami_family, image_for, instance_labels
from karpy.controller.cloudprovider.types import InstanceType

MIME_BOUNDARY = "//"                 # Karpenter's, so merged documents look the same
MAX_OVERRIDES = 60                   # CreateFleet takes at most this many instance type x subnet overrides
Obj = dict[str, Any]


def ami_parameter(family: str, kubernetes_minor: str, arch: str, *, nvidia_gpu: bool = False, neuron: bool = False) -> str:
    """The public SSM parameter EKS publishes the family's recommended AMI under, for one kind of machine.

    As Karpenter v0.16 chose: AL2 takes its `-gpu` image for NVIDIA GPUs and for Inferentia (Neuron), else
    `-arm64` on Graviton; Bottlerocket its `-nvidia` variant for NVIDIA GPUs, per architecture; Ubuntu
    one image per architecture."""
    family = family or "AL2"
    if family == "AL2":
        suffix = "-gpu" if nvidia_gpu or neuron else "-arm64" if arch == wk.ARCH_ARM64 else ""
        return f"/aws/service/eks/optimized-ami/{kubernetes_minor}/amazon-linux-2{suffix}/recommended/image_id"
    if family == "Bottlerocket":
        variant = f"aws-k8s-{kubernetes_minor}" + ("-nvidia" if nvidia_gpu else "")
        machine = "arm64" if arch == wk.ARCH_ARM64 else "x86_64"
        return f"/aws/service/bottlerocket/{variant}/{machine}/latest/image_id"
    if family == "Ubuntu":
        machine = "arm64" if arch == wk.ARCH_ARM64 else "amd64"
        return f"/aws/service/canonical/ubuntu/eks/20.04/{kubernetes_minor}/stable/current/{machine}/hvm/ebs-gp2/ami-id"
    raise ValueError(f"amiFamily {family!r} has no public AMI parameter (Custom needs amiSelector)")


def group_by_image(images: Mapping[str, str]) -> dict[str, list[str]]:
    """instance type -> AMI, turned into AMI -> its instance types (in the order given): one launch template each."""
    groups: dict[str, list[str]] = {}
    for instance_type, image in images.items():
        groups.setdefault(image, []).append(instance_type)
    return groups


def al2_user_data(*, cluster: str, endpoint: str, ca_bundle: str | None, max_pods: int | None,
                  labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], custom: str | None = None,
                  kubelet: Mapping[str, Any] | None = None) -> str:
    """The EKS AMI's bootstrap.sh call that joins the node with its labels and taints. Custom user data
    runs first, merged as Karpenter merges it: a MIME multi-part document keeps its parts and gains the
    bootstrap part; anything else becomes a part of its own. `kubelet` (an EC2NodeClass's, by its API
    names) becomes kubelet flags, its clusterDNS bootstrap.sh's --dns-cluster-ip."""
    node_labels = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    node_taints = ",".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in taints)
    kubelet_args = [f"--node-labels={node_labels}"] if node_labels else []
    if node_taints:
        kubelet_args.append(f"--register-with-taints={node_taints}")
    args = [f"/etc/eks/bootstrap.sh '{cluster}'", f"--apiserver-endpoint '{endpoint}'"]
    if ca_bundle:
        args.append(f"--b64-cluster-ca '{ca_bundle}'")
    kubelet = dict(kubelet or {})
    if kubelet.get("clusterDNS"):
        args.append(f"--dns-cluster-ip '{kubelet['clusterDNS'][0]}'")
    kubelet_args += kubelet_flags(kubelet)
    max_pods = kubelet.get("maxPods", max_pods)
    if max_pods:
        args.append("--use-max-pods false")
        kubelet_args.append(f"--max-pods={max_pods}")
    args.append("--kubelet-extra-args '" + " ".join(kubelet_args) + "'")
    script = "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n" + \
        " \\\n".join(args) + "\n"
    return _mime(custom, script) if custom else script


KUBELET_FLAGS = {"podsPerCore": "pods-per-core", "systemReserved": "system-reserved", "kubeReserved": "kube-reserved",
                 "evictionHard": "eviction-hard", "evictionSoft": "eviction-soft",
                 "evictionSoftGracePeriod": "eviction-soft-grace-period",
                 "evictionMaxPodGracePeriod": "eviction-max-pod-grace-period",
                 "imageGCHighThresholdPercent": "image-gc-high-threshold", "imageGCLowThresholdPercent": "image-gc-low-threshold",
                 "cpuCFSQuota": "cpu-cfs-quota"}


def kubelet_flags(kubelet: Mapping[str, Any]) -> list[str]:
    """Kubelet command-line flags for an EC2NodeClass's kubelet settings (maps as key=value,key=value)."""
    flags = []
    for field, flag in KUBELET_FLAGS.items():
        value = kubelet.get(field)
        if value is None:
            continue
        if isinstance(value, Mapping):
            # thresholds read signal<quantity; reservations and grace periods key=value
            sep = "<" if field in ("evictionHard", "evictionSoft") else "="
            value = ",".join(f"{k}{sep}{v}" for k, v in sorted(value.items()))
        elif isinstance(value, bool):
            value = str(value).lower()
        flags.append(f"--{flag}={value}")
    return flags


def _mime(custom: str, script: str) -> str:
    """`custom` (MIME multi-part, or a single document) and then `script`, as one MIME multi-part document."""
    document = MIMEMultipart(boundary=MIME_BOUNDARY)
    parsed = email.message_from_string(custom) if custom.lstrip().startswith("MIME-Version") else None
    if parsed is not None and parsed.is_multipart():
        parts = [p for p in parsed.get_payload() if isinstance(p, email.message.Message)]
    else:
        parts = [MIMEText(custom, "cloud-config" if custom.startswith("#cloud-config") else "x-shellscript")]
    for part in parts + [MIMEText(script, "x-shellscript")]:
        document.attach(part)
    return document.as_string()


BOTTLEROCKET_KUBELET = {"clusterDNS": "cluster-dns-ip", "podsPerCore": "pods-per-core", "systemReserved": "system-reserved",
                        "kubeReserved": "kube-reserved", "evictionHard": "eviction-hard", "evictionSoft": "eviction-soft",
                        "evictionSoftGracePeriod": "eviction-soft-grace-period",
                        "evictionMaxPodGracePeriod": "eviction-max-pod-grace-period",
                        "imageGCHighThresholdPercent": "image-gc-high-threshold-percent",
                        "imageGCLowThresholdPercent": "image-gc-low-threshold-percent",
                        "cpuCFSQuota": "cpu-cfs-quota-enforced"}


def bottlerocket_user_data(*, cluster: str, endpoint: str, ca_bundle: str | None, max_pods: int | None,
                           labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], custom: str | None = None,
                           kubelet: Mapping[str, Any] | None = None) -> str:
    """Bottlerocket's TOML settings that join the node. Custom TOML is kept; the keys that join the node
    (`settings.kubernetes` cluster, endpoint, CA, max pods, labels, taints, and an EC2NodeClass's kubelet
    settings) are karpy's, as in Karpenter."""
    try:
        settings = tomllib.loads(custom) if custom else {}
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"userData: not valid TOML for amiFamily Bottlerocket: {e}") from None
    kubernetes = settings.setdefault("settings", {}).setdefault("kubernetes", {})
    kubernetes.update({"cluster-name": cluster, "api-server": endpoint})
    if ca_bundle:
        kubernetes["cluster-certificate"] = ca_bundle
    kubelet = dict(kubelet or {})
    for field, key in BOTTLEROCKET_KUBELET.items():
        if kubelet.get(field) is not None:
            value = kubelet[field]
            kubernetes[key] = value[0] if field == "clusterDNS" else dict(value) if isinstance(value, Mapping) else value
    max_pods = kubelet.get("maxPods", max_pods)
    if max_pods:
        kubernetes["max-pods"] = max_pods
    kubernetes["node-labels"] = {**kubernetes.get("node-labels", {}), **dict(labels)}
    node_taints: dict[str, list[str]] = dict(kubernetes.get("node-taints", {}))
    for t in taints:
        node_taints[t["key"]] = [*node_taints.get(t["key"], []), f"{t.get('value', '')}:{t['effect']}"]
    if node_taints:
        kubernetes["node-taints"] = node_taints
    return _toml(settings)


NODEADM_CONTENT_TYPE = "application/node.eks.aws"
SHELL_CONTENT_TYPE = 'text/x-shellscript; charset="us-ascii"'


def al2023_user_data(*, cluster: str, endpoint: str, ca_bundle: str | None, cidr: str | None, max_pods: int | None,
                     labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], custom: str | None = None,
                     kubelet: Mapping[str, Any] | None = None) -> str:
    """AL2023's nodeadm user data, as Karpenter v1 writes it: a MIME multi-part document of the custom parts
    (a MIME document's own parts; else one part, a NodeConfig when it parses as YAML, a shell script otherwise),
    then karpy's NodeConfig with the cluster's name, endpoint, CA and service CIDR, the kubelet settings
    (registerWithTaints always) and the node's labels as a kubelet flag. nodeadm merges the NodeConfigs."""
    if not cidr:
        raise ValueError("AL2023 needs the cluster's service CIDR (--cluster-cidr) for its NodeConfig")
    config: Obj = {**(kubelet or {})}
    config.pop("clusterDNS", None)
    if kubelet and kubelet.get("clusterDNS"):
        config["clusterDNS"] = list(kubelet["clusterDNS"])
    if max_pods and "maxPods" not in config:
        config["maxPods"] = max_pods
    config["registerWithTaints"] = [dict(t) for t in taints]
    cluster_spec: Obj = {"apiServerEndpoint": endpoint, "cidr": cidr, "name": cluster}
    if ca_bundle:
        cluster_spec["certificateAuthority"] = ca_bundle      # base64 already, as NodeConfig's bytes marshal
    kubelet_spec: Obj = {"config": config}
    if labels:
        kubelet_spec["flags"] = ["--node-labels=" + json.dumps(",".join(f"{k}={v}" for k, v in sorted(labels.items())))]
    node_config = {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
                   "spec": {"cluster": cluster_spec, "kubelet": kubelet_spec}}
    entries = _custom_entries(custom) if custom else []
    entries.append((NODEADM_CONTENT_TYPE, "# Karpenter Generated NodeConfig\n" + yaml.safe_dump(node_config, sort_keys=True)))
    return mime_archive(entries)


def _custom_entries(custom: str) -> list[tuple[str, str]]:
    if custom.lstrip().startswith(("MIME-Version:", "Content-Type:")):
        parsed = email.message_from_string(custom.lstrip())
        if not parsed.is_multipart():
            raise ValueError("userData: a MIME document that is not multi-part")
        return [(p.get("Content-Type", SHELL_CONTENT_TYPE), str(p.get_payload()))
                for p in parsed.get_payload() if isinstance(p, email.message.Message)]
    try:
        is_yaml = isinstance(yaml.safe_load(custom), dict)
    except yaml.YAMLError:
        is_yaml = False
    return [(NODEADM_CONTENT_TYPE if is_yaml else SHELL_CONTENT_TYPE, custom)]


def mime_archive(entries: Sequence[tuple[str, str]]) -> str:
    """A MIME multi-part document laid out byte for byte as Karpenter's (boundary `//`, LF line ends)."""
    out = f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n\n'
    for i, (content_type, content) in enumerate(entries):
        out += ("\n" if i else "") + f"--{MIME_BOUNDARY}\nContent-Type: {content_type}\n\n{content}"
    return out + f"\n--{MIME_BOUNDARY}--\n"


def _toml(table: Mapping[str, Any], prefix: str = "") -> str:
    """A TOML document for nested tables of strings, numbers, booleans and lists of them."""
    lines, tables = [], []
    for key, value in table.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    out = (f"[{prefix}]\n" if prefix and lines else "") + "".join(line + "\n" for line in lines)
    for key, value in tables:
        out += ("\n" if out else "") + _toml(value, f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key))
    return out


def _toml_key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))      # a JSON string is a TOML basic string


def launch_template_data(*, image_id: str, user_data: str, instance_profile: str | None, security_groups: Sequence[str],
                         metadata: Mapping[str, Any] | None, block_devices: Sequence[Mapping[str, Any]] | None,
                         tags: Mapping[str, str], tagged: Sequence[str] = ("volume",)) -> Obj:
    """`tagged`: the resources the template tags (the instance's own tags come with the fleet request in v0.16)."""
    data: Obj = {
        "ImageId": image_id,
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "SecurityGroupIds": sorted(security_groups),
        # IMDSv2 only, one hop: pods cannot borrow the node's role (Karpenter's default)
        "MetadataOptions": {"HttpEndpoint": (metadata or {}).get("httpEndpoint", "enabled"),
                            "HttpTokens": (metadata or {}).get("httpTokens", "required"),
                            "HttpPutResponseHopLimit": (metadata or {}).get("httpPutResponseHopLimit", 2)},
        "TagSpecifications": [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}
                              for kind in tagged],
    }
    if (metadata or {}).get("httpProtocolIPv6"):
        data["MetadataOptions"]["HttpProtocolIpv6"] = metadata["httpProtocolIPv6"]  # type: ignore[index]
    if instance_profile:
        data["IamInstanceProfile"] = {"Name": instance_profile}
    if block_devices:
        data["BlockDeviceMappings"] = [
            {"DeviceName": b["deviceName"], "Ebs": {k[0].upper() + k[1:]: v for k, v in (b.get("ebs") or {}).items()}}
            for b in block_devices]
    return data


def launch_template_name(cluster: str, data: Mapping[str, Any]) -> str:
    """Same content, same name: templates are reused, and a changed one is a new one."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return f"karpy/{cluster}/{digest}"


def fleet_request(*, templates: Mapping[str, str], overrides: Sequence[tuple[str, str, str, float]], capacity_type: str,
                  tags: Mapping[str, str]) -> Obj:
    """CreateFleet `instant` for one instance. `overrides` are (instance type, subnet, zone, price), cheapest first;
    `templates` names each instance type's launch template (instance types with different AMIs need different
    templates): one launch template config per template, the one holding the cheapest override first.
    The fleet launcher sets the ClientToken and the capacity of the batch."""
    chosen = list(overrides)[:MAX_OVERRIDES]
    configs: dict[str, list[Obj]] = {}
    for i, (t, s, z, _) in enumerate(chosen):
        configs.setdefault(templates[t], []).append(
            {"InstanceType": t, "SubnetId": s, "AvailabilityZone": z,
             **({"Priority": float(i)} if capacity_type == wk.CAPACITY_TYPE_ON_DEMAND else {})})
    request: Obj = {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {"LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"}, "Overrides": config_overrides}
            for name, config_overrides in configs.items()],
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}],
    }
    if capacity_type == wk.CAPACITY_TYPE_SPOT:
        request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
    else:
        request["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
    return request


# --- an EC2NodeClass's launch ------------------------------------------------------------------
NODE_CLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
NODE_POOL_TAG = "karpenter.sh/nodepool"
EKS_CLUSTER_NAME_TAG = "eks:eks-cluster-name"
# keys Karpenter v1 keeps for itself: a node class may not set them
RESERVED_TAGS = (EKS_CLUSTER_NAME_TAG, NODE_POOL_TAG, "karpenter.sh/nodeclaim", NODE_CLASS_TAG)
GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class ClusterFacts:
    """What user data needs of the cluster."""
    name: str
    endpoint: str
    ca_bundle: str | None = None
    cidr: str | None = None            # the service CIDR, which AL2023's NodeConfig needs


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """One launch from a NodePool: what the node is to carry, and the instance types it may be."""
    node_pool: str
    instance_types: Sequence[InstanceType]
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]


def nodeclass_subnet(node_class: EC2NodeClass, zone: str) -> str:
    """The status subnet to launch into in `zone` (see nodeclass_subnets)."""
    subnet = nodeclass_subnets(node_class).get(zone)
    if subnet is None:
        raise ValueError(f"EC2NodeClass {node_class.name}: no subnet in its status is in zone {zone}")
    return subnet


def nodeclass_subnets(node_class: EC2NodeClass) -> dict[str, str]:
    """zone -> the status subnet to launch into there: the first listed (the one with the most free addresses)."""
    out: dict[str, str] = {}
    for s in (node_class.status.subnets if node_class.status else None) or []:
        out.setdefault(s.zone, s.id)
    return out


def nodeclass_tags(node_class: EC2NodeClass, cluster: str, node_pool: str) -> dict[str, str]:
    """The node class's tags, refused when they name a key v1 reserves, then the ones karpy needs."""
    tags = dict(node_class.spec.tags or {})
    bad = sorted(k for k in tags if k in RESERVED_TAGS or k.startswith("kubernetes.io/cluster"))
    if bad:
        raise ValueError(f"EC2NodeClass {node_class.name}: spec.tags may not set {', '.join(bad)} (karpy sets them)")
    return {**tags, f"kubernetes.io/cluster/{cluster}": "owned", EKS_CLUSTER_NAME_TAG: cluster,
            NODE_POOL_TAG: node_pool, NODE_CLASS_TAG: node_class.name}


def ec2_block_devices(node_class: EC2NodeClass, family: str) -> list[Obj]:
    """spec.blockDeviceMappings (sizes in GiB, as EC2 takes them), else the family's v1 default disks."""
    mappings = node_class.spec.block_device_mappings
    if not mappings:
        if family == "Bottlerocket":
            return [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 4, "volumeType": "gp3", "encrypted": True}},
                    {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": 20, "volumeType": "gp3", "encrypted": True}}]
        if family.startswith("Windows"):
            return [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 50, "volumeType": "gp3", "encrypted": True}}]
        return [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 20, "volumeType": "gp3", "encrypted": True}}]
    out = []
    for m in mappings:
        ebs: Obj = {}
        if m.ebs is not None:
            e = m.ebs
            fields = {"deleteOnTermination": e.delete_on_termination, "encrypted": e.encrypted, "iops": e.iops,
                      "kmsKeyId": e.kms_key_id, "snapshotId": e.snapshot_id, "throughput": e.throughput,
                      "volumeType": e.volume_type,
                      "volumeSize": -(-Quantity.parse(e.volume_size).value // GIB) if e.volume_size else None}
            ebs = {k: (int(v) if k == "volumeSize" else v) for k, v in fields.items() if v is not None}
        out.append({"deviceName": m.device_name, "ebs": ebs})
    return out


def nodeclass_launch_templates(node_class: EC2NodeClass, cluster: ClusterFacts, launch: LaunchSpec) -> dict[str, tuple[Obj, list[str]]]:
    """Launch template data for a launch from an EC2NodeClass whose status is resolved: one template per AMI
    (each instance type gets the newest status AMI whose requirements it meets), with the security groups,
    instance profile, user data merged with the node class's, disks, metadata options and tags. Returns
    launch template name -> (data, instance types). Instance types no AMI fits are left out; none fitting
    is an error naming the node class."""
    status = node_class.status
    if status is None or not status.amis or not status.security_groups or not status.instance_profile:
        raise ValueError(f"EC2NodeClass {node_class.name} is not ready: its status has no "
                         + ("AMIs" if status is None or not status.amis else
                            "security groups" if not status.security_groups else "instance profile"))
    amis = [a.model_dump(by_alias=True, exclude_none=True) for a in status.amis]
    images: dict[str, str] = {}
    for it in launch.instance_types:
        image = image_for(amis, instance_labels(it.requirements, it.capacity))
        if image is not None:
            images[it.name] = image
    if not images:
        raise ValueError(f"EC2NodeClass {node_class.name}: no AMI in its status fits any of "
                         f"{', '.join(t.name for t in launch.instance_types)}")
    family = ami_family(node_class)
    kubelet = node_class.spec.kubelet.model_dump(by_alias=True, exclude_none=True) if node_class.spec.kubelet else None
    labels = {**launch.labels, NODE_POOL_TAG: launch.node_pool}
    tags = nodeclass_tags(node_class, cluster.name, launch.node_pool)
    by_name = {t.name: t for t in launch.instance_types}
    out: dict[str, tuple[Obj, list[str]]] = {}
    for image, members in group_by_image(images).items():
        max_pods = min((int(by_name[m].capacity.get("pods", 0) // 1000) for m in members), default=None)
        user_data = nodeclass_user_data(family, cluster, node_class.spec.user_data, kubelet=kubelet, max_pods=max_pods,
                                        labels=labels, taints=launch.taints)
        data = launch_template_data(
            image_id=image, user_data=user_data, instance_profile=status.instance_profile,
            security_groups=[g.id for g in status.security_groups],
            metadata=node_class.spec.metadata_options.model_dump(by_alias=True, exclude_none=True),
            block_devices=ec2_block_devices(node_class, family), tags=tags, tagged=("instance", "volume"))
        if node_class.spec.detailed_monitoring:
            data["Monitoring"] = {"Enabled": True}
        out[launch_template_name(cluster.name, data)] = (data, members)
    return out


def nodeclass_user_data(family: str, cluster: ClusterFacts, custom: str | None, *, kubelet: Mapping[str, Any] | None,
                        max_pods: int | None, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]]) -> str:
    """The family's joining user data with the node class's merged in as v1 merges it; Custom is used as is."""
    join = dict(cluster=cluster.name, endpoint=cluster.endpoint, ca_bundle=cluster.ca_bundle, max_pods=max_pods,
                labels=labels, taints=taints, custom=custom, kubelet=kubelet)
    if family == "AL2023":
        return al2023_user_data(cidr=cluster.cidr, **join)  # type: ignore[arg-type]
    if family == "Bottlerocket":
        return bottlerocket_user_data(**join)  # type: ignore[arg-type]
    if family == "AL2":
        return al2_user_data(**join)  # type: ignore[arg-type]
    if family == "Custom":
        return custom or ""
    raise ValueError(f"amiFamily {family}: karpy writes no user data for it (use amiFamily Custom with your own)")
