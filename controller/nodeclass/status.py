"""An EC2NodeClass's conditions, from what resolving each part found: each part's condition, Ready when all
are, and a condition's lastTransitionTime kept while its status stays. Pure."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

PARTS = ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady")
Obj = dict[str, Any]


def conditions(previous: Sequence[Mapping[str, Any]], problems: Mapping[str, str | None], *, generation: int | None,
               now: str) -> list[Obj]:
    """`problems`: condition type -> why it is not ready (None when it is)."""
    before = {c.get("type"): c for c in previous}
    failing = [f"{kind}={problems[kind]}" for kind in PARTS if problems.get(kind)]
    wanted: dict[str, tuple[str, str, str]] = {
        kind: ("False", "NotReady", problems[kind] or "") if problems.get(kind) else ("True", kind, "")
        for kind in PARTS}
    wanted["Ready"] = ("False", "NotReady", "; ".join(failing)) if failing else ("True", "Ready", "")
    out = []
    for kind, (status, reason, message) in wanted.items():
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        condition: Obj = {"type": kind, "status": status, "reason": reason, "message": message,
                          "lastTransitionTime": since or now}
        if generation is not None:
            condition["observedGeneration"] = generation
        out.append(condition)
    return out
