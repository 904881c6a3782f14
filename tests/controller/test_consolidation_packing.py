"""Consolidation's packing state: first fit for what the decision plans, and kube-scheduler's LeastAllocated choice
(`spread`) for where evicted pods will actually go."""

from __future__ import annotations

from karpy.apis.resources import Resources
from karpy.controller.consolidation.packing import Packing
from karpy.controller.provisioning.scheduling.nodes import ExistingNode, ResourceRows
from karpy.controller.provisioning.scheduling.pods import PodInfo
from tests.builders import pod


def existing(name: str, *, cpu: str, free_cpu: str) -> ExistingNode:
    allocatable = Resources.parse({"cpu": cpu, "memory": "8Gi", "pods": "110"})
    used = Resources.parse({"cpu": str(int(cpu) - int(free_cpu))})
    return ExistingNode(name=name, labels={"kubernetes.io/hostname": name}, taints=[], available=allocatable - used,
                        host_ports=frozenset(), provisioner="default", allocatable=allocatable)


def packing(*nodes: ExistingNode) -> Packing:
    return Packing(list(nodes), ResourceRows({"cpu", "memory", "pods"}))


def pods(*cpus: str) -> list[PodInfo]:
    return [PodInfo.parse(pod(f"p{i}-{cpu}", cpu=cpu, memory="0")) for i, cpu in enumerate(cpus)]


def test_spread_puts_each_pod_where_the_most_is_left_and_can_strand_what_first_fit_places() -> None:
    # "half" has 3 of 8 cpu left (37%), "idle" 2 of 2 (100%): a 1-cpu pod goes to "idle" under LeastAllocated,
    # then one 2-cpu pod fits only on "half", and the second fits nowhere
    state = packing(existing("half", cpu="8", free_cpu="3"), existing("idle", cpu="2", free_cpu="2"))
    moving = pods("1", "2", "2")
    moves, left = state.spread(moving)
    assert [(p.key, to) for p, to in moves] == [(moving[0].key, "idle"), (moving[1].key, "half")]
    assert left == [moving[2]]
    moves, left = state.fit(moving)                  # largest first, first fit: all three have room
    assert not left and len(moves) == 3


def test_spread_ranks_by_share_left_not_by_amount_left() -> None:
    """4 cpu left of 16 (25%) scores below 2 left of 4 (50%), though it is more cpu."""
    state = packing(existing("roomy", cpu="16", free_cpu="4"), existing("small", cpu="4", free_cpu="2"))
    (moved,) = pods("1")
    moves, left = state.spread([moved])
    assert moves == [(moved, "small")] and not left


def test_spread_leaves_out_the_nodes_going_away() -> None:
    state = packing(existing("a", cpu="4", free_cpu="4"), existing("b", cpu="4", free_cpu="1"))
    (moved,) = pods("1")
    assert state.spread([moved], without={"a"}) == ([(moved, "b")], [])
