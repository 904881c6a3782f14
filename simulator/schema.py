"""CRD structural schemas, enforced as the API server does: defaults, pruning, types, required, enums, patterns,
bounds on numbers, lengths and counts.

`admit(obj, schema)` returns the object as it would be stored (unknown fields
pruned, defaults applied) and every violation with its field path, in the
API server's words. Pure.
"""

from __future__ import annotations

import copy
import re
from typing import Any

_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def admit(obj: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    errors: list[str] = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    root_schema = dict(schema)
    props = dict(root_schema.get("properties") or {})
    for k in ("apiVersion", "kind", "metadata"):
        props.pop(k, None)
    root_schema["properties"] = props
    cleaned = _walk(body, root_schema, "", errors)
    out = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    out.update(cleaned or {})
    return out, errors


def _walk(value: Any, schema: dict[str, Any], path: str, errors: list[str]) -> Any:
    if value is None:
        if not schema.get("nullable"):
            return None
        return None
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            errors.append(f'{path or "<root>"}: Invalid value: {_repr(value)}: {path.rsplit(".", 1)[-1]} in body must be of type int-or-string')
        else:
            _check_pattern(value, schema, path, errors)
        return value
    kind = schema.get("type")
    if kind and not _is(value, kind):
        errors.append(f'{path or "<root>"}: Invalid value: "{_type_name(value)}": {path.rsplit(".", 1)[-1] or "body"} in body must be of type {kind}: "{_type_name(value)}"')
        return value
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        errors.append(f"{path}: Unsupported value: {_repr(value)}: supported values: {allowed}")
    _check_pattern(value, schema, path, errors)
    for bound, op, word in (("minimum", lambda a, b: a < b, "greater than or equal to"),
                            ("maximum", lambda a, b: a > b, "less than or equal to")):
        if bound in schema and isinstance(value, (int, float)) and not isinstance(value, bool) and op(value, schema[bound]):
            errors.append(f"{path}: Invalid value: {value}: {path.rsplit('.', 1)[-1]} in body should be {word} {schema[bound]}")
    _check_sizes(value, schema, path, errors)
    if isinstance(value, dict):
        return _object(value, schema, path, errors)
    if isinstance(value, list):
        items = schema.get("items") or {}
        return [_walk(v, items, f"{path}[{i}]", errors) for i, v in enumerate(value)]
    return value


def _object(value: dict[str, Any], schema: dict[str, Any], path: str, errors: list[str]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    out: dict[str, Any] = {}
    for key, child in value.items():
        child_path = f"{path}.{key}" if path else key
        if key in props:
            out[key] = _walk(child, props[key], child_path, errors)
        elif isinstance(extra, dict):
            out[key] = _walk(child, extra, f"{path}[{key}]", errors)
        elif preserve or extra is True:
            out[key] = child
        # else: pruned, as the API server prunes unknown fields
    for key, child_schema in props.items():
        if key not in out and "default" in child_schema:
            # a default is itself defaulted (a NodePool's `disruption: {consolidateAfter: 0s}` gains its budgets)
            out[key] = _walk(copy.deepcopy(child_schema["default"]), child_schema, f"{path}.{key}" if path else key, errors)
    for key in schema.get("required") or []:
        if key not in out:
            errors.append(f'{path + "." if path else ""}{key}: Required value')
    return out


# keyword -> (applies to, compare, the API server's words for the bound)
_SIZES = {
    "maxLength": (str, lambda n, b: n > b, "Too long: may not be more than {b} bytes"),
    "minLength": (str, lambda n, b: n < b, "Invalid value: {v}: {leaf} in body should be at least {b} chars long"),
    "maxItems": (list, lambda n, b: n > b, "Too many: {n}: must have at most {b} items"),
    "minItems": (list, lambda n, b: n < b, "Invalid value: {n}: {leaf} in body should have at least {b} items"),
    "maxProperties": (dict, lambda n, b: n > b, "Too many: {n}: must have at most {b} items"),
}


def _check_sizes(value: Any, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    for keyword, (kind, exceeds, words) in _SIZES.items():
        bound = schema.get(keyword)
        if bound is not None and isinstance(value, kind) and exceeds(len(value), bound):
            errors.append(f"{path}: " + words.format(b=bound, n=len(value), v=_repr(value), leaf=path.rsplit(".", 1)[-1]))


def _check_pattern(value: Any, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    pattern = schema.get("pattern")
    if pattern and isinstance(value, str) and not re.search(pattern, value):
        errors.append(f'{path}: Invalid value: "{value}": {path.rsplit(".", 1)[-1]} in body should match \'{pattern}\'')


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(type(value), "null")


def _repr(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
