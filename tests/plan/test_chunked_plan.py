"""A batch planned in chunks (the controller's way): each chunk's nodes are handed over as soon as they are
decided, never changed afterwards, and every pod is planned once, as the whole-batch plan would plan it."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from karpy.apis.provisioner_validation import decode_provisioner
from karpy.controller.cloudprovider.catalog import fake_catalog
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import (
    ClusterSnapshot,
    PlannedNode,
    Scheduler,
    deal,
    take_evenly,
)
from tests.builders import node, pod, provisioner


def scheduler(pods: list[dict[str, Any]]) -> Scheduler:
    snapshot = ClusterSnapshot([decode_provisioner(provisioner("default"))[0]], fake_catalog(10),  # type: ignore[list-item]  # a valid Provisioner: decoded
                               pods=[PodInfo.parse(p) for p in pods])
    return Scheduler(snapshot)


def layout(nodes: list[PlannedNode]) -> list[tuple[str, tuple[str, ...]]]:
    return [(n.name, tuple(p.key for p in n.pods)) for n in nodes]


def test_a_chunk_takes_its_pods_evenly_across_the_queue_and_a_small_rest_joins_it() -> None:
    queue = [PodInfo.parse(pod(f"p-{i}")) for i in range(10)]
    chunk, rest = take_evenly(queue, 3)
    assert chunk == [queue[0], queue[3], queue[6]] and rest == [p for p in queue if p not in chunk]
    chunk, rest = take_evenly(rest, 4)                # a rest of three would be smaller than a chunk: it joins
    assert len(chunk) == 7 and rest == []
    assert take_evenly(queue[:4], 2) == ([queue[0], queue[2]], [queue[1], queue[3]])
    assert take_evenly([], 5) == ([], [])


def test_a_last_chunks_nodes_are_dealt_in_turn_into_parts_none_empty() -> None:
    nodes: list[Any] = list(range(7))               # deal reads only the list's order
    assert deal(nodes, 2) == [[0, 2, 4, 6], [1, 3, 5]]
    assert deal(nodes[:1], 2) == [[0]] and deal([], 2) == [[]] and deal(nodes, 1) == [nodes]


def test_chunks_double_only_after_one_needed_new_nodes() -> None:
    # the first ten pods fit the existing node; the chunk after them is as small as the first
    existing = node("existing", allocatable={"cpu": "1", "memory": "16Gi", "pods": "110"})
    pods = [pod(f"p-{i:02d}", cpu="100m") for i in range(40)]
    snapshot = ClusterSnapshot([decode_provisioner(provisioner("default"))[0]], fake_catalog(10),  # type: ignore[list-item]  # a valid Provisioner: decoded
                               nodes=[existing], pods=[PodInfo.parse(p) for p in pods])
    sizes: list[int] = []

    def on_decided(nodes: list[PlannedNode]) -> bool:
        sizes.append(sum(len(n.pods) for n in nodes))
        return True

    Scheduler(snapshot).solve(on_decided=on_decided, first_chunk=10)
    assert sizes[:2] == [10, 20]                      # chunks of 10 (on the existing node), 10, then 20


@pytest.mark.slow      # plans large batches (seconds each)
def test_each_chunk_is_handed_over_once_decided_and_never_changed() -> None:
    pods = [pod(f"p-{i:03d}", cpu=f"{100 * (i % 5 + 1)}m", memory=f"{128 * (i % 3 + 1)}Mi") for i in range(120)]
    handed: list[list[tuple[str, tuple[str, ...]]]] = []

    def on_decided(nodes: list[PlannedNode]) -> bool:
        handed.append(layout(nodes))
        return True

    results = scheduler(pods).solve(on_decided=on_decided, first_chunk=10)
    assert len(handed) > 2
    assert sum(len(pods) for _, pods in handed[0]) <= 10            # the first chunk: its own pods only
    assert [entry for chunk in handed for entry in chunk] == layout(results.new_nodes)   # as handed over, in order
    placed = [key for _, keys in layout(results.new_nodes) for key in keys]
    assert sorted(placed) == sorted(f"default/p-{i:03d}" for i in range(120))          # each pod once
    assert not results.unschedulable
    whole = scheduler(pods).solve()
    # a chunk boundary may leave one node part-full: a little dearer than one plan, never much
    assert sum(n.offering.price_per_hour for n in results.new_nodes) <= 1.25 * sum(n.offering.price_per_hour for n in whole.new_nodes)


def test_a_pod_that_fits_nowhere_in_its_chunk_is_tried_again_after_the_last_chunk() -> None:
    # the big pod comes first in the queue, but its required affinity needs a small "db" pod on its node: only the
    # pods of later chunks bring one
    needs_db = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}
    pods = [pod("web", cpu="2", affinity=needs_db)] + [pod(f"db-{i}", cpu="100m", labels={"app": "db"}) for i in range(6)]
    results = scheduler(pods).solve(on_decided=lambda nodes: True, first_chunk=1)
    where = {p.key: n.name for n in results.new_nodes for p in n.pods}
    assert not results.unschedulable
    assert where["default/web"] in {where[f"default/db-{i}"] for i in range(6)}


def test_a_pod_that_fits_nowhere_is_still_reported_with_its_reason() -> None:
    pods = [pod("huge", cpu="512")] + [pod(f"p-{i}") for i in range(8)]
    results = scheduler(pods).solve(on_decided=lambda nodes: True, first_chunk=2)
    assert set(results.unschedulable) == {"default/huge"}
    assert sum(len(n.pods) for n in results.new_nodes) == 8


def test_the_plan_ends_where_on_decided_says_stop() -> None:
    pods = [pod(f"p-{i:02d}", cpu="1") for i in range(20)]
    handed: list[list[PlannedNode]] = []

    def only_the_first(nodes: list[PlannedNode]) -> bool:
        handed.append(nodes)
        return False

    results = scheduler(pods).solve(on_decided=only_the_first, first_chunk=4)
    assert len(handed) == 1
    assert layout(results.new_nodes) == layout(handed[0])
    assert sorted(p.name for n in results.new_nodes for p in n.pods) == ["p-00", "p-05", "p-10", "p-15"]   # evenly
    assert results.unschedulable == {}                    # the pods not planned are not called unschedulable


@pytest.mark.slow      # plans large batches (seconds each)
def test_without_on_decided_the_batch_is_planned_at_once() -> None:
    pods = [pod(f"p-{i:03d}", cpu=f"{100 * (i % 5 + 1)}m") for i in range(60)]
    assert layout(scheduler(pods).solve().new_nodes) == layout(scheduler(pods).solve(first_chunk=5).new_nodes)


def test_a_record_is_reread_for_a_new_status_and_parsed_again_for_a_new_spec() -> None:
    raw = pod("web", node_name="n1", labels={"app": "web"})
    record = PodInfo.parse(raw)
    running = {**raw, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    reread = record.reread(running)
    assert reread is not None and reread.raw is running and reread.phase == "Running" and reread.requests == record.requests
    assert record.reread(raw) is record
    assert record.reread({**raw, "metadata": {**raw["metadata"], "labels": {"app": "api"}}}) is None
    moved = record.reread({**raw, "spec": {**raw["spec"], "nodeName": "n2"}})            # bound elsewhere
    assert moved is not None and moved.node_name == "n2" and record.node_name == "n1"
    assert record.reread({**raw, "spec": {**raw["spec"], "nodeName": "n2", "priority": 5}}) is None
    assert record.reread({**raw, "spec": {**raw["spec"], "priority": 5}}) is None
    leaving = record.reread({**raw, "metadata": {**raw["metadata"], "deletionTimestamp": "2024-01-01T00:00:00Z"}})
    assert leaving is not None and leaving.deleting and not record.deleting


@pytest.mark.slow      # plans 151 pods in four chunks, each optimised (seconds)
def test_a_spread_holds_across_chunks_whose_pods_the_optimiser_moved() -> None:
    # the optimiser tries each loose pod on many nodes; the counts a later chunk's spread reads must be where the pods
    # ended, not everywhere they were tried
    zone = "topology.kubernetes.io/zone"
    spread = [{"maxSkew": 1, "topologyKey": zone, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    pods = [pod(f"web-{i:03d}", cpu=f"{250 * (i % 4 + 1)}m", memory=f"{256 * (i % 3 + 1)}Mi", labels={"app": "web"},
                topologySpreadConstraints=spread) for i in range(151)]
    handed: list[PlannedNode] = []

    def on_decided(nodes: list[PlannedNode]) -> bool:
        handed.extend(nodes)
        return True

    results = scheduler(pods).solve(on_decided=on_decided, first_chunk=50)
    assert not results.unschedulable
    per_zone = collections.Counter(n.labels[zone] for n in handed for _ in n.pods)
    assert sum(per_zone.values()) == 151 and max(per_zone.values()) - min(per_zone.values()) <= 1, per_zone
