"""One bad object never stops the others: the scheduling core confines an error to the pod or
Provisioner it came from, reports it in its results, and places everything else."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from karpy.apis.provisioner_validation import decode_provisioner
from karpy.controller.cloudprovider.catalog import fake_catalog
from karpy.controller.provisioning.scheduling.pods import PodError, PodInfo
from karpy.controller.provisioning.scheduling.reasons import Why
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, Results, Scheduler
from tests.builders import pod, provisioner


def solve(pods: list[PodInfo], provisioners: list[dict[str, Any]] | None = None) -> Results:
    provs = [decode_provisioner(p)[0] for p in (provisioners or [provisioner("default")])]
    return Scheduler(ClusterSnapshot(provs, fake_catalog(10), pods=pods)).solve()  # type: ignore[arg-type]  # valid manifests: no None


def healthy(count: int) -> list[PodInfo]:
    return [PodInfo.parse(pod(f"healthy-{i}", cpu="500m")) for i in range(count)]


def test_a_pod_that_breaks_placement_is_skipped_with_its_error_and_the_rest_are_placed() -> None:
    # host ports that are not (ip, protocol, port) triples: what a corrupted object would hold
    broken = dataclasses.replace(PodInfo.parse(pod("broken", cpu="500m")), host_ports=frozenset({7}))  # type: ignore[arg-type]  # ill-formed on purpose
    results = solve([broken, *healthy(5)])
    assert set(results.failed_pods) == {"default/broken"}
    assert results.unschedulable["default/broken"].kind is Why.FAILED
    assert str(results.unschedulable["default/broken"]).startswith("scheduling failed, TypeError")
    assert sorted(p.key for n in results.new_nodes for p in n.pods) == [f"default/healthy-{i}" for i in range(5)]


def test_a_pod_whose_requests_cannot_be_ordered_is_skipped_and_the_rest_are_placed() -> None:
    broken = dataclasses.replace(PodInfo.parse(pod("broken")), requests={"cpu": None})  # type: ignore[arg-type]  # ill-formed on purpose
    results = solve([broken, *healthy(3)])
    assert set(results.failed_pods) == {"default/broken"}
    assert sum(len(n.pods) for n in results.new_nodes) == 3


def test_a_provisioner_whose_instance_types_cannot_be_computed_is_skipped_and_the_others_launch() -> None:
    bad = provisioner("bad", weight=100, kubeletConfiguration={"evictionHard": {"memory.available": "lots%"}})
    results = solve(healthy(3), provisioners=[bad, provisioner("good")])
    assert set(results.failed_provisioners) == {"bad"}
    assert "ValueError" in results.failed_provisioners["bad"]
    assert {n.provisioner for n in results.new_nodes} == {"good"}
    assert not results.unschedulable


def test_a_pod_with_an_unreadable_host_port_is_refused_with_the_field() -> None:
    raw = pod("p")
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": "eighty"}]
    with pytest.raises(PodError, match="hostPort 'eighty' is not a port"):
        PodInfo.parse(raw)
