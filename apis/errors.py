"""Field errors with paths, gathered rather than raised one at a time.

Validation collects every problem (Karpenter's `errs.Also(...)`), each
with the dotted path of the offending field (`spec.requirements[0].operator`,
`spec.kubeletConfiguration.evictionHard[memory.available]`). Decoding errors
from pydantic are rendered with the same paths. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import pydantic

# Fields whose children are map keys, rendered `field[key]` rather than `field.key`.
MAP_FIELDS: frozenset[str] = frozenset(
    {
        "labels", "annotations", "resources", "evictionHard", "kubeReserved", "systemReserved",
        "subnetSelector", "securityGroupSelector", "amiSelector", "tags", "capacity",
        "allocatable", "overhead",
    }
)


@dataclasses.dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def join(path: str, child: str | int) -> str:
    """`path` extended by a field name, a list index or (after a map field) a key."""
    if isinstance(child, int):
        return f"{path}[{child}]"
    last = path.rsplit(".", 1)[-1].split("[", 1)[0] if path else ""
    if last in MAP_FIELDS and not path.endswith("]"):
        return f"{path}[{child}]"
    return f"{path}.{child}" if path else child


def path_of(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        path = join(path, part)
    return path


def from_validation_error(error: pydantic.ValidationError, *, prefix: Sequence[str | int] = ()) -> list[FieldError]:
    """One FieldError per pydantic error, paths written with the wire names."""
    out = []
    for e in error.errors(include_url=False):
        loc = [p for p in (*prefix, *e["loc"]) if p != "[key]"]
        message = e["msg"]
        if e["type"] == "extra_forbidden":
            message = "unknown field"
        elif e["type"] == "missing":
            message = "missing required field"
        elif "input" in e and e["type"] not in ("value_error",):
            message = f"{message} (got {_short(e['input'])})"
        message = message.removeprefix("Value error, ")
        out.append(FieldError(path_of(loc), message))
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def render(errors: Sequence[FieldError]) -> str:
    """All errors as one message, one per line."""
    return "\n".join(str(e) for e in errors)

