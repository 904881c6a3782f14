"""Kubernetes resource quantities, exact.

A Quantity holds a rational number (no floats anywhere), so `100m + 900m == 1`
and `1Gi == 1073741824` hold exactly. Parsing accepts every form the API
server accepts (decimal SI suffixes, binary suffixes, decimal exponents);
formatting produces the canonical form the API server prints: the suffix
family of the input when it can be kept exact, else a plain decimal.
Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)

Number = int | Fraction
# Exponents the parser takes: far past any machine (1e30 bytes parses), yet bounded, so a hostile
# "1e999999999" cannot make one parse build a billion-digit integer.
MAX_EXPONENT = 1000
_EXPONENT_FORM_FROM = 21                  # from 1e21 (1000E) up, amounts print as 1e21, 1e24, ...


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@functools.total_ordering
class Quantity:
    """An exact resource amount with the suffix family it was written in."""

    __slots__ = ("value", "binary")
    value: Fraction
    binary: bool

    def __init__(self, value: Number | Quantity = 0, *, binary: bool = False) -> None:
        if isinstance(value, Quantity):
            binary = value.binary
            value = value.value
        self.value = Fraction(value)
        self.binary = binary

    @classmethod
    def parse(cls, text: object) -> Quantity:
        """Parse `text`; raise QuantityError naming it when it is not a quantity.

        Integers are taken as they are; floats only when they are whole or a
        short decimal (YAML turns `0.5` into a float)."""
        if isinstance(text, Quantity):
            return text
        if isinstance(text, bool):
            raise QuantityError(f"{text!r} is not a quantity")
        if isinstance(text, int):
            return cls(text)
        if isinstance(text, float):
            text = repr(text)
        if not isinstance(text, str):
            raise QuantityError(f"{text!r} is not a quantity")
        match = _PATTERN.match(text.strip())
        if match is None or not text.strip():
            raise QuantityError(f"{text!r} is not a quantity (e.g. 100m, 1.5, 2Gi, 1e3)")
        if len(match["number"]) > MAX_EXPONENT:
            raise QuantityError(f"{text[:20]!r}... is not a quantity (more than {MAX_EXPONENT} digits)")
        number = Fraction(match["number"])
        if match["sign"] == "-":
            number = -number
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            return cls(number * _BINARY[suffix], binary=True)
        if suffix in _DECIMAL:
            return cls(number * Fraction(10) ** _DECIMAL[suffix])
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"{text!r} is not a quantity (exponent beyond ±{MAX_EXPONENT})")
        return cls(number * Fraction(10) ** exponent)

    # arithmetic and comparison -------------------------------------------------
    def __add__(self, other: object) -> Quantity:
        o = _coerce(other)
        return Quantity(self.value + o.value, binary=self.binary or o.binary)

    __radd__ = __add__

    def __sub__(self, other: object) -> Quantity:
        o = _coerce(other)
        return Quantity(self.value - o.value, binary=self.binary or o.binary)

    def __mul__(self, factor: Number) -> Quantity:
        return Quantity(self.value * factor, binary=self.binary)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, binary=self.binary)

    def __eq__(self, other: object) -> bool:
        try:
            return self.value == _coerce(other).value
        except QuantityError:
            return NotImplemented

    def __lt__(self, other: object) -> bool:
        return self.value < _coerce(other).value

    def __hash__(self) -> int:
        return hash(self.value)

    def __bool__(self) -> bool:
        return self.value != 0

    # views ---------------------------------------------------------------------
    @property
    def milli(self) -> int:
        """The value in thousandths, rounded up (as Kubernetes' MilliValue)."""
        return _ceil(self.value * 1000)

    def __float__(self) -> float:
        return float(self.value)

    def __str__(self) -> str:
        return format_quantity(self.value, binary=self.binary)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _coerce(other: object) -> Quantity:
    if isinstance(other, Quantity):
        return other
    if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
        return Quantity(other)
    if isinstance(other, (str, float)):
        return Quantity.parse(other)
    raise QuantityError(f"{other!r} is not a quantity")


def format_quantity(value: Fraction, *, binary: bool = False) -> str:
    """Canonical text of `value`: the largest suffix that keeps it exact.

    Values finer than a nanounit are rounded up to one, as the API server does."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if magnitude.denominator != 1 and (magnitude * 10**9).denominator != 1:
        magnitude = Fraction(_ceil(magnitude * 10**9), 10**9)
    if magnitude.denominator == 1 and magnitude % 10**_EXPONENT_FORM_FROM == 0:
        exponent = _EXPONENT_FORM_FROM        # past the largest suffix: 1e30, not 931322574615478515625Gi
        while magnitude % 10 ** (exponent + 3) == 0:
            exponent += 3
        return f"{sign}{magnitude // 10**exponent}e{exponent}"
    if binary and magnitude.denominator == 1:
        for suffix, factor in reversed(_BINARY.items()):
            if magnitude % factor == 0 and magnitude >= 1024:
                return f"{sign}{magnitude // factor}{suffix}"
    for suffix, exponent in sorted(_DECIMAL.items(), key=lambda kv: -kv[1]):
        scaled = magnitude / Fraction(10) ** exponent
        if scaled.denominator == 1 and (scaled % 1000 != 0 or exponent == 18):
            return f"{sign}{scaled.numerator}{suffix}"
    raise AssertionError(f"unformattable quantity {value}")  # unreachable: nano always divides

