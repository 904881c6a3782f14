"""The scheduling expectations fail when what they expect did not happen (an expectation that cannot fail
would let every test that uses it pass)."""

from __future__ import annotations

import pytest

from karpy.plan.documents import PlanInputError
from tests.builders import node, pod, provisioner
from tests.expectations import expect_nodes, expect_not_scheduled, expect_provisioned, expect_scheduled


def test_expect_scheduled_and_not_scheduled_read_the_plan_both_ways() -> None:
    placed, too_big = pod("placed", cpu="1"), pod("too-big", cpu="1000")
    run = expect_provisioned(provisioner("default"), placed, too_big)
    assert expect_scheduled(run, placed)["pods"] == ["default/placed"]
    assert expect_not_scheduled(run, too_big) == "no instance type satisfies cpu=1k"
    with pytest.raises(AssertionError, match="default/too-big was not scheduled: no instance type satisfies cpu=1k"):
        expect_scheduled(run, too_big)
    with pytest.raises(AssertionError, match="default/placed was scheduled"):
        expect_not_scheduled(run, placed)
    with pytest.raises(AssertionError, match="not in the plan"):
        expect_not_scheduled(run, "default/never-given")


def test_expect_scheduled_finds_pods_placed_on_existing_nodes() -> None:
    run = expect_provisioned(provisioner("default"), node("n-1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"}),
                             pod("p", cpu="1"))
    assert expect_scheduled(run, "default/p") == {"name": "n-1", "pods": ["default/p"]}
    expect_nodes(run, 0)


def test_expect_nodes_counts_and_filters_by_label() -> None:
    run = expect_provisioned(provisioner("a", labels={"team": "a"}), pod("p", cpu="1", nodeSelector={"team": "a"}))
    (planned,) = expect_nodes(run, 1, labels={"team": "a"})
    assert planned["provisioner"] == "a"
    expect_nodes(run, 0, labels={"team": "b"})
    with pytest.raises(AssertionError, match="expected 2 node"):
        expect_nodes(run, 2)


def test_expect_provisioned_refuses_bad_input_naming_the_document() -> None:
    with pytest.raises(PlanInputError, match=r"<test>: document 1 \(Provisioner \"bad\"\)"):
        expect_provisioned(provisioner("bad", ttlSecondsAfterEmpty=-1), pod("p"))
