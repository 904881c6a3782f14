"""What a launch asks EC2 for, built from facts: AMI parameter names, user data, the launch template's
content and name, and the CreateFleet request. Pure: the provider does the calls."""

from __future__ import annotations

import base64
import email
import email.message
import hashlib
import json
import tomllib
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from typing import Any, Mapping, Sequence

from karpy.apis import labels as wk

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
                  labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], custom: str | None = None) -> str:
    """The EKS AMI's bootstrap.sh call that joins the node with its labels and taints. Custom user data
    runs first, merged as Karpenter merges it: a MIME multi-part document keeps its parts and gains the
    bootstrap part; anything else becomes a part of its own."""
    node_labels = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    node_taints = ",".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in taints)
    kubelet_args = [f"--node-labels={node_labels}"] if node_labels else []
    if node_taints:
        kubelet_args.append(f"--register-with-taints={node_taints}")
    args = [f"/etc/eks/bootstrap.sh '{cluster}'", f"--apiserver-endpoint '{endpoint}'"]
    if ca_bundle:
        args.append(f"--b64-cluster-ca '{ca_bundle}'")
    if max_pods:
        args.append("--use-max-pods false")
        kubelet_args.append(f"--max-pods={max_pods}")
    args.append("--kubelet-extra-args '" + " ".join(kubelet_args) + "'")
    script = "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n" + \
        " \\\n".join(args) + "\n"
    return _mime(custom, script) if custom else script


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


def bottlerocket_user_data(*, cluster: str, endpoint: str, ca_bundle: str | None, max_pods: int | None,
                           labels: Mapping[str, str], taints: Sequence[Mapping[str, str]], custom: str | None = None) -> str:
    """Bottlerocket's TOML settings that join the node. Custom TOML is kept; the keys that join the node
    (`settings.kubernetes` cluster, endpoint, CA, max pods, labels, taints) are karpy's, as in Karpenter."""
    try:
        settings = tomllib.loads(custom) if custom else {}
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"userData: not valid TOML for amiFamily Bottlerocket: {e}") from None
    kubernetes = settings.setdefault("settings", {}).setdefault("kubernetes", {})
    kubernetes.update({"cluster-name": cluster, "api-server": endpoint})
    if ca_bundle:
        kubernetes["cluster-certificate"] = ca_bundle
    if max_pods:
        kubernetes["max-pods"] = max_pods
    kubernetes["node-labels"] = {**kubernetes.get("node-labels", {}), **dict(labels)}
    node_taints: dict[str, list[str]] = dict(kubernetes.get("node-taints", {}))
    for t in taints:
        node_taints[t["key"]] = [*node_taints.get(t["key"], []), f"{t.get('value', '')}:{t['effect']}"]
    if node_taints:
        kubernetes["node-taints"] = node_taints
    return _toml(settings)


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
                         tags: Mapping[str, str]) -> Obj:
    data: Obj = {
        "ImageId": image_id,
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "SecurityGroupIds": sorted(security_groups),
        # IMDSv2 only, one hop: pods cannot borrow the node's role (Karpenter's default)
        "MetadataOptions": {"HttpEndpoint": (metadata or {}).get("httpEndpoint", "enabled"),
                            "HttpTokens": (metadata or {}).get("httpTokens", "required"),
                            "HttpPutResponseHopLimit": (metadata or {}).get("httpPutResponseHopLimit", 2)},
        "TagSpecifications": [{"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}],
    }
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
