"""Label and field selectors as the API server parses them from a query string.

`labelSelector=app=web,tier!=db,env in (a,b),!legacy` and
`fieldSelector=spec.nodeName=n1,status.phase!=Running`. Pure.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from karpy.simulator.store import INDEXED_FIELDS, BadRequest, field_value

Predicate = Callable[[Mapping[str, Any]], bool]
_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def label_selector(text: str | None) -> Predicate | None:
    """A predicate over objects' metadata.labels; None for an empty selector. Raises BadRequest."""
    if not text:
        return None
    tests: list[Callable[..., bool]] = []           # each binds its operands as defaults
    for part in _split(text):
        part = part.strip()
        if m := _SET.match(part):
            key, op, values = m[1], m[2], {v.strip() for v in m[3].split(",") if v.strip()}
            if op == "in":
                tests.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif part.startswith("!"):
            key = part[1:].strip()
            tests.append(lambda labels, k=key: k not in labels)
        elif re.match(r"^[A-Za-z0-9./_-]+$", part):
            tests.append(lambda labels, k=part: k in labels)
        else:
            raise BadRequest(f"unable to parse requirement: {part!r}")
    return lambda obj: all(t((obj.get("metadata") or {}).get("labels") or {}) for t in tests)


def field_selector(text: str | None) -> Predicate | None:
    """A predicate over dotted fields (`metadata.name`, `spec.nodeName`, `status.phase`, ...)."""
    if not text:
        return None
    tests: list[Callable[..., bool]] = []           # each binds its operands as defaults
    for part in _split(text):
        if "!=" in part:
            path, value = (s.strip() for s in part.split("!=", 1))
            tests.append(lambda o, p=path, v=value: field_value(o, p) != v)
        elif "=" in part:
            path, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            tests.append(lambda o, p=path, v=value: field_value(o, p) == v)
        else:
            raise BadRequest(f"invalid selector: {part!r}; can't understand {part!r}")
    return lambda obj: all(t(obj) for t in tests)


def indexed_equality(text: str | None, resource: str) -> tuple[str, str] | None:
    """The `path=value` term of a field selector that the store indexes `resource` by, if there is one."""
    path = INDEXED_FIELDS.get(resource)
    for part in _split(text or "") if path else []:
        if "!=" not in part and "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            if key == path:
                return key, value
    return None


def both(a: Predicate | None, b: Predicate | None) -> Predicate | None:
    if a is None or b is None:
        return a or b
    return lambda o: a(o) and b(o)
