"""Durations as Karpenter v1 writes them: Go's time.ParseDuration syntax, and `Never` for the nillable ones.

`consolidateAfter`, `expireAfter`, `terminationGracePeriod`, a budget's
`duration` and the pods' `karpenter.sh/do-not-disrupt: "30m"` all use Go's
syntax ("1h30m", "1.5h", "300ms", "0"); `consolidateAfter` and `expireAfter`
also accept `Never` (v1's NillableDuration), read here as None. Pure.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Final

NEVER: Final = "Never"

# Go's units, in nanoseconds (time.ParseDuration's unitMap)
_UNIT_NANOSECONDS: Final = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000,
                            "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_TERM: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    """A duration Go's time.ParseDuration would reject."""


def parse_duration(text: str) -> dt.timedelta:
    """`text` in Go's duration syntax as a timedelta (to the microsecond); raises DurationError naming `text`."""
    body = text
    sign = 1
    if body[:1] in "+-" and body:
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    if body == "0":
        return dt.timedelta(0)
    if not body:
        raise DurationError(f'invalid duration "{text}"')
    nanoseconds = Decimal(0)
    position = 0
    for term in _TERM.finditer(body):
        if term.start() != position:
            break
        nanoseconds += Decimal(term.group(1)) * _UNIT_NANOSECONDS[term.group(2)]
        position = term.end()
    if position != len(body):
        raise DurationError(f'invalid duration "{text}"')
    return sign * dt.timedelta(microseconds=int(nanoseconds / 1000))


def parse_nillable_duration(text: str) -> dt.timedelta | None:
    """A NillableDuration: None for `Never`, else parse_duration(text)."""
    return None if text == NEVER else parse_duration(text)
