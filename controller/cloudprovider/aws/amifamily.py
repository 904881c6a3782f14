"""How an EC2NodeClass's amiSelectorTerms name AMIs, as Karpenter v1 reads them: an alias (`family@version`)
is a set of public SSM parameters, each for one variant (standard, NVIDIA, Neuron) of one architecture; other
terms are DescribeImages queries. Of the images found, the newest per set of requirements wins
(non-deprecated first, then creation date, then name). Pure: the node class resolver does the calls."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirements
from karpy.apis.v1.ec2nodeclass import AMISelectorTerm, EC2NodeClass

AWS_INSTANCE_ACCELERATOR_COUNT = "karpenter.k8s.aws/instance-accelerator-count"   # Neuron devices, in v1
NVIDIA_GPU, NEURON = "nvidia.com/gpu", "aws.amazon.com/neuron"
KUBE_ARCH = {"x86_64": wk.ARCH_AMD64, "arm64": wk.ARCH_ARM64}
WINDOWS_BUILD = "node.kubernetes.io/windows-build"
WINDOWS_BUILDS = {"2019": "10.0.17763", "2022": "10.0.20348", "2025": "10.0.26100"}
ALIAS_FAMILIES = {"al2": "AL2", "al2023": "AL2023", "bottlerocket": "Bottlerocket",
                  "windows2019": "Windows2019", "windows2022": "Windows2022", "windows2025": "Windows2025"}
LATEST = "latest"
Obj = dict[str, Any]

# the requirements an image of each variant adds, in the status's form (NodeSelectorRequirements)
STANDARD = ({"key": wk.AWS_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"},
            {"key": AWS_INSTANCE_ACCELERATOR_COUNT, "operator": "DoesNotExist"})
NVIDIA = ({"key": wk.AWS_INSTANCE_GPU_COUNT, "operator": "Exists"},)
NEURON_VARIANT = ({"key": AWS_INSTANCE_ACCELERATOR_COUNT, "operator": "Exists"},)
VARIANTS = {"standard": STANDARD, "nvidia": NVIDIA, "neuron": NEURON_VARIANT}


class AMISelectionError(ValueError):
    """amiSelectorTerms that cannot name an image (a bad alias, a family with no alias); the message says which."""


@dataclasses.dataclass(frozen=True)
class Alias:
    family: str          # the amiFamily, e.g. AL2023
    version: str         # "latest", or a pinned version (vYYYYMMDD for AL2/AL2023, 1.x.y for Bottlerocket)


def alias_of(node_class: EC2NodeClass) -> Alias | None:
    term = next((t for t in node_class.spec.ami_selector_terms if t.alias), None)
    return parse_alias(term.alias) if term is not None and term.alias else None


def parse_alias(alias: str) -> Alias:
    family, sep, version = alias.partition("@")
    if not sep or not version or family.lower() not in ALIAS_FAMILIES:
        raise AMISelectionError(f"amiSelectorTerms alias {alias!r}: expected FAMILY@VERSION with FAMILY one of "
                                f"{', '.join(ALIAS_FAMILIES)}")
    if family.lower().startswith("windows") and version != LATEST:
        raise AMISelectionError(f"amiSelectorTerms alias {alias!r}: Windows aliases take only @latest")
    return Alias(ALIAS_FAMILIES[family.lower()], version)


def ami_family(node_class: EC2NodeClass) -> str:
    """spec.amiFamily, else the alias's family (v1 derives it); Custom when neither says."""
    if node_class.spec.ami_family:
        return node_class.spec.ami_family
    alias = alias_of(node_class)
    return alias.family if alias is not None else "Custom"


Requirement = Mapping[str, Any]
Variants = tuple[tuple[Requirement, ...], ...]        # one set of requirements per variant an image serves


def alias_parameters(alias: Alias, kubernetes_minor: str) -> dict[str, Variants]:
    """SSM parameter name -> the variants its image serves (each a set of requirements), as v1 names them."""
    k8s, version = kubernetes_minor, alias.version
    latest = version == LATEST
    if alias.family == "AL2023":
        out: dict[str, Variants] = {}
        for arch, variants in (("x86_64", ("standard", "nvidia", "neuron")), ("arm64", ("standard", "nvidia"))):
            for variant in variants:
                name = "recommended" if latest else f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{version}"
                out[f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/{name}/image_id"] = \
                    (VARIANTS[variant],)
        return out
    if alias.family == "AL2":
        def path(suffix: str, node: str) -> str:
            name = "recommended" if latest else f"amazon-eks-{node}node-{k8s}-{version}"
            return f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2{suffix}/{name}/image_id"
        return {path("", ""): (STANDARD,), path("-arm64", "arm64-"): (STANDARD,),
                path("-gpu", "gpu-"): (NVIDIA, NEURON_VARIANT)}
    if alias.family == "Bottlerocket":
        v = version.lstrip("v")       # GitHub's tags carry a v, the parameters do not
        base = f"/aws/service/bottlerocket/aws-k8s-{k8s}"
        return {f"{base}/x86_64/{v}/image_id": (STANDARD, NEURON_VARIANT), f"{base}/arm64/{v}/image_id": (STANDARD,),
                f"{base}-nvidia/x86_64/{v}/image_id": (NVIDIA,), f"{base}-nvidia/arm64/{v}/image_id": (NVIDIA,)}
    windows = alias.family.removeprefix("Windows")
    return {f"/aws/service/ami-windows-latest/Windows_Server-{windows}-English-Core-EKS_Optimized-{k8s}/image_id":
            (({"key": wk.OS, "operator": "In", "values": ["windows"]},
              {"key": WINDOWS_BUILD, "operator": "In", "values": [WINDOWS_BUILDS[windows]]}),)}


def describe_images_queries(terms: Sequence[AMISelectorTerm]) -> list[Obj]:
    """DescribeImages arguments for terms that are not aliases: ids together; a name defaults owners to
    self and amazon (no one else's public image by accident); tags `*` match any value."""
    ids = [t.id for t in terms if t.id]
    queries: list[Obj] = []
    for term in terms:
        if term.id or term.alias or term.ssm_parameter:
            continue
        owners = [term.owner] if term.owner else (["self", "amazon"] if term.name else [])
        filters = [{"Name": "name", "Values": [term.name]}] if term.name else []
        filters += tag_filters(term.tags or {})
        queries.append({**({"Owners": owners} if owners else {}), "Filters": filters})
    if ids:
        queries.append({"ImageIds": ids})
    return queries


def tag_filters(tags: Mapping[str, str]) -> list[Obj]:
    """EC2 filters for a selector term's tags: a value of `*` matches any value of the key."""
    return [{"Name": "tag-key", "Values": [k]} if v == "*" else {"Name": f"tag:{k}", "Values": [v]}
            for k, v in sorted(tags.items())]


def image_requirements(image: Mapping[str, Any], known: tuple[Requirement, ...] = ()) -> list[Obj]:
    """An image's requirements: its architecture, and what its alias parameter says it serves."""
    arch = KUBE_ARCH.get(image.get("Architecture", ""), image.get("Architecture", ""))
    return [{"key": wk.ARCH, "operator": "In", "values": [arch]}, *(dict(r) for r in known)]


def newest_per_requirements(candidates: Sequence[tuple[Mapping[str, Any], list[Obj]]], now: dt.datetime) -> list[Obj]:
    """One status AMI per distinct set of requirements: the non-deprecated, newest (by creation date, then
    name) image; in v1's order (newest first)."""
    best: dict[str, tuple[tuple[Any, ...], Obj]] = {}
    for image, requirements in candidates:
        deprecated = _parse(image.get("DeprecationTime"), dt.datetime.max.replace(tzinfo=dt.timezone.utc)) <= now
        rank = (not deprecated, _parse(image.get("CreationDate"), dt.datetime.min.replace(tzinfo=dt.timezone.utc)),
                image.get("Name") or "")
        key = repr(sorted((r["key"], r["operator"], tuple(r.get("values") or ())) for r in requirements))
        if key not in best or rank > best[key][0]:
            ami: Obj = {"id": image["ImageId"], "name": image.get("Name"), "requirements": requirements}
            if deprecated:
                ami["deprecated"] = True
            best[key] = (rank, ami)
    return [ami for _, ami in sorted(best.values(), key=lambda b: b[0], reverse=True)]


def _parse(value: str | None, default: dt.datetime) -> dt.datetime:
    if not value:
        return default
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def instance_labels(requirements: Requirements, capacity: Mapping[str, float]) -> dict[str, str]:
    """The labels an instance type's node has that AMI requirements are about (v1 counts Neuron devices as
    accelerators, not GPUs)."""
    labels = requirements.labels()
    labels.setdefault(wk.OS, wk.OS_LINUX)
    if capacity.get(NEURON, 0) > 0:
        labels.pop(wk.AWS_INSTANCE_GPU_COUNT, None)
        labels[AWS_INSTANCE_ACCELERATOR_COUNT] = str(int(capacity[NEURON] // 1000))
    return labels


def image_for(amis: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> str | None:
    """The first status AMI (newest first) whose requirements a node with `labels` satisfies."""
    for ami in amis:
        if Requirements.from_node_selector_requirements(ami.get("requirements") or []).allows_labels(labels):
            return str(ami["id"])
    return None
