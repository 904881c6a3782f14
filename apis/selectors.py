"""Label selectors (matchLabels + matchExpressions) and taint toleration, as Kubernetes defines them.

Pure helpers the scheduling core and the simulator's scheduler read pods and
nodes with.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """A metav1.LabelSelector; hashable so topology groups can be keyed by it."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    match_nothing: bool = False   # a nil selector in an affinity term selects no pod

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> LabelSelector:
        """From a manifest selector; None selects nothing. Raises ValueError on a bad operator."""
        if raw is None:
            return cls(match_nothing=True)
        expressions = []
        for e in raw.get("matchExpressions") or []:
            op = e.get("operator")
            if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise ValueError(f"label selector operator {op!r} is not one of In, NotIn, Exists, DoesNotExist")
            expressions.append((str(e["key"]), op, tuple(sorted(str(v) for v in e.get("values") or []))))
        return cls(
            tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items())),
            tuple(sorted(expressions)),
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.match_nothing:
            return False
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, op, values in self.match_expressions:
            present = key in labels
            if op == "In" and (not present or labels[key] not in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts += [f"{k} {op} ({','.join(v)})" if v else f"{k} {op}" for k, op, v in self.match_expressions]
        return ",".join(parts) or "<everything>"


@dataclasses.dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Taint:
        return cls(str(raw.get("key", "")), str(raw.get("value") or ""), str(raw.get("effect", "")))

    def to_manifest(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    """True when some toleration tolerates `taint` (v1.Toleration.ToleratesTaint)."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = t.get("key") or ""
        operator = t.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.key:
            continue
        if operator == "Exists" or (t.get("value") or "") == taint.value:
            return True
    return False


def untolerated(tolerations: Sequence[Mapping[str, Any]], taints: Sequence[Taint]) -> list[Taint]:
    """The taints in `taints` no toleration tolerates."""
    return [t for t in taints if not tolerates(tolerations, t)]
