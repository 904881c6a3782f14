"""The node-selector requirement algebra (In, NotIn, Exists, DoesNotExist, Gt, Lt).

A `Requirement` is the set of values one label key may take. It is held as
Karpenter holds it: either a concrete set of allowed values, or the complement
of a set of excluded values, each optionally bounded by Gt/Lt. That makes
intersection closed and exact, so requirements from provisioners, instance
types, pods and nodes combine by intersecting. `Requirements` maps keys to
requirements. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView, cast

from karpy.apis.labels import normalize

IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
OPERATORS: tuple[str, ...] = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT)


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    """The values a label key may take.

    complement=False: exactly `values` (empty means the key must be absent).
    complement=True: anything but `values` (the key must be present).
    greater_than / less_than bound integer values (exclusive); a bounded
    requirement admits no non-integer value.
    """

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None

    @classmethod
    def of(cls, key: str, operator: str, values: Iterable[str] = ()) -> Requirement:
        """From a NodeSelectorRequirement. Raises ValueError on an unknown
        operator or a Gt/Lt value that is not one integer."""
        key = normalize(key)
        vals = frozenset(values)
        if operator == IN:
            return cls(key, False, vals)
        if operator == NOT_IN:
            return cls(key, True, vals)
        if operator == EXISTS:
            return cls(key, True)
        if operator == DOES_NOT_EXIST:
            return cls(key, False)
        if operator in (GT, LT):
            bound = _int(next(iter(vals))) if len(vals) == 1 else None
            if bound is None:
                raise ValueError(f"key {key} with operator {operator} must have a single integer value")
            return cls(key, True, greater_than=bound) if operator == GT else cls(key, True, less_than=bound)
        raise ValueError(f"key {key} has an unsupported operator {operator} not in {', '.join(OPERATORS)}")

    @classmethod
    def exactly(cls, key: str, *values: str) -> Requirement:
        return cls(normalize(key), False, frozenset(values))

    def _within(self, value: str) -> bool:
        if self.greater_than is None and self.less_than is None:
            return True
        number = _int(value)
        if number is None:
            return False
        return (self.greater_than is None or number > self.greater_than) and (
            self.less_than is None or number < self.less_than
        )

    def has(self, value: str) -> bool:
        """True when a node whose label has `value` satisfies this requirement."""
        if self.complement:
            return value not in self.values and self._within(value)
        return value in self.values

    @property
    def allows_absent(self) -> bool:
        """True when a node without the label satisfies this (DoesNotExist, NotIn)."""
        return self.operator in (NOT_IN, DOES_NOT_EXIST)

    @property
    def operator(self) -> str:
        """The operator this reads as (Gt/Lt read as Exists, as Karpenter reports them)."""
        if self.complement:
            return NOT_IN if self.values else EXISTS
        return IN if self.values else DOES_NOT_EXIST

    @property
    def is_empty(self) -> bool:
        """True when no value satisfies this."""
        if self.complement:
            return (
                self.greater_than is not None
                and self.less_than is not None
                and self.less_than - self.greater_than <= 1
            )
        return not self.values

    def __len__(self) -> int:
        """The number of admitted values (a large number for complements)."""
        if self.complement:
            return 2**31 - 1 if not self.is_empty else 0
        return len(self.values)

    def intersection(self, other: Requirement) -> Requirement:
        """The values both admit (exact: has(v) == self.has(v) and other.has(v))."""
        complement = self.complement and other.complement
        gt = _max(self.greater_than, other.greater_than)
        lt = _min(self.less_than, other.less_than)
        if gt is not None and lt is not None and gt >= lt:
            return Requirement(self.key, False)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = frozenset(v for v in other.values if v not in self.values)
        elif other.complement:
            values = frozenset(v for v in self.values if v not in other.values)
        else:
            values = self.values & other.values
        if gt is not None or lt is not None:
            bounds = Requirement(self.key, True, greater_than=gt, less_than=lt)
            values = frozenset(v for v in values if bounds._within(v))
        if not complement:
            return Requirement(self.key, False, values)
        return Requirement(self.key, True, values, gt, lt)

    def any_value(self) -> str | None:
        """A value this admits, preferring the smallest listed one; None when empty.

        For complements (NotIn, Exists, Gt, Lt) a value is made up that satisfies it,
        as Karpenter labels a node for a NotIn/Gt/Lt requirement."""
        if not self.complement:
            return min(self.values) if self.values else None
        if self.is_empty:
            return None
        bound = ((self.greater_than + 1, 1) if self.greater_than is not None        # (first candidate, step)
                 else (self.less_than - 1, -1) if self.less_than is not None else None)
        if bound is not None:
            candidate, step = bound
            while str(candidate) in self.values:
                candidate += step
            return str(candidate) if self._within(str(candidate)) else None
        n = 0
        while f"karpy-{n}" in self.values:
            n += 1
        return f"karpy-{n}"

    def to_manifest(self) -> dict[str, object]:
        """As a NodeSelectorRequirement dict (bounded complements become Gt/Lt)."""
        if self.complement and not self.values:
            if self.greater_than is not None and self.less_than is None:
                return {"key": self.key, "operator": GT, "values": [str(self.greater_than)]}
            if self.less_than is not None and self.greater_than is None:
                return {"key": self.key, "operator": LT, "values": [str(self.less_than)]}
        out: dict[str, object] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = sorted(self.values)
        return out

    def __str__(self) -> str:
        text = f"{self.key} {self.operator}"
        if self.values:
            text += " [" + ", ".join(sorted(self.values)) + "]"
        if self.greater_than is not None:
            text += f" >{self.greater_than}"
        if self.less_than is not None:
            text += f" <{self.less_than}"
        return text


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


class Requirements(Mapping[str, Requirement]):
    """Requirements keyed by (normalized) label key; adding a key intersects."""

    __slots__ = ("_by_key",)

    def __init__(self, items: Iterable[Requirement] = ()) -> None:
        self._by_key: dict[str, Requirement] = {}
        for r in items:
            self.add(r)

    # construction ----------------------------------------------------------
    @classmethod
    def from_node_selector_requirements(cls, raw: Sequence[Mapping[str, object]] | None) -> Requirements:
        """From NodeSelectorRequirement dicts; raises ValueError on bad operators."""
        return cls(
            Requirement.of(str(r["key"]), str(r["operator"]), [str(v) for v in cast("Iterable[object]", r.get("values") or [])])
            for r in raw or ()
        )

    @classmethod
    def from_labels(cls, labels: Mapping[str, str] | None) -> Requirements:
        return cls(Requirement.exactly(k, v) for k, v in (labels or {}).items())

    def copy(self) -> Requirements:
        out = Requirements()
        out._by_key = dict(self._by_key)
        return out

    def replace(self, requirement: Requirement) -> None:
        """Set the requirement on its key, dropping what was there."""
        self._by_key[requirement.key] = requirement

    def add(self, requirement: Requirement) -> None:
        """Intersect `requirement` into these, in place."""
        existing = self._by_key.get(requirement.key)
        self._by_key[requirement.key] = requirement if existing is None else existing.intersection(requirement)

    # Mapping ---------------------------------------------------------------
    def __getitem__(self, key: str) -> Requirement:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def get(self, key: str, default: Requirement | None = None) -> Requirement | None:  # type: ignore[override]  # narrower than Mapping.get's overloads, as callers use it
        return self._by_key.get(key, default)

    def items(self) -> ItemsView[str, Requirement]:
        return self._by_key.items()

    def values(self) -> ValuesView[Requirement]:
        return self._by_key.values()

    def get_or_exists(self, key: str) -> Requirement:
        """The requirement on `key`, or Exists when there is none."""
        return self._by_key.get(key) or Requirement(key, True)

    # algebra -----------------------------------------------------------------
    def intersection(self, other: Requirements) -> Requirements:
        out = self.copy()
        for r in other.values():
            out.add(r)
        return out

    def intersects(self, other: Requirements) -> str | None:
        """None when every shared key has a common value; else why not (Karpenter's
        Intersects: two requirements that both allow the label to be absent agree)."""
        key = self._clash(other)
        return None if key is None else f"key {key}, {other._by_key[key]} not in {self._by_key[key]}"

    def agrees_with(self, other: Requirements) -> bool:
        """intersects(other) is None, without writing the reason (for loops over many instance types)."""
        return self._clash(other) is None

    def _clash(self, other: Requirements) -> str | None:
        """The first shared key with no common value (in set order), or None."""
        for key in self._by_key.keys() & other._by_key.keys():
            mine, theirs = self._by_key[key], other._by_key[key]
            if mine.intersection(theirs).is_empty and not (mine.allows_absent and theirs.allows_absent):
                return key
        return None

    def compatible(self, other: Requirements, *, well_known: frozenset[str]) -> str | None:
        """None when a node with these requirements can satisfy `other`; else why not.

        Keys `other` constrains that are neither well known nor defined here
        cannot be satisfied, unless `other` lets the label be absent."""
        for key, theirs in other._by_key.items():
            if key in well_known or key in self._by_key or theirs.allows_absent:
                continue
            return f"label {key} does not have known values"
        return self.intersects(other)

    def allows_labels(self, labels: Mapping[str, str]) -> bool:
        """True when a node with exactly `labels` satisfies every requirement here."""
        return all(r.has(labels[k]) if k in labels else r.allows_absent for k, r in self._by_key.items())

    def single_values(self) -> dict[str, str]:
        """The keys that allow exactly one value, with that value."""
        return {key: next(iter(r.values)) for key, r in self._by_key.items() if not r.complement and len(r.values) == 1}

    def labels(self) -> dict[str, str]:
        """A label for every key with one value to give (single-valued, or a
        complement whose made-up value satisfies it); DoesNotExist keys stay off."""
        out: dict[str, str] = {}
        for key, r in self._by_key.items():
            if r.complement or len(r.values) == 1:
                value = r.any_value()
                if value is not None:
                    out[key] = value
        return out

    def to_manifest(self) -> list[dict[str, object]]:
        return [r.to_manifest() for _, r in sorted(self._by_key.items())]

    def __str__(self) -> str:
        return ", ".join(str(r) for _, r in sorted(self._by_key.items()))

    def __repr__(self) -> str:
        return f"Requirements({self})"
