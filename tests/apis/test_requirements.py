"""The requirement algebra: laws stated with hypothesis, plus Karpenter's compatibility rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpy.apis.labels import WELL_KNOWN_LABELS
from karpy.apis.requirements import Requirement, Requirements

values = st.sampled_from(["a", "b", "c", "1", "5", "9"])  # small, so sets overlap


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if op in ("Gt", "Lt"):
        return Requirement.of("k", op, [draw(st.sampled_from(["1", "5", "9"]))])
    return Requirement.of("k", op, draw(st.lists(values, min_size=1, max_size=3)) if op in ("In", "NotIn") else [])


@given(requirements(), requirements(), values)
def test_intersection_allows_exactly_what_both_allow(a: Requirement, b: Requirement, v: str) -> None:
    assert a.intersection(b).has(v) == (a.has(v) and b.has(v))


@given(requirements(), requirements(), st.integers(-3, 12).map(str))
def test_intersection_is_exact_on_numbers(a: Requirement, b: Requirement, v: str) -> None:
    assert a.intersection(b).has(v) == (a.has(v) and b.has(v))


@given(requirements(), requirements(), values)
def test_intersection_is_commutative(a: Requirement, b: Requirement, v: str) -> None:
    assert a.intersection(b).has(v) == b.intersection(a).has(v)
    assert a.intersection(b).is_empty == b.intersection(a).is_empty


@given(requirements(), requirements(), requirements(), values)
def test_intersection_is_associative(a: Requirement, b: Requirement, c: Requirement, v: str) -> None:
    assert a.intersection(b).intersection(c).has(v) == a.intersection(b.intersection(c)).has(v)


@given(requirements(), values)
def test_intersection_is_idempotent(a: Requirement, v: str) -> None:
    assert a.intersection(a).has(v) == a.has(v)


@given(requirements())
def test_a_made_up_value_satisfies_the_requirement(a: Requirement) -> None:
    value = a.any_value()
    if a.is_empty:
        assert value is None
    else:
        assert value is not None and a.has(value)


@given(requirements())
def test_round_trips_through_a_manifest(a: Requirement) -> None:
    manifest = a.to_manifest()
    again = Requirement.of(str(manifest["key"]), str(manifest["operator"]), manifest.get("values", []))  # type: ignore[arg-type]  # a list of str
    for v in ["a", "b", "c", "1", "5", "9", "0", "10"]:
        assert again.has(v) == a.has(v)


@pytest.mark.parametrize(
    ("alias", "stable"),
    [
        ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone"),
        ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
        ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
        ("beta.kubernetes.io/os", "kubernetes.io/os"),
        ("beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type"),
    ],
)
def test_deprecated_aliases_are_normalized(alias: str, stable: str) -> None:
    reqs = Requirements.from_node_selector_requirements([{"key": alias, "operator": "In", "values": ["x"]}])
    assert list(reqs) == [stable]
    reqs.add(Requirement.of(stable, "In", ["x", "y"]))
    assert reqs[stable].values == {"x"}


def test_gt_and_lt_that_leave_no_integer_are_empty() -> None:
    assert Requirement.of("k", "Gt", ["5"]).intersection(Requirement.of("k", "Lt", ["6"])).is_empty
    assert not Requirement.of("k", "Gt", ["5"]).intersection(Requirement.of("k", "Lt", ["7"])).is_empty
    assert Requirement.of("k", "Gt", ["5"]).intersection(Requirement.of("k", "Lt", ["7"])).any_value() == "6"


def test_bounds_reject_non_integers() -> None:
    assert not Requirement.of("k", "Gt", ["1"]).has("abc")
    assert Requirement.of("k", "Gt", ["1"]).has("2")


def test_compatible_needs_custom_labels_to_be_defined() -> None:
    node = Requirements.from_labels({"team": "a"})
    assert node.compatible(Requirements.from_labels({"team": "a"}), well_known=WELL_KNOWN_LABELS) is None
    why = node.compatible(Requirements.from_labels({"other": "x"}), well_known=WELL_KNOWN_LABELS)
    assert why == "label other does not have known values"
    absent = Requirements([Requirement.of("other", "DoesNotExist")])
    assert node.compatible(absent, well_known=WELL_KNOWN_LABELS) is None


def test_compatible_allows_undefined_well_known_labels() -> None:
    pod = Requirements.from_labels({"topology.kubernetes.io/zone": "us-east-1a"})
    assert Requirements().compatible(pod, well_known=WELL_KNOWN_LABELS) is None


def test_intersects_explains_the_conflict() -> None:
    mine = Requirements([Requirement.of("kubernetes.io/arch", "In", ["amd64"])])
    theirs = Requirements([Requirement.of("kubernetes.io/arch", "In", ["arm64"])])
    assert mine.intersects(theirs) == "key kubernetes.io/arch, kubernetes.io/arch In [arm64] not in kubernetes.io/arch In [amd64]"


def test_two_requirements_that_allow_absence_agree() -> None:
    mine = Requirements([Requirement.of("gpu", "DoesNotExist")])
    theirs = Requirements([Requirement.of("gpu", "NotIn", ["true"])])
    assert mine.intersects(theirs) is None


def test_labels_resolve_single_values_and_satisfy_complements() -> None:
    reqs = Requirements([
        Requirement.of("zone", "In", ["a"]),
        Requirement.of("size", "Gt", ["4"]),
        Requirement.of("team", "NotIn", ["x"]),
        Requirement.of("gpu", "DoesNotExist"),
        Requirement.of("arch", "In", ["amd64", "arm64"]),
    ])
    labels = reqs.labels()
    assert labels["zone"] == "a"
    assert int(labels["size"]) > 4
    assert labels["team"] != "x"
    assert "gpu" not in labels and "arch" not in labels
