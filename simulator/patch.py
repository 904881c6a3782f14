"""The three patch types the API server accepts: JSON patch, merge patch and strategic merge patch.

Strategic merge knows the list merge keys of the built-in types that matter
(containers and their ports and env by name, conditions by type, ...) and the
directives kubectl sends (`$patch`, `$setElementOrder/...`, `$retainKeys`,
`$deleteFromPrimitiveList/...`). Lists without a merge key are replaced, as
the API server does. Pure.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from karpy.simulator.store import BadRequest, Invalid

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# field name -> merge key, for lists of objects merged by key (as the Go types' patchMergeKey tags say)
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "volumeMounts": "mountPath", "env": "name", "ports": "containerPort", "conditions": "type",
    "imagePullSecrets": "name", "ownerReferences": "uid", "hostAliases": "ip", "addresses": "type",
    "topologySpreadConstraints": "topologyKey", "volumeDevices": "devicePath", "readinessGates": "conditionType",
    "podIPs": "ip", "hostIPs": "ip", "resourceClaims": "name", "resizePolicy": "resourceName",
    # admissionregistration/v1: a Validating/MutatingWebhookConfiguration's webhooks merge by name, so an
    # applied edit of one field keeps the rest of the webhook (rules, clientConfig.caBundle, failurePolicy, ...)
    "webhooks": "name",
}
# the same field name with another merge key where its items say so (a Service's ports merge by `port`)
ALTERNATE_MERGE_KEYS = {"ports": ("containerPort", "port")}
# lists of scalars merged as sets
MERGE_SCALAR_LISTS = {"finalizers"}


def apply_patch(obj: dict[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    """`obj` with `patch` applied; raises BadRequest or Invalid with the API server's wording."""
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise BadRequest("json patch must be a list of operations")
        try:
            return jsonpatch.apply_patch(obj, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as e:
            raise Invalid(f"the server rejected our request due to an error in our request: {e}") from None
    if not isinstance(patch, dict):
        raise BadRequest("patch body must be a JSON object")
    if content_type in (MERGE_PATCH, APPLY_PATCH):
        return merge(obj, patch)
    if content_type == STRATEGIC_MERGE_PATCH:
        return strategic_merge(obj, patch)
    raise BadRequest(f"unsupported patch type {content_type!r}")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            out[name] = [v for v in out.get(name) or [] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list):
            out[key] = _merge_list(out.get(key), value, key)
        else:
            merged = strategic_merge(out.get(key), value, key)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain or k not in patch}
    return out


def _merge_list(current: Any, patch: list[Any], field: str) -> list[Any]:
    current = list(current) if isinstance(current, list) else []
    if field in MERGE_SCALAR_LISTS:
        out = list(current)
        out += [v for v in patch if v not in out]
        return out
    key = _merge_key(field, current, patch)
    if key is None or not all(isinstance(item, dict) for item in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and v.get("$patch"))]
    if any(item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(v) for v in patch if v.get("$patch") != "replace"]
    out = [copy.deepcopy(v) for v in current]
    for item in patch:
        index = next((i for i, v in enumerate(out) if isinstance(v, dict) and v.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
            continue
        if index is None:
            out.append(strategic_merge({}, item, field))
        else:
            out[index] = strategic_merge(out[index], item, field)
    return out


def _merge_key(field: str, current: list[Any], patch: list[Any]) -> str | None:
    keys = ALTERNATE_MERGE_KEYS.get(field)
    if keys is None:
        return MERGE_KEYS.get(field)
    items = [i for i in current + patch if isinstance(i, dict)]
    return next((k for k in keys if any(k in i for i in items)), keys[0])
