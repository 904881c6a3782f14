"""Quantities: exact parsing and canonical formatting of every Kubernetes suffix."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpy.apis.quantity import Quantity, QuantityError
from karpy.apis.resources import Resources


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("1", 1, id="integer"),
        pytest.param("100m", Fraction(1, 10), id="milli"),
        pytest.param("1.5", Fraction(3, 2), id="decimal"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
        pytest.param("5.", 5, id="trailing-dot"),
        pytest.param("+2", 2, id="plus-sign"),
        pytest.param("-2", -2, id="minus-sign"),
        pytest.param("1n", Fraction(1, 10**9), id="nano"),
        pytest.param("3u", Fraction(3, 10**6), id="micro"),
        pytest.param("2k", 2000, id="kilo"),
        pytest.param("2M", 2 * 10**6, id="mega"),
        pytest.param("2G", 2 * 10**9, id="giga"),
        pytest.param("2T", 2 * 10**12, id="tera"),
        pytest.param("2P", 2 * 10**15, id="peta"),
        pytest.param("2E", 2 * 10**18, id="exa"),
        pytest.param("1Ki", 1024, id="kibi"),
        pytest.param("1Mi", 2**20, id="mebi"),
        pytest.param("1Gi", 2**30, id="gibi"),
        pytest.param("1Ti", 2**40, id="tebi"),
        pytest.param("1Pi", 2**50, id="pebi"),
        pytest.param("1Ei", 2**60, id="exbi"),
        pytest.param("1.5Gi", 3 * 2**29, id="fractional-binary"),
        pytest.param("1e3", 1000, id="exponent"),
        pytest.param("1E3", 1000, id="exponent-upper"),
        pytest.param("1e-3", Fraction(1, 1000), id="negative-exponent"),
        pytest.param("12e+2", 1200, id="plus-exponent"),
    ],
)
def test_parses_every_suffix_exactly(text: str, value: Fraction) -> None:
    assert Quantity.parse(text).value == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1Ki1", "1 Gi", "1g", "1ki", "--1", "1e", "Gi", "1.5.Gi"])
def test_rejects_what_the_api_server_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        Quantity.parse(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("1000m", "1"), ("1500m", "1500m"), ("0.1", "100m"), ("1024Mi", "1Gi"), ("1536Mi", "1536Mi"), ("1e3", "1k"),
     ("2000000", "2M"), ("0", "0"), ("-100m", "-100m"), ("1.5Gi", "1536Mi"), ("1Ki", "1Ki"), ("512", "512")],
)
def test_formats_canonically(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical


def test_adds_and_compares_exactly() -> None:
    assert Quantity.parse("100m") + Quantity.parse("900m") == Quantity.parse("1")
    assert Quantity.parse("1Gi") > Quantity.parse("1G")
    assert Quantity.parse("1Gi") - Quantity.parse("512Mi") == Quantity.parse("512Mi")
    assert Quantity.parse("250m").milli == 250
    assert Quantity.parse("1n").milli == 1  # rounded up, as MilliValue does


suffixes = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "e3", "e-2"])


@given(st.integers(min_value=0, max_value=10**6), suffixes)
def test_format_then_parse_is_the_identity(number: int, suffix: str) -> None:
    q = Quantity.parse(f"{number}{suffix}")
    assert Quantity.parse(str(q)) == q


@given(st.integers(-10**9, 10**9), st.integers(-10**9, 10**9))
def test_addition_is_exact_in_milli_units(a: int, b: int) -> None:
    assert (Quantity(Fraction(a, 1000)) + Quantity(Fraction(b, 1000))).milli == a + b


def test_resource_lists_sum_and_fit() -> None:
    requests = Resources.parse({"cpu": "500m", "memory": "1Gi"}) + Resources.parse({"cpu": "1.5", "nvidia.com/gpu": 1})
    assert requests == {"cpu": 2000, "memory": 2**30 * 1000, "nvidia.com/gpu": 1000}
    assert requests.fits_in(Resources.parse({"cpu": 2, "memory": "2Gi", "nvidia.com/gpu": "1"}))
    assert requests.exceeding(Resources.parse({"cpu": 2, "memory": "1Gi"})) == ["nvidia.com/gpu"]
    assert requests.to_manifest() == {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}


def test_resource_list_errors_name_the_resource() -> None:
    with pytest.raises(QuantityError, match="^memory: "):
        Resources.parse({"cpu": "1", "memory": "lots"})


huge = st.integers(min_value=-(10**60), max_value=10**60)
exponents = st.integers(min_value=-9, max_value=60)   # finer than 1n rounds up, as the API server does


@given(huge, huge, huge)
def test_addition_is_associative_and_commutative_at_any_magnitude(a: int, b: int, c: int) -> None:
    qa, qb, qc = Quantity(a), Quantity(b), Quantity(c)
    assert (qa + qb) + qc == qa + (qb + qc)
    assert qa + qb == qb + qa
    assert (qa + qb - qb) == qa


@given(huge, huge)
def test_order_matches_the_integers_at_any_magnitude(a: int, b: int) -> None:
    assert (Quantity(a) < Quantity(b)) == (a < b)
    assert (Quantity(a) == Quantity(b)) == (a == b)


@given(st.integers(min_value=0, max_value=10**40), exponents)
def test_exponent_form_parses_exactly_and_round_trips(mantissa: int, exponent: int) -> None:
    q = Quantity.parse(f"{mantissa}e{exponent}")
    assert q.value == Fraction(mantissa) * Fraction(10) ** exponent
    assert Quantity.parse(str(q)) == q


@given(st.integers(min_value=0, max_value=10**40), st.sampled_from(["", "k", "M", "E", "Ki", "Gi", "Ei", "e21", "e30"]),
       st.booleans())
def test_resource_lists_round_trip_through_manifests_at_any_magnitude(number: int, suffix: str, binary: bool) -> None:
    name = "memory" if binary else "cpu"
    resources = Resources.parse({name: f"{number}{suffix}"})
    assert Resources.parse(resources.to_manifest()) == resources


@given(huge.filter(lambda v: v >= 0), huge.filter(lambda v: v >= 0))
def test_fit_is_exact_at_any_magnitude(request: int, capacity: int) -> None:
    assert Resources({"memory": request}).fits_in(Resources({"memory": capacity})) == (request <= capacity)


@pytest.mark.parametrize(("text", "canonical"), [("1e30", "1e30"), ("1e31", "10e30"), ("1000E", "1e21"),
                                                 ("10000000Gi", "10000000Gi"), ("999E", "999E")])
def test_amounts_past_the_largest_suffix_print_in_exponent_form(text: str, canonical: str) -> None:
    assert str(Quantity.parse(text)) == canonical


@pytest.mark.parametrize("text", ["1e1001", "1e-1001", "1" * 1001])
def test_rejects_quantities_too_long_to_compute_with(text: str) -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        Quantity.parse(text)
