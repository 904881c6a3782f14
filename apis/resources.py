"""Resource lists (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, ...) as exact integers.

Every amount is held in thousandths (Kubernetes' MilliValue), so sums and
comparisons are integer arithmetic: fast enough for the scheduler's hot loop
and exact. Pure: no I/O.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Mapping

from karpy.apis.quantity import Quantity, format_quantity

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
_BINARY_RESOURCES = {MEMORY, EPHEMERAL_STORAGE}


@functools.lru_cache(maxsize=65536)
def _milli(text: object) -> int:
    """Clusters repeat the same few amounts on every node and pod: parse each once."""
    return Quantity.parse(text).milli


def share(amount: int, capacity: int) -> float:
    """`amount / capacity` clamped to 0..1; `capacity` must be positive. Integer true division is correctly
    rounded and, with the result at most 1, cannot overflow for amounts past float's range."""
    if amount <= 0:
        return 0.0
    if amount >= capacity:
        return 1.0
    return amount / capacity


class Resources(dict[str, int]):
    """A resource list: name -> amount in thousandths. Missing names are zero."""

    @classmethod
    def parse(cls, raw: Mapping[str, object] | None) -> Resources:
        """From a manifest's resource list (`{"cpu": "500m", "memory": "1Gi"}`).

        Raises QuantityError naming the resource whose amount does not parse."""
        out = cls()
        for name, text in (raw or {}).items():
            try:
                out[name] = _milli(text) if type(text) in (str, int) else Quantity.parse(text).milli
            except ValueError as e:
                raise type(e)(f"{name}: {e}") from None
        return out

    @classmethod
    def of(cls, **amounts: str | int) -> Resources:
        """Build from keyword amounts, e.g. Resources.of(cpu="1", memory="2Gi")."""
        return cls.parse(amounts)

    def __add__(self, other: Mapping[str, int]) -> Resources:
        out = Resources(self)
        for name, amount in other.items():
            out[name] = out.get(name, 0) + amount
        return out

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        out = Resources(self)
        for name, amount in other.items():
            out[name] = out.get(name, 0) - amount
        return out

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        """True when every non-zero request here is within `capacity`."""
        return all(amount <= 0 or amount <= capacity.get(name, 0) for name, amount in self.items())

    def exceeding(self, capacity: Mapping[str, int]) -> list[str]:
        """The names whose request is more than `capacity` holds, sorted."""
        return sorted(n for n, a in self.items() if a > 0 and a > capacity.get(n, 0))

    def max_with(self, other: Mapping[str, int]) -> Resources:
        """Per-name maximum (how init containers combine with the rest)."""
        out = Resources(self)
        for name, amount in other.items():
            out[name] = max(out.get(name, 0), amount)
        return out

    def clamp_zero(self) -> Resources:
        return Resources({n: max(a, 0) for n, a in self.items()})

    def to_manifest(self) -> dict[str, str]:
        """Back to a manifest resource list with canonical quantity strings."""
        return {
            n: format_quantity(Fraction(a, 1000), binary=n in _BINARY_RESOURCES)
            for n, a in sorted(self.items())
        }

