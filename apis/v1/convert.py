"""v1alpha5 -> v1: Provisioners become NodePools, AWSNodeTemplates (and inline `provider` blocks) EC2NodeClasses.

The mapping is Karpenter's `karpenter-convert` (v0.32-v0.37), written for
v1's shapes:

- the Provisioner is first defaulted as v0.16's webhook defaults it
  (capacity type on-demand, architecture amd64) and must validate;
- `ttlSecondsUntilExpired` -> `template.spec.expireAfter` (absent: `Never`,
  as v0.16 never expired nodes); `consolidation.enabled` ->
  `consolidationPolicy: WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`;
  `ttlSecondsAfterEmpty` -> `WhenEmpty` after that long; neither ->
  `WhenEmpty` after `Never` (v0.16 removed no node on its own);
- labels -> `template.metadata.labels`; taints, startup taints and
  requirements -> `template.spec`; `limits.resources` -> `limits`;
  `providerRef` (or the inline `provider`, which becomes an EC2NodeClass
  named after the Provisioner; with neither, the NodePool refers to an
  EC2NodeClass of its own name, left to write) -> `nodeClassRef` with group
  and kind;
- `kubeletConfiguration` -> the EC2NodeClass's `kubelet`, where v1 keeps
  it: Provisioners that share an AWSNodeTemplate must agree on it, and the
  template must be among the inputs;
- selectors -> selector terms (`aws-ids`/`aws::ids`, `aws::name`,
  `aws::owners` and comma-separated values expand into several terms; ids
  stand alone, as v1 asks);
  no `amiSelector` -> the alias `<family>@latest`; the node role is left as
  the placeholder `$KARPENTER_NODE_ROLE` unless an instance profile is named.

Other documents pass through unchanged. Only name, labels and annotations
of the old objects' metadata carry over (not kubectl's last-applied
annotation), so `kubectl get provisioners -o yaml` output converts too. Pure.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from typing import Any, Mapping, Sequence

from karpy.apis.awsnodetemplate_validation import read_awsnodetemplate, validate_aws
from karpy.apis.errors import FieldError
from karpy.apis.provisioner_defaults import default_provisioner
from karpy.apis.provisioner_validation import read_provisioner
from karpy.apis.v1 import ec2nodeclass, nodepool
from karpy.apis.v1.duration import NEVER
from karpy.apis.v1alpha1 import AWS_GROUP_VERSION, AWS_NODE_TEMPLATE_KIND, AWSSettings
from karpy.apis.v1alpha5 import GROUP_VERSION as V1ALPHA5
from karpy.apis.v1alpha5 import PROVISIONER_KIND, KubeletConfiguration, Provisioner

NODE_ROLE_PLACEHOLDER = "$KARPENTER_NODE_ROLE"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# v1's AMI aliases, by the v1alpha1 family they stand for (Ubuntu has none: v1 dropped it).
ALIASES = {"AL2": "al2", "Bottlerocket": "bottlerocket"}


@dataclasses.dataclass(frozen=True)
class Problem:
    index: int               # the document's position in the input, from 0
    error: FieldError


class ConvertError(ValueError):
    """Documents that cannot be converted; `problems` names each, with its field."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(f"document {p.index + 1}: {p.error}" for p in problems))
        self.problems = list(problems)


@dataclasses.dataclass(frozen=True)
class _KubeletClaim:
    index: int
    provisioner: str
    kubelet: dict[str, Any] | None


def convert(bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every input document converted (Provisioner -> NodePool [+ EC2NodeClass], AWSNodeTemplate ->
    EC2NodeClass) or passed through, in input order; raises ConvertError listing every problem."""
    problems: list[Problem] = []
    out: list[list[dict[str, Any]]] = []
    classes: dict[str, dict[str, Any]] = {}        # template name -> its EC2NodeClass, for kubelet settings
    claims: dict[str, list[_KubeletClaim]] = {}    # template name -> the Provisioners that reference it
    made: dict[str, int] = {}                      # EC2NodeClass name -> the document it came from
    for index, body in enumerate(bodies):
        kind, version = body.get("kind"), body.get("apiVersion")
        if (version, kind) == (V1ALPHA5, PROVISIONER_KIND):
            converted, errors = _provisioner(body, index, claims)
        elif (version, kind) == (AWS_GROUP_VERSION, AWS_NODE_TEMPLATE_KIND):
            converted, errors = _node_template(body)
            if converted:
                classes[converted[0]["metadata"]["name"]] = converted[0]
        else:
            converted, errors = [copy.deepcopy(dict(body))], []
        problems += [Problem(index, e) for e in errors]
        problems += _name_clashes(converted, index, made)
        out.append(converted)
    problems += _place_kubelets(claims, classes)
    if problems:
        raise ConvertError(sorted(problems, key=lambda p: p.index))
    return [obj for objs in out for obj in objs]


def _name_clashes(converted: Sequence[dict[str, Any]], index: int, made: dict[str, int]) -> list[Problem]:
    """An inline `provider` and an AWSNodeTemplate of the same name would become two EC2NodeClasses of one name."""
    problems = []
    for obj in converted:
        if (obj.get("apiVersion"), obj.get("kind")) != (ec2nodeclass.GROUP_VERSION, ec2nodeclass.KIND):
            continue
        name = obj["metadata"]["name"]
        if name in made and made[name] != index:
            field = "spec.provider" if obj is not converted[0] else "metadata.name"
            problems.append(Problem(index, FieldError(field, f'EC2NodeClass "{name}" would also come from document '
                                                             f"{made[name] + 1}: rename one")))
        made.setdefault(name, index)
    return problems


def _provisioner(body: Mapping[str, Any], index: int,
                 claims: dict[str, list[_KubeletClaim]]) -> tuple[list[dict[str, Any]], list[FieldError]]:
    raw = default_provisioner(body) if isinstance(body.get("spec", {}), Mapping) else body
    provisioner, errors = read_provisioner(raw)
    if provisioner is None:
        return [], errors
    spec = provisioner.spec
    kubelet = _kubelet(spec.kubelet_configuration)
    if spec.provider is not None:
        node_class, errors = _node_class(provisioner.name, {}, spec.provider, user_data=None, ami_selector=None,
                                         path="spec.provider")
        if errors:
            return [], errors
        if kubelet:
            node_class["spec"]["kubelet"] = kubelet
        return [_node_pool(provisioner, provisioner.name), node_class], []
    # Neither provider nor providerRef (v0.16 launched with its global AWS settings): an EC2NodeClass of the
    # Provisioner's own name, which the user writes.
    ref = spec.provider_ref.name if spec.provider_ref is not None else provisioner.name
    claims.setdefault(ref, []).append(_KubeletClaim(index, provisioner.name, kubelet))
    return [_node_pool(provisioner, ref)], []


def _node_pool(p: Provisioner, node_class: str) -> dict[str, Any]:
    spec = p.spec
    template_spec: dict[str, Any] = {
        "requirements": [r.model_dump(by_alias=True, exclude_none=True) for r in spec.requirements or []],
        "nodeClassRef": {"group": ec2nodeclass.GROUP, "kind": ec2nodeclass.KIND, "name": node_class},
        "expireAfter": _duration(spec.ttl_seconds_until_expired),
    }
    for field, taints in (("taints", spec.taints), ("startupTaints", spec.startup_taints)):
        if taints:
            template_spec[field] = [t.model_dump(by_alias=True, exclude_none=True) for t in taints]
    template: dict[str, Any] = {"spec": template_spec}
    if spec.labels:
        template = {"metadata": {"labels": dict(spec.labels)}, **template}
    if spec.consolidation is not None and spec.consolidation.enabled:
        disruption = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    else:
        disruption = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": _duration(spec.ttl_seconds_after_empty)}
    out_spec: dict[str, Any] = {"template": template, "disruption": disruption}
    if spec.limits is not None and spec.limits.resources:
        out_spec["limits"] = dict(spec.limits.resources)
    if spec.weight is not None:
        out_spec["weight"] = spec.weight
    return {"apiVersion": nodepool.GROUP_VERSION, "kind": nodepool.KIND, "metadata": _metadata(p.metadata.model_dump()),
            "spec": out_spec}


def _node_template(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[FieldError]]:
    template, errors = read_awsnodetemplate(body)
    if template is None:
        return [], errors
    node_class, errors = _node_class(template.metadata.name or "", template.metadata.model_dump(), template.spec,
                                     user_data=template.spec.user_data, ami_selector=template.spec.ami_selector,
                                     path="spec")
    return ([node_class] if not errors else []), errors


def _node_class(name: str, meta: Mapping[str, Any], aws: AWSSettings, *, user_data: str | None,
                ami_selector: Mapping[str, str] | None, path: str) -> tuple[dict[str, Any], list[FieldError]]:
    errors = validate_aws(aws, path=path)
    if aws.launch_template_name is not None:
        errors.append(FieldError(f"{path}.launchTemplate", "Karpenter v1 launches without launch templates: "
                                 "move their settings into the AWSNodeTemplate before converting"))
    family = aws.ami_family or "AL2"
    if family not in ALIASES and family != "Custom":
        errors.append(FieldError(f"{path}.amiFamily", f"{family} is not an AMI family of Karpenter v1 "
                                 "(AL2, AL2023, Bottlerocket, Custom, Windows2019, Windows2022, Windows2025)"))
    if family == "Custom" and not ami_selector:
        errors.append(FieldError(f"{path}.amiSelector", "amiFamily Custom needs an amiSelector: "
                                 "Karpenter v1 asks for at least one AMI selector term"))
    if errors:
        return {}, errors
    spec: dict[str, Any] = {"amiFamily": family}
    spec["amiSelectorTerms"] = _terms(ami_selector, {"aws-ids": "id", "aws::ids": "id", "aws::name": "name",
                                                     "aws::owners": "owner"}) if ami_selector \
        else [{"alias": f"{ALIASES[family]}@latest"}]
    spec["subnetSelectorTerms"] = _terms(aws.subnet_selector or {}, {"aws-ids": "id", "aws::ids": "id"})
    spec["securityGroupSelectorTerms"] = _terms(aws.security_group_selector or {}, {"aws-ids": "id", "aws::ids": "id"})
    if aws.instance_profile:
        spec["instanceProfile"] = aws.instance_profile
    else:
        spec["role"] = NODE_ROLE_PLACEHOLDER
    if aws.tags:
        spec["tags"] = dict(aws.tags)
    if user_data is not None:
        spec["userData"] = user_data
    if aws.block_device_mappings:
        spec["blockDeviceMappings"] = [m.model_dump(by_alias=True, exclude_none=True) for m in aws.block_device_mappings]
    if aws.metadata_options is not None:
        spec["metadataOptions"] = aws.metadata_options.model_dump(by_alias=True, exclude_none=True)
    if aws.context:
        spec["context"] = aws.context
    return {"apiVersion": ec2nodeclass.GROUP_VERSION, "kind": ec2nodeclass.KIND,
            "metadata": _metadata({**meta, "name": name}), "spec": spec}, []


def _terms(selector: Mapping[str, str], special: Mapping[str, str]) -> list[dict[str, Any]]:
    """A v1alpha1 selector as v1 selector terms: comma-separated values multiply into one term per combination
    (karpenter-convert's expansion). Ids name resources exactly and v1 takes an id alone, so with `aws-ids` the
    terms are the ids."""
    fields: dict[str, list[str]] = {}
    tag_sets: list[dict[str, str]] = [{}]
    for key in sorted(selector):
        values = [v.strip() for v in selector[key].split(",")]
        if key in special:
            fields[special[key]] = values
        else:
            tag_sets = [{**tags, key: v} for v in values for tags in tag_sets]
    if "id" in fields:
        return [{"id": v} for v in fields["id"]]
    order = [f for f in ("owner", "name") if f in fields]
    terms = []
    for combo in itertools.product(*(fields[f] for f in order)):
        for tags in tag_sets:
            term: dict[str, Any] = {}
            if tags:
                term["tags"] = dict(tags)
            term.update({f: v for f, v in zip(order, combo) if v})
            terms.append(term)
    return terms


def _kubelet(k: KubeletConfiguration | None) -> dict[str, Any] | None:
    """v1alpha5 kubelet settings as v1's (containerRuntime is gone: v1 runs containerd only)."""
    if k is None:
        return None
    out = k.model_dump(by_alias=True, exclude_none=True)
    out.pop("containerRuntime", None)
    return out or None


def _place_kubelets(claims: Mapping[str, list[_KubeletClaim]], classes: Mapping[str, dict[str, Any]]) -> list[Problem]:
    """Put each template's kubelet settings on its EC2NodeClass, where v1 reads them."""
    problems = []
    for name, refs in claims.items():
        settings = {json.dumps(c.kubelet, sort_keys=True) for c in refs}
        wanted = next((c for c in refs if c.kubelet), None)
        if wanted is None:
            continue
        if len(settings) > 1:
            first = refs[0]
            for c in refs[1:]:
                if c.kubelet != first.kubelet:
                    problems.append(Problem(c.index, FieldError(
                        "spec.kubeletConfiguration", f'differs from Provisioner "{first.provisioner}"\'s, which shares '
                        f'AWSNodeTemplate "{name}": Karpenter v1 keeps kubelet settings on the EC2NodeClass, so give '
                        "each its own AWSNodeTemplate")))
            continue
        if name not in classes:
            problems.append(Problem(wanted.index, FieldError(
                "spec.kubeletConfiguration", f'Karpenter v1 keeps kubelet settings on the EC2NodeClass: convert '
                f'AWSNodeTemplate "{name}" in the same run')))
            continue
        classes[name]["spec"]["kubelet"] = wanted.kubelet
    return problems


def _duration(seconds: int | None) -> str:
    """Seconds as a Go duration string (2592000 -> 720h0m0s), as karpenter-convert prints them; None -> Never."""
    if seconds is None:
        return NEVER
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def _metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Name, labels and annotations; not kubectl's record of the last apply, which describes the old object and
    would mislead the next `kubectl apply` of the new one."""
    out: dict[str, Any] = {"name": meta.get("name")}
    labels = dict(meta.get("labels") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if labels:
        out["labels"] = labels
    if annotations:
        out["annotations"] = annotations
    return out
