"""`karpy plan --consolidate` beyond one node per action: multi-node delete and replace, split, the
time budget, pods on their way, and agreement of the packing state with the full scheduler."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from typing import Any

import pytest

from karpy.controller.consolidation.decisions import Consolidator
from karpy.plan.documents import Document
from karpy.plan.inputs import from_documents
from tests.builders import catalog, instance_type, node, pod, provisioner
from tests.expectations import expect_consolidated
from tests.plan.conftest import Plan

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
SIZES = {"small": ("2", "8Gi"), "medium": ("4", "16Gi"), "large": ("8", "32Gi")}


def karpy_node(name: str, instance_type: str = "medium", **kw: Any) -> dict[str, Any]:
    cpu, memory = SIZES[instance_type]
    return node(name, provisioner="default", instance_type=instance_type, zone="zone-a", capacity_type="on-demand",
                allocatable={"cpu": cpu, "memory": memory, "pods": "110"}, created="2024-01-01T00:00:00Z",
                initialized=True, **kw)


def prices(small: float, medium: float, large: float) -> dict[str, Any]:
    return catalog(*(instance_type(name, cpu=SIZES[name][0], memory=SIZES[name][1], price=price)
                     for name, price in (("small", small), ("medium", medium), ("large", large))))


def consolidating() -> dict[str, Any]:
    return provisioner("default", consolidation={"enabled": True},
                       requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])


def consolidate(cat: dict[str, Any], *docs: dict[str, Any]) -> dict[str, Any]:
    """What `karpy plan --consolidate -o json` prints, decided in process."""
    return expect_consolidated(cat, consolidating(), *docs)


def test_several_nodes_are_deleted_in_one_action_when_all_their_pods_fit_on_the_rest() -> None:
    run = consolidate(prices(0.1, 0.2, 0.4), karpy_node("a"), karpy_node("b"), karpy_node("c"),
                      pod("pa", cpu="1", node_name="a"), pod("pb", cpu="1", node_name="b"),
                      pod("pc", cpu="1", node_name="c"))
    first = run["actions"][0]
    assert first["type"] == "delete" and first["nodes"] == ["a", "b"]      # equal costs: the older, then by name
    # onto the node that stays: the one the other candidates come before
    assert first["moves"] == [{"pod": "default/pa", "to": "c"}, {"pod": "default/pb", "to": "c"}]
    assert first["savingsPerHour"] == pytest.approx(0.4)
    s = run["summary"]
    assert s["pricePerHourBefore"] == pytest.approx(0.6) and s["pricePerHourAfter"] == pytest.approx(0.2)


def test_several_nodes_are_replaced_by_one_cheaper_node() -> None:
    """Two half-full mediums ($0.40/h together) fit one large at $0.30/h; neither alone has a cheaper fit."""
    run = consolidate(prices(0.15, 0.2, 0.3), karpy_node("a"), karpy_node("b"),
                      pod("pa", cpu="3", node_name="a"), pod("pb", cpu="3", node_name="b"))
    (action,) = run["actions"]
    assert action["type"] == "replace" and action["nodes"] == ["a", "b"]
    assert action["replacement"]["instanceType"] == "large"
    assert action["savingsPerHour"] == pytest.approx(0.1)
    assert {m["to"] for m in action["moves"]} == {"replacement"}
    assert run["summary"]["actionsByKind"] == {"delete": 0, "replace": 1, "split": 0, "repack": 0}


def test_a_node_is_split_into_smaller_nodes_when_they_cost_less() -> None:
    """Two 1.5-cpu pods on a large ($0.40/h): one medium would cost $0.30/h, two smalls $0.20/h."""
    run = consolidate(prices(0.1, 0.3, 0.4), karpy_node("big", "large"),
                      pod("p1", cpu="1500m", node_name="big"), pod("p2", cpu="1500m", node_name="big"))
    (action,) = run["actions"]
    assert action["type"] == "replace" and action["nodes"] == ["big"]
    assert [r["instanceType"] for r in action["replacements"]] == ["small", "small"]
    assert action["savingsPerHour"] == pytest.approx(0.2)
    assert sorted(m["to"] for m in action["moves"]) == ["replacement-1", "replacement-2"]
    assert run["summary"]["actionsByKind"]["split"] == 1


def test_a_node_whose_pods_need_several_new_nodes_moves_every_pod_onto_them() -> None:
    """The provisioner now launches only smalls: the large's two 1.5-cpu pods need a small each."""
    only_small = provisioner("default", consolidation={"enabled": True}, requirements=[
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small"]}])
    run = expect_consolidated(prices(0.1, 0.3, 0.4), only_small, karpy_node("big", "large"),
                              pod("p1", cpu="1500m", node_name="big"), pod("p2", cpu="1500m", node_name="big"))
    (action,) = run["actions"]
    assert [r["instanceType"] for r in action["replacements"]] == ["small", "small"]
    assert sorted(m["pod"] for m in action["moves"]) == ["default/p1", "default/p2"]
    assert action["savingsPerHour"] == pytest.approx(0.2)


def lopsided() -> dict[str, Any]:
    """A cpu-heavy and a memory-heavy type, and a balanced one that costs more than either, less than both."""
    return catalog(instance_type("cpu4", cpu="4", memory="4Gi", price=0.15),
                   instance_type("mem16", cpu="1", memory="16Gi", price=0.15),
                   instance_type("bal", cpu="4", memory="16Gi", price=0.2))


def lopsided_node(name: str, instance_type: str, capacity_type: str = "on-demand") -> dict[str, Any]:
    cpu, memory = {"cpu4": ("4", "4Gi"), "mem16": ("1", "16Gi"), "bal": ("4", "16Gi")}[instance_type]
    return node(name, provisioner="default", instance_type=instance_type, zone="zone-a", capacity_type=capacity_type,
                allocatable={"cpu": cpu, "memory": memory, "pods": "110"}, created="2024-01-01T00:00:00Z",
                initialized=True)


def lopsided_cluster(*, pairs: int = 2) -> list[dict[str, Any]]:
    """`pairs` cpu4 nodes each full of cpu and mem16 nodes each full of memory: no node can go, none alone has a
    cheaper type, no two fit one node; packed together again, each cpu pod and memory pod share a `bal`."""
    docs: list[dict[str, Any]] = []
    for i in range(pairs):
        docs += [lopsided_node(f"c{i}", "cpu4"), pod(f"cpu-{i}", cpu="3", memory="1Gi", node_name=f"c{i}"),
                 lopsided_node(f"m{i}", "mem16"), pod(f"mem-{i}", cpu="500m", memory="10Gi", node_name=f"m{i}")]
    return docs


def test_several_under_used_nodes_are_repacked_onto_fewer_cheaper_nodes() -> None:
    """Four lopsided nodes ($0.60/h) become two balanced ones ($0.40/h), each holding one pod of each kind."""
    run = consolidate(lopsided(), *lopsided_cluster())
    (action,) = run["actions"]
    assert action["type"] == "replace" and action["nodes"] == ["c0", "c1", "m0", "m1"]
    assert [r["instanceType"] for r in action["replacements"]] == ["bal", "bal"]
    assert action["savingsPerHour"] == pytest.approx(0.2)
    by_node: dict[str, set[str]] = {}
    for m in action["moves"]:
        by_node.setdefault(m["to"], set()).add(m["pod"].split("/")[1].split("-")[0])
    assert sorted(by_node) == ["replacement-1", "replacement-2"]
    assert all(kinds == {"cpu", "mem"} for kinds in by_node.values())
    s = run["summary"]
    assert s["actionsByKind"]["repack"] == 1 and s["nodesRemoved"] == 4 and s["nodesLaunched"] == 2
    assert s["pricePerHourAfter"] == pytest.approx(0.4)


def test_a_node_the_repack_would_only_move_onto_a_node_like_it_is_left_out() -> None:
    """The balanced node is full and of the cheapest type for its pod: packed again, it would get a node of
    its own at its own price, so it stays and only the four lopsided nodes are repacked."""
    run = consolidate(lopsided(), lopsided_node("b", "bal"), pod("steady", cpu="3", memory="12Gi", node_name="b"),
                      *lopsided_cluster())
    (action,) = run["actions"]
    assert action["nodes"] == ["c0", "c1", "m0", "m1"]
    assert all(m["pod"] != "default/steady" for m in action["moves"])
    assert {k["node"] for k in run["kept"]} == {"b"}


@pytest.mark.parametrize(("cpu_limit", "repacked"), [("14", True), ("11", False)])
def test_a_repack_keeps_within_the_provisioners_limits(cpu_limit: str, repacked: bool) -> None:
    """A balanced node that stays uses 4 of the limit, the four lopsided nodes 10 that the repack frees: two
    balanced nodes (8 cpu) fit a limit of 14, not one of 11."""
    limited = provisioner("default", consolidation={"enabled": True}, limits={"resources": {"cpu": cpu_limit}})
    stays = lopsided_node("b", "bal")
    stays["metadata"]["annotations"] = {"karpenter.sh/do-not-consolidate": "true"}
    run = expect_consolidated(lopsided(), limited, stays, pod("steady", cpu="3", memory="12Gi", node_name="b"),
                              *lopsided_cluster())
    if repacked:
        (action,) = run["actions"]
        assert action["nodes"] == ["c0", "c1", "m0", "m1"]
        assert [r["instanceType"] for r in action["replacements"]] == ["bal", "bal"]
    else:
        assert run["actions"] == []                 # 7 cpu left once the four are gone: one balanced node, not two


def test_a_repack_leaves_out_nodes_a_rule_keeps_and_spot_nodes() -> None:
    """A node with do-not-consolidate, one with a do-not-evict pod and a spot node stay as they are; the
    repack takes the others."""
    cat = lopsided()
    cat["instanceTypes"][0]["offerings"].append({"zone": "zone-a", "capacityType": "spot", "price": 0.05})
    docs = lopsided_cluster(pairs=4)
    kept = lopsided_node("c3", "cpu4", capacity_type="spot")     # replaces the fourth pair's cpu node
    docs = [kept if d["kind"] == "Node" and d["metadata"]["name"] == "c3" else d for d in docs]
    pinned = next(d for d in docs if d["metadata"]["name"] == "m3")
    pinned["metadata"]["annotations"] = {"karpenter.sh/do-not-consolidate": "true"}
    evict = next(d for d in docs if d["metadata"]["name"] == "mem-2")
    evict["metadata"]["annotations"] = {"karpenter.sh/do-not-evict": "true"}
    run = consolidate(cat, *docs)
    acted = {n for a in run["actions"] for n in a["nodes"]}
    assert acted.isdisjoint({"c3", "m3", "m2"})
    assert {"c0", "c1", "m0", "m1"} <= acted
    reasons = {k["node"]: k["reason"] for k in run["kept"]}
    assert reasons["m3"] == "node has annotation karpenter.sh/do-not-consolidate"
    assert reasons["m2"] == "pod default/mem-2 has annotation karpenter.sh/do-not-evict"
    assert "c3" in reasons
    assert run["summary"]["pricePerHourAfter"] < run["summary"]["pricePerHourBefore"]


def test_no_repack_when_packing_again_cannot_cost_less() -> None:
    """Each node is the cheapest type for its pod: every node is kept, with a reason."""
    docs = [lopsided_node("b0", "bal"), pod("p0", cpu="3", memory="12Gi", node_name="b0"),
            lopsided_node("b1", "bal"), pod("p1", cpu="3", memory="12Gi", node_name="b1")]
    run = consolidate(lopsided(), *docs)
    assert run["actions"] == []
    assert {k["node"] for k in run["kept"]} == {"b0", "b1"}
    assert all(k["reason"].startswith("no cheaper fit") for k in run["kept"])


def test_table_lists_each_action_and_where_each_pod_goes(plan: Plan) -> None:
    run = plan(prices(0.1, 0.2, 0.4), consolidating(), karpy_node("a"), karpy_node("b"),
               pod("pa", cpu="1", node_name="a"), pod("pb", cpu="1", node_name="b"),
               args=("--consolidate",), output="table")
    assert run.code == 0, run.err
    assert "Pods moved:" in run.out and "default/pa" in run.out
    assert "$0.4000/hour before, $0.1000/hour after" in run.out   # a goes, b becomes a small


def test_a_node_that_pending_pods_are_headed_for_is_not_consolidated() -> None:
    """v0.16 does not consider a node nominated for pods: here the pods of a node being deleted."""
    going = karpy_node("going")
    going["metadata"]["deletionTimestamp"] = "2024-06-01T00:00:00Z"
    run = consolidate(prices(0.1, 0.2, 0.4), going, karpy_node("fresh"),
                      pod("moving", cpu="1", node_name="going"))
    kept = {k["node"]: k["reason"] for k in run["kept"]}
    assert kept["fresh"] == "node is nominated for pod default/moving, which is on its way to it"
    assert run["actions"] == []


def test_a_pod_no_provisioner_can_satisfy_does_not_stop_consolidation() -> None:
    stuck = pod("stuck", cpu="1", nodeSelector={"topology.kubernetes.io/zone": "zone-nowhere"})
    run = consolidate(prices(0.1, 0.2, 0.4), karpy_node("a"), karpy_node("b"),
                      pod("pa", cpu="1", node_name="a"), stuck)
    assert run["actions"][0]["nodes"] == ["b"]


def test_the_time_budget_returns_the_actions_found_so_far() -> None:
    snapshot_docs = [consolidating(), *[karpy_node(f"n{i}") for i in range(6)],
                     *[pod(f"p{i}", cpu="1", node_name=f"n{i}") for i in range(6)]]
    loaded = _load(prices(0.1, 0.2, 0.4), snapshot_docs)
    full = Consolidator(loaded.snapshot, loaded.pdbs, now=NOW, max_nodes_per_action=1).plan()
    ticks = itertools.count()
    cut = Consolidator(loaded.snapshot, loaded.pdbs, now=NOW, max_nodes_per_action=1, budget_seconds=6,
                       timer=lambda: float(next(ticks))).plan()
    assert not cut.complete and 0 < len(cut.actions) < len(full.actions)
    assert cut.actions == full.actions[:len(cut.actions)]
    assert any(k.reason == "not considered: the decision time budget ran out" for k in cut.kept)


def _load(cat: dict[str, Any], docs: list[dict[str, Any]]) -> Any:
    return from_documents([Document("<test>", i, d) for i, d in enumerate([cat, *docs], 1)])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.slow      # twelve seeded clusters, each planned twice
def test_the_packing_state_decides_as_the_full_scheduler_does(seed: int) -> None:
    """Small random clusters: every action (its nodes, moves and replacement) is the same whether the
    candidates' pods are placed on the packing state or by a scheduler built for each candidate (both as
    planned: where kube-scheduler then puts them is `Packing.spread`'s, tested on its own)."""
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = [consolidating()]
    for i in range(rng.randint(3, 7)):
        size = rng.choice(list(SIZES))
        docs.append(karpy_node(f"n{i}", size))
        room = int(SIZES[size][0]) * 1000
        for j in range(rng.randint(0, 4)):
            cpu = rng.choice((250, 500, 1000, 1500))
            if cpu > room:
                break
            room -= cpu
            docs.append(pod(f"p{i}-{j}", cpu=f"{cpu}m", memory=f"{rng.choice((1, 2, 4))}Gi", node_name=f"n{i}"))
    loaded = _load(prices(0.1, 0.2, 0.4), docs)
    fast = Consolidator(loaded.snapshot, loaded.pdbs, now=NOW, max_nodes_per_action=1, as_kube_scheduler_places=False,
                        keep_fullest=False).plan()
    slow = Consolidator(loaded.snapshot, loaded.pdbs, now=NOW, max_nodes_per_action=1, incremental=False).plan()

    def shape(plan: Any) -> list[Any]:
        def to(a: Any, name: str) -> str:
            return "replacement" if name in {r.planned.name for r in a.replacements} else name
        return [(a.kind, a.nodes, a.savings_per_hour, [(p, to(a, n)) for p, n in a.moves],
                 [r.instance_type for r in a.replacements]) for a in plan.actions]
    assert shape(fast) == shape(slow)
