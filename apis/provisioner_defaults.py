"""Provisioner defaulting, as Karpenter v0.16.3 with its AWS cloud provider.

The AWS provider defaults capacity type to on-demand and architecture to
amd64, each only when neither `spec.labels` nor a requirement mentions the
key. Defaulting is expressed as a JSONPatch against the object as received,
so the webhook and `karpy plan` apply the very same change. Pure.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import jsonpatch

from karpy.apis import labels as wk
from karpy.apis.requirements import IN

AWS_DEFAULT_REQUIREMENTS: tuple[tuple[str, str], ...] = (
    (wk.CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND),
    (wk.ARCH, wk.ARCH_AMD64),
)


def provisioner_default_patch(raw: Mapping[str, Any], *, aws: bool = True) -> list[dict[str, Any]]:
    """JSONPatch operations that default the Provisioner manifest `raw` (empty: nothing to do)."""
    spec = raw.get("spec") or {}
    if not aws or not isinstance(spec, Mapping):
        return []                                  # a spec that is not an object: decoding says so
    labels = spec.get("labels") or {}
    requirements = spec.get("requirements") or []
    mentioned = set(labels) | {r.get("key") for r in requirements if isinstance(r, Mapping)}
    missing = [
        {"key": key, "operator": IN, "values": [value]}
        for key, value in AWS_DEFAULT_REQUIREMENTS
        if key not in mentioned
    ]
    ops: list[dict[str, Any]] = []
    if not missing:
        return ops
    if "spec" not in raw or raw.get("spec") is None:
        ops.append({"op": "add", "path": "/spec", "value": {}})
    if not isinstance(spec.get("requirements"), list):
        ops.append({"op": "add", "path": "/spec/requirements", "value": []})
    ops += [{"op": "add", "path": "/spec/requirements/-", "value": r} for r in missing]
    return ops


def default_provisioner(raw: Mapping[str, Any], *, aws: bool = True) -> dict[str, Any]:
    """A copy of `raw` with the defaults applied."""
    defaulted: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(raw)), provisioner_default_patch(raw, aws=aws))
    return defaulted
