"""Provisioner validation, as Karpenter v0.16.3 with its AWS cloud provider.

`decode_provisioner` turns a manifest into a Provisioner or every decoding
error; `validate_provisioner` returns every rule the object breaks, each with
its field path. Nothing is raised for bad input and nothing stops at the
first problem. Pure.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

import pydantic

from karpy.apis import labels as wk
from karpy.apis.awsnodetemplate_validation import validate_aws
from karpy.apis.errors import FieldError, from_validation_error, join
from karpy.apis.object_meta_validation import validate_object_metadata
from karpy.apis.quantity import Quantity, QuantityError
from karpy.apis.requirements import GT, IN, LT, OPERATORS
from karpy.apis.v1alpha5 import KubeletConfiguration, NodeSelectorRequirement, Provisioner, ProvisionerSpec, Taint

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SUPPORTED_RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pid")
SUPPORTED_EVICTION_SIGNALS = (
    "memory.available", "nodefs.available", "nodefs.inodesFree",
    "imagefs.available", "imagefs.inodesFree", "pid.available",
)
CONTAINER_RUNTIMES = ("containerd", "dockerd")


def decode_provisioner(raw: Mapping[str, Any]) -> tuple[Provisioner | None, list[FieldError]]:
    """The Provisioner in `raw`, or None and one error per field that does not decode."""
    try:
        return Provisioner.model_validate(raw), []
    except pydantic.ValidationError as e:
        return None, from_validation_error(e)


def read_provisioner(raw: Mapping[str, Any], *, aws: bool = True) -> tuple[Provisioner | None, list[FieldError]]:
    """Decoded, then validated: the Provisioner when it breaks no rule, else None and every error."""
    provisioner, errors = decode_provisioner(raw)
    if provisioner is not None:
        errors = validate_provisioner(provisioner, aws=aws)
    return (None if errors else provisioner), errors


def validate_provisioner(p: Provisioner, *, aws: bool = True) -> list[FieldError]:
    """Every rule `p` breaks. `aws` adds the AWS cloud provider's rules and labels."""
    errs = validate_object_metadata(p.metadata)
    errs += validate_spec(p.spec, aws=aws, path="spec")
    return errs


def validate_spec(spec: ProvisionerSpec, *, aws: bool, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    errs += _validate_ttls(spec, path)
    errs += _validate_limits(spec, path)
    errs += _validate_weight(spec, path)
    errs += _validate_provider(spec, aws=aws, path=path)
    errs += _validate_labels(spec.labels or {}, aws=aws, path=join(path, "labels"))
    errs += _validate_taints(spec, path)
    errs += _validate_requirements(spec.requirements or [], aws=aws, path=join(path, "requirements"))
    if spec.kubelet_configuration is not None:
        errs += _validate_kubelet(spec.kubelet_configuration, join(path, "kubeletConfiguration"))
    return errs


def _validate_ttls(spec: ProvisionerSpec, path: str) -> list[FieldError]:
    errs = []
    if spec.ttl_seconds_until_expired is not None and spec.ttl_seconds_until_expired < 0:
        errs.append(FieldError(join(path, "ttlSecondsUntilExpired"), f"cannot be negative (got {spec.ttl_seconds_until_expired})"))
    if spec.ttl_seconds_after_empty is not None and spec.ttl_seconds_after_empty < 0:
        errs.append(FieldError(join(path, "ttlSecondsAfterEmpty"), f"cannot be negative (got {spec.ttl_seconds_after_empty})"))
    if spec.consolidation is not None and spec.consolidation.enabled and spec.ttl_seconds_after_empty is not None:
        errs.append(
            FieldError(
                join(path, "ttlSecondsAfterEmpty"),
                f"expected exactly one, got both: {path}.consolidation.enabled, {path}.ttlSecondsAfterEmpty",
            )
        )
    return errs


def _validate_limits(spec: ProvisionerSpec, path: str) -> list[FieldError]:
    resources = (spec.limits.resources if spec.limits else None) or {}
    base = join(join(path, "limits"), "resources")
    return [
        FieldError(join(base, name), f"cannot be negative (got {text})")
        for name, text in resources.items()
        if Quantity.parse(text) < 0
    ]


def _validate_weight(spec: ProvisionerSpec, path: str) -> list[FieldError]:
    if spec.weight is not None and not 1 <= spec.weight <= 100:
        return [FieldError(join(path, "weight"), f"must be between 1 and 100 (got {spec.weight})")]
    return []


def _validate_provider(spec: ProvisionerSpec, *, aws: bool, path: str) -> list[FieldError]:
    if spec.provider is not None and spec.provider_ref is not None:
        return [FieldError(path, f"expected exactly one, got both: {path}.provider, {path}.providerRef")]
    errs = []
    if spec.provider_ref is not None and not spec.provider_ref.name:
        errs.append(FieldError(join(join(path, "providerRef"), "name"), "missing required field"))
    if spec.provider is not None and aws:
        errs += validate_aws(spec.provider, path=join(path, "provider"))
    return errs


def _validate_labels(labels: Mapping[str, str], *, aws: bool, path: str) -> list[FieldError]:
    errs = []
    for key, value in labels.items():
        at = join(path, key)
        if key == wk.PROVISIONER_NAME:
            errs.append(FieldError(at, f"label {key} is restricted"))
        errs += [FieldError(at, f"invalid key name {key!r}: {p}") for p in wk.qualified_name_errors(key)]
        errs += [FieldError(at, f"invalid value {value!r}: {p}") for p in wk.label_value_errors(value)]
        if key != wk.PROVISIONER_NAME and (why := wk.restricted_label_error(wk.normalize(key), aws=aws)):
            errs.append(FieldError(at, why))
    return errs


def _validate_taints(spec: ProvisionerSpec, path: str) -> list[FieldError]:
    """Taints and startupTaints; a key/effect pair may appear once across both."""
    seen: set[tuple[str, str]] = set()
    errs: list[FieldError] = []
    for field, taints in (("taints", spec.taints), ("startupTaints", spec.startup_taints)):
        for i, taint in enumerate(taints or []):
            errs += _validate_taint(taint, join(join(path, field), i), seen)
    return errs


def _validate_taint(taint: Taint, at: str, seen: set[tuple[str, str]]) -> list[FieldError]:
    errs = []
    if not taint.key:
        errs.append(FieldError(join(at, "key"), "missing required field"))
    else:
        errs += [FieldError(join(at, "key"), f"invalid value {taint.key!r}: {p}") for p in wk.qualified_name_errors(taint.key)]
    if taint.value:
        errs += [FieldError(join(at, "value"), f"invalid value {taint.value!r}: {p}") for p in wk.label_value_errors(taint.value)]
    if taint.effect not in TAINT_EFFECTS:
        errs.append(FieldError(join(at, "effect"), f"{taint.effect!r} is not one of {', '.join(TAINT_EFFECTS)}"))
    pair = (taint.key, taint.effect)
    if pair in seen:
        errs.append(FieldError(at, f"duplicate taint Key/Effect pair {taint.key}={taint.effect}"))
    seen.add(pair)
    return errs


def _validate_requirements(reqs: list[NodeSelectorRequirement], *, aws: bool, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, r in enumerate(reqs):
        errs += validate_requirement(r, join(path, i), aws=aws, restrict_domains=True)
    return errs


def validate_requirement(
    r: NodeSelectorRequirement, at: str, *, aws: bool, restrict_domains: bool
) -> list[FieldError]:
    """Karpenter's ValidateRequirement, one error per field of the requirement."""
    errs = []
    key = wk.normalize(r.key)
    values = r.values or []
    if key == wk.PROVISIONER_NAME:
        errs.append(FieldError(join(at, "key"), f"{key} is restricted"))
    elif restrict_domains and (why := wk.restricted_label_error(key, aws=aws)):
        errs.append(FieldError(join(at, "key"), why))
    errs += [FieldError(join(at, "key"), f"key {key!r} is not a qualified name, {p}") for p in wk.qualified_name_errors(key)]
    if r.operator not in OPERATORS:
        errs.append(FieldError(join(at, "operator"), f"{r.operator!r} is not one of {', '.join(OPERATORS)}"))
    for j, value in enumerate(values):
        errs += [
            FieldError(join(join(at, "values"), j), f"invalid value {value!r} for key {key}, {p}")
            for p in wk.label_value_errors(value)
        ]
    if r.operator == IN and not values:
        errs.append(FieldError(join(at, "values"), f"key {key} with operator {IN} must have a value defined"))
    if r.operator in (GT, LT) and (len(values) != 1 or not _non_negative_int(values[0])):
        errs.append(
            FieldError(join(at, "values"), f"key {key} with operator {r.operator} must have a single positive integer value")
        )
    return errs


def _non_negative_int(text: str) -> bool:
    try:
        return int(text) >= 0
    except ValueError:
        return False


def _validate_kubelet(k: KubeletConfiguration, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if k.container_runtime is not None and k.container_runtime not in CONTAINER_RUNTIMES:
        errs.append(FieldError(join(path, "containerRuntime"), f"{k.container_runtime!r} is not one of {', '.join(CONTAINER_RUNTIMES)}"))
    for field, value in (("maxPods", k.max_pods), ("podsPerCore", k.pods_per_core)):
        if value is not None and value < 0:
            errs.append(FieldError(join(path, field), f"cannot be negative (got {value})"))
    for i, ip in enumerate(k.cluster_dns or []):
        if not _is_ip(ip):
            errs.append(FieldError(join(join(path, "clusterDNS"), i), f"{ip!r} is not an IP address"))
    for field, reserved in (("kubeReserved", k.kube_reserved), ("systemReserved", k.system_reserved)):
        for name, text in (reserved or {}).items():
            at = join(join(path, field), name)
            if name not in SUPPORTED_RESERVED_RESOURCES:
                errs.append(FieldError(at, f"invalid key name {name!r}: not one of {', '.join(SUPPORTED_RESERVED_RESOURCES)}"))
            if Quantity.parse(text) < 0:
                errs.append(FieldError(at, f"Value cannot be a negative resource quantity (got {text})"))
    for signal, text in (k.eviction_hard or {}).items():
        at = join(join(path, "evictionHard"), signal)
        if signal not in SUPPORTED_EVICTION_SIGNALS:
            errs.append(FieldError(at, f"invalid key name {signal!r}: not one of {', '.join(SUPPORTED_EVICTION_SIGNALS)}"))
        errs += _eviction_threshold_errors(text, at)
    return errs


def _eviction_threshold_errors(text: str, at: str) -> list[FieldError]:
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            return [FieldError(at, f"Value could not be parsed as a percentage value (got {text!r})")]
        if percent < 0:
            return [FieldError(at, f"Percentage values cannot be negative (got {text})")]
        if percent > 100:
            return [FieldError(at, f"Percentage values cannot be greater than 100 (got {text})")]
        return []
    try:
        if Quantity.parse(text) < 0:
            return [FieldError(at, f"Value cannot be a negative resource quantity (got {text})")]
    except QuantityError:
        return [FieldError(at, f"Value could not be parsed as a resource quantity (got {text!r})")]
    return []


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
