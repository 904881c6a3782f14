"""Strict field validation of `karpy plan`'s input, as kubectl's `--validate=strict` asks of the API server:
every field of a built-in object must be one its type has, so a typo (`requets`) is an error, not a default.

The field lists are the official `kubernetes` client's models (`openapi_types` and `attribute_map`, generated
from the Kubernetes OpenAPI document), so they follow the API rather than a hand-kept list. Pure.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping

from kubernetes.client import models

# a built-in kind's model is V1<Kind> in the groups plan reads (core, apps, batch, policy)
_GROUP_VERSIONS = {"v1", "apps/v1", "batch/v1", "policy/v1"}
# the generators have spelled containers both ways: "list[V1Container]", "List[V1Container]"
_LIST = re.compile(r"^[lL]ist\[(.+)\]$")
_MAP = re.compile(r"^(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")


def model_of(api_version: Any, kind: Any) -> str | None:
    """The client model of a built-in kind (`V1Pod`), or None when the client has none."""
    if api_version not in _GROUP_VERSIONS or not isinstance(kind, str):
        return None
    name = f"V1{kind}"
    return name if _fields(name) is not None else None


def _field_path(at: str, key: object) -> str:
    return f"{at}.{key}" if at else str(key)


def unknown_fields(body: Mapping[str, Any], model: str, path: str = "") -> list[str]:
    """The path of every field in `body` that the model (a client model's name, `V1Pod`) does not have,
    e.g. `spec.containers[0].resources.requets`; a wrongly typed value is left to the reader of the field."""
    unknown: list[str] = []
    # (value, its type's name, its path); objects are dicts, as YAML and JSON decode them: an isinstance check
    # against Mapping costs several times more, and this runs for every input pod
    stack: list[tuple[Any, str, str]] = [(dict(body), model, path)]
    while stack:
        value, type_name, at = stack.pop()
        container, inner = _shape(type_name)
        if container == "model" and isinstance(value, dict):
            known, nested = _keys(inner)
            keys = value.keys()
            if not keys <= known:                 # set operations: most objects' fields are all known
                unknown += [_field_path(at, key) for key in keys - known]
            for key in keys & nested.keys():      # a path is spelled only for fields that have fields of their own
                stack.append((value[key], nested[key], _field_path(at, key)))
        elif container == "list" and isinstance(value, list):
            stack += [(item, inner, f"{at}[{i}]") for i, item in enumerate(value)]
        elif container == "map" and isinstance(value, dict):
            stack += [(item, inner, f"{at}[{key}]") for key, item in value.items()]
    return sorted(unknown)


@functools.cache
def _keys(model: str) -> tuple[frozenset[str], dict[str, str]]:
    """A model's field names, and those of its fields that have fields of their own (their type names)."""
    fields = _fields(model) or {}
    return frozenset(fields), {key: field for key, field in fields.items() if _shape(field)[0]}


@functools.cache
def _shape(type_name: str) -> tuple[str, str]:
    """("list" | "map", element type), ("model", name), or ("", name) for a primitive: each name parsed once."""
    if listed := _LIST.match(type_name):
        return "list", listed.group(1)
    if mapped := _MAP.match(type_name):
        return "map", mapped.group(1) or mapped.group(2)
    return ("model" if _fields(type_name) is not None else ""), type_name


@functools.cache
def _fields(model: str) -> dict[str, str] | None:
    """wire name -> type name of a model's fields; None for a primitive (`str`, `object`, `datetime`)."""
    cls = getattr(models, model, None)
    types = getattr(cls, "openapi_types", None)
    if not isinstance(types, dict):
        return None
    wire = getattr(cls, "attribute_map", {})
    return {wire[attribute]: type_name for attribute, type_name in types.items()}
