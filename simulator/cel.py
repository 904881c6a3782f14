"""CRD validation rules (`x-kubernetes-validations`), evaluated as the API server evaluates them.

`violations(obj, old, schema)` walks an admitted object beside its structural
schema and evaluates each rule with `self` bound to the value at that node
(only where the value is present). Rules that read `oldSelf` are transition
rules: they run on update only, where the old object has a value at the same
path (object properties and map values correlate; list items do not, as for
atomic lists). A value unchanged since the old object is not re-checked
(validation ratcheting). Messages are the API server's: `message` or
`failed rule: RULE`, under the rule's `reason` and `fieldPath`.

The expressions run on cel-python; the Kubernetes CEL libraries the published
rules use beyond standard CEL (`find` from the regex library, `split` from the
strings library) are registered as functions here. Pure.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any, Callable

import celpy
from celpy import celtypes

_REASON_WORDS = {"FieldValueForbidden": "Forbidden", "FieldValueRequired": "Required value",
                 "FieldValueDuplicate": "Duplicate value"}


def _find(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    """Kubernetes regex library: the first match of `pattern` in `text`, or the empty string."""
    match = re.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _split(text: celtypes.StringType, separator: celtypes.StringType) -> celtypes.ListType:
    """Kubernetes strings library (cel-go ext): `"a@b".split("@") == ["a", "b"]`."""
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(separator))])


FUNCTIONS: dict[str, Callable[..., Any]] = {"find": _find, "split": _split}


@dataclasses.dataclass(frozen=True)
class Violation:
    field: str          # e.g. spec.template.spec.requirements
    message: str        # e.g. spec.template.spec.requirements: Invalid value: "array": requirements with ...


@functools.cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=FUNCTIONS)


def _is_transition(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def violations(obj: dict[str, Any], old: dict[str, Any] | None, schema: dict[str, Any]) -> list[Violation]:
    """Every failed rule in `obj` (and, on update, against `old`), in schema order."""
    found: list[Violation] = []
    props = schema.get("properties") or {}
    for key, child in props.items():
        if key in ("apiVersion", "kind", "metadata") or key not in obj:
            continue
        _walk(obj[key], (old or {}).get(key) if old is not None else None, old is not None and key in old,
              child, key, found)
    return found


def _walk(value: Any, old: Any, has_old: bool, schema: dict[str, Any], path: str, found: list[Violation]) -> None:
    if value is None or not _matches_type(value, schema):
        return
    unchanged = has_old and old == value
    for rule in schema.get("x-kubernetes-validations") or []:
        transition = _is_transition(rule["rule"])
        if (transition and not has_old) or (unchanged and not transition):
            continue
        if not _holds(rule["rule"], value, old if transition else None, transition):
            found.append(_violation(rule, value, schema, path))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if has_old and isinstance(old, dict) else None
        for key, child in value.items():
            child_schema = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if child_schema is None:
                continue
            child_path = f"{path}.{key}" if key in props else f"{path}[{key}]"
            _walk(child, (old_map or {}).get(key), old_map is not None and key in old_map, child_schema, child_path, found)
    elif isinstance(value, list):
        items = schema.get("items") or {}
        for i, item in enumerate(value):
            _walk(item, None, False, items, f"{path}[{i}]", found)


def _holds(rule: str, value: Any, old: Any, transition: bool) -> bool:
    """Whether the rule evaluates to true; an evaluation error fails the rule, as on the API server."""
    return _holds_on_json(rule, json.dumps(value, sort_keys=True), json.dumps(old, sort_keys=True) if transition else None)


@functools.lru_cache(maxsize=4096)
def _holds_on_json(rule: str, value: str, old: str | None) -> bool:
    """Memoized by the values' JSON: cel-python interprets a rule in milliseconds, and controllers write the
    same specs again and again."""
    activation = {"self": celpy.json_to_cel(json.loads(value))}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(json.loads(old))
    try:
        result = _program(rule).evaluate(activation)
    except (celpy.CELEvalError, TypeError, ValueError, ArithmeticError):
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def _violation(rule: dict[str, Any], value: Any, schema: dict[str, Any], path: str) -> Violation:
    field = path + (rule.get("fieldPath") or "")
    message = rule.get("message") or f"failed rule: {rule['rule'].strip()}"     # the API server quotes it trimmed
    reason = rule.get("reason") or "FieldValueInvalid"
    if reason in _REASON_WORDS:
        text = f"{field}: {_REASON_WORDS[reason]}: {message}"
    else:
        text = f'{field}: Invalid value: "{_type_name(value, schema)}": {message}'
    return Violation(field=field, message=text)


def _type_name(value: Any, schema: dict[str, Any]) -> str:
    """The value the API server shows for a failed rule: the schema's type, not the value itself."""
    kind = schema.get("type")
    if kind:
        return str(kind)
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), "object")


def _matches_type(value: Any, schema: dict[str, Any]) -> bool:
    """Rules run only on values of their schema's type (a type error is reported by the schema check)."""
    kind = schema.get("type")
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return True
