"""The optimising packer: never dearer than the greedy, deterministic, and every scheduling rule kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence
from unittest import mock

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.scheduling import diverse_pods, realistic_mix
from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources
from karpy.controller.provisioning.scheduling import forked
from karpy.controller.provisioning.scheduling import scheduler as scheduling
from karpy.controller.provisioning.scheduling.cost import node_costs
from karpy.controller.provisioning.scheduling.nodes import NewNode, estimate
from karpy.controller.provisioning.scheduling.packers import Greedy, PackingOptions, optimiser
from karpy.controller.provisioning.scheduling.packers.optimiser import (
    _Bins,
    _fill_anchored,
    _grow_lopsided,
    _Loose,
    _may_shed,
    _shrink,
    _swap,
    _Swaps,
    pins_of,
)
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import Results, Scheduler
from karpy.plan.inputs import load
from karpy.plan.render import plan_json
from tests.builders import catalog, instance_type, pod, provisioner
from tests.plan.conftest import Plan

ZONES = ("zone-a", "zone-b")
# prices that do not grow in step with size, so how pods are grouped matters
CATALOG = catalog(
    instance_type("small", cpu="2", memory="4Gi", pods="8", price=0.09, zones=ZONES),
    instance_type("medium", cpu="4", memory="8Gi", pods="16", price=0.2, zones=ZONES),
    instance_type("xlarge", cpu="8", memory="16Gi", pods="32", price=0.33, zones=ZONES),
    instance_type("large", cpu="16", memory="32Gi", pods="58", price=0.7, zones=ZONES),
)
ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def solve(tmp_path: Path, *documents: dict[str, Any], optimize: bool = True, node_cost: float = 0.0,
          catalog_name: str = "aws", max_seconds: float | None = None) -> Results:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(list(documents), sort_keys=False))
    loaded = load([str(path)], catalog=catalog_name)
    return Scheduler(loaded.snapshot, packing=PackingOptions(optimize=optimize, node_cost_per_hour=node_cost,
                                                                 max_seconds=max_seconds)).solve()


PER_NODE = node_costs(None).per_hour        # every node's volume and public address, on top of its list price


def price(results: Results) -> float:
    return sum(n.offering.price_per_hour for n in results.new_nodes)


def cost(results: Results) -> float:
    return sum(n.cost_per_hour for n in results.new_nodes)


def placed(results: Results) -> set[str]:
    return {p.key for n in results.new_nodes for p in n.pods} | {p.key for n in results.existing_nodes for p in n.pods}


# prices in step with size: what a node costs turns only on how many steps of cpu or memory it needs
LINEAR = catalog(*(instance_type(f"s{n}", cpu=str(n), memory=f"{2 * n}Gi", pods="20", price=float(n))
                   for n in (1, 2, 3, 4)))


def planned(tmp_path: Path, pods: Sequence[dict[str, Any]],
            placement: dict[str, tuple[str, ...]]) -> tuple[Scheduler, dict[str, PodInfo], list[NewNode]]:
    """New nodes of LINEAR's types, one per hostname of `placement`, each holding the pods it names."""
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([LINEAR, provisioner("default"), *pods], sort_keys=False))
    scheduler = Scheduler(load([str(path)], catalog="aws").snapshot)
    by_name = {p.name: p for p in scheduler.pending}
    nodes = []
    for hostname, names in placement.items():
        node = NewNode(scheduler.templates[0], hostname)
        for name in names:
            assert node.add(by_name[name], scheduler.topology) is None
        nodes.append(node)
    return scheduler, by_name, nodes


def assert_nodes_hold_their_pods(results: Results) -> None:
    for n in results.new_nodes:
        used = Resources()
        for p in n.pods:
            used = used + p.requests
        assert not used.exceeding(n.instance_type.allocatable), (n.name, n.instance_type.name)


shapes = st.tuples(st.sampled_from(["100m", "250m", "500m", "1", "1500m", "3"]),
                   st.sampled_from(["128Mi", "512Mi", "1Gi", "2Gi", "4Gi", "6Gi"]))
kinds = st.sampled_from(["plain", "plain", "plain", "anti", "zone-a", "spread"])
SPREAD = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
           "labelSelector": {"matchLabels": {"app": "spread"}}}]


@st.composite
def batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i, ((cpu, memory), kind) in enumerate(draw(st.lists(st.tuples(shapes, kinds), min_size=1, max_size=24))):
        extra: dict[str, Any] = {}
        labels = {"app": "web"}
        if kind == "anti":
            labels, extra = {"app": "db"}, {"affinity": ANTI}
        elif kind == "zone-a":
            extra = {"nodeSelector": {"topology.kubernetes.io/zone": "zone-a"}}
        elif kind == "spread":
            labels, extra = {"app": "spread"}, {"topologySpreadConstraints": SPREAD}
        out.append(pod(f"p-{i}", cpu=cpu, memory=memory, labels=labels, **extra))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches())
@pytest.mark.slow      # plans large batches (seconds each)
def test_the_optimiser_is_never_dearer_than_the_greedy_and_breaks_no_rule(tmp_path: Path, batch: list[dict[str, Any]]) -> None:
    docs = [CATALOG, provisioner("default"), *batch]
    greedy, best = solve(tmp_path, *docs, optimize=False), solve(tmp_path, *docs)
    assert price(best) <= price(greedy) + 1e-9
    assert placed(best) == placed(greedy)
    assert best.unschedulable.keys() == greedy.unschedulable.keys()
    assert_nodes_hold_their_pods(best)
    db_nodes = [n.name for n in best.new_nodes for p in n.pods if p.labels.get("app") == "db"]
    assert len(db_nodes) == len(set(db_nodes))                       # anti-affinity: one per node
    for n in best.new_nodes:
        if any(p.node_selector for p in n.pods):
            assert n.offering.zone == "zone-a"
    assert spread_per_zone(best) == spread_per_zone(greedy)         # zone-spread pods move only within their zone
    assert plan_json(solve(tmp_path, *docs)) == plan_json(best)       # deterministic


def spread_per_zone(results: Results) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in results.new_nodes:
        for p in n.pods:
            if p.labels.get("app") == "spread":
                counts[n.labels["topology.kubernetes.io/zone"]] = counts.get(n.labels["topology.kubernetes.io/zone"], 0) + 1
    return counts


@pytest.mark.slow      # plans large batches (seconds each)
def test_the_realistic_mix_costs_less_than_the_greedy_plan(tmp_path: Path) -> None:
    greedy, best = solve(tmp_path, *realistic_mix(), optimize=False), solve(tmp_path, *realistic_mix())
    assert len(placed(best)) == 212 and not best.unschedulable
    # the mix fills large general-purpose nodes, whose prices grow in step with size: the greedy is near the best
    assert cost(best) <= cost(greedy) + 1e-9
    assert_nodes_hold_their_pods(best)


def test_past_its_time_budget_the_optimiser_leaves_the_greedy_plan_as_it_is(tmp_path: Path) -> None:
    greedy = solve(tmp_path, *realistic_mix(), optimize=False)
    hurried = solve(tmp_path, *realistic_mix(), max_seconds=1e-9)
    assert price(hurried) == price(greedy) and placed(hurried) == placed(greedy)
    assert sorted(n.options[0].name for n in hurried.new_nodes) == sorted(n.options[0].name for n in greedy.new_nodes)


def test_a_node_cost_favours_fewer_larger_nodes(tmp_path: Path) -> None:
    docs = [CATALOG, provisioner("default")] + [pod(f"p-{i}", cpu="1500m", memory="1Gi") for i in range(8)]
    cheapest, fewer = solve(tmp_path, *docs), solve(tmp_path, *docs, node_cost=0.5)
    assert len(fewer.new_nodes) < len(cheapest.new_nodes)
    assert price(cheapest) <= price(fewer)


def test_pods_with_anti_affinity_keep_the_greedy_placement(tmp_path: Path) -> None:
    docs = [CATALOG, provisioner("default")] + [pod(f"db-{i}", cpu="1", labels={"app": "db"}, affinity=ANTI)
                                                 for i in range(3)] + [pod(f"w-{i}", cpu="250m") for i in range(6)]
    greedy, best = solve(tmp_path, *docs, optimize=False), solve(tmp_path, *docs)
    where = {p.key: n.name for n in best.new_nodes for p in n.pods}
    before = {p.key: n.name for n in greedy.new_nodes for p in n.pods}
    assert {where[f"default/db-{i}"] for i in range(3)} == {before[f"default/db-{i}"] for i in range(3)}
    assert len({where[f"default/db-{i}"] for i in range(3)}) == 3


def test_taints_max_pods_and_limits_hold_after_optimising(tmp_path: Path) -> None:
    tainted = provisioner("gpu", weight=10, taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    capped = provisioner("default", kubeletConfiguration={"maxPods": 3}, limits={"resources": {"cpu": "40"}})
    docs = [CATALOG, tainted, capped] + [pod(f"p-{i}", cpu="100m") for i in range(10)] + [
        pod("tolerant", cpu="100m", tolerations=[{"key": "dedicated", "operator": "Exists"}])]
    best = solve(tmp_path, *docs)
    for n in best.new_nodes:
        keys = [p.key for p in n.pods]
        if n.provisioner == "gpu":
            assert keys == ["default/tolerant"]
        assert len(keys) <= 3
    assert sum(int(n.instance_type.capacity["cpu"]) for n in best.new_nodes if n.provisioner == "default") <= 40_000
    assert not best.unschedulable


def test_plan_takes_a_node_cost(plan: Plan) -> None:
    docs = [CATALOG, provisioner("default")] + [pod(f"p-{i}", cpu="1500m", memory="1Gi") for i in range(8)]
    many, few = plan(*docs), plan(*docs, args=("--node-cost-per-hour", "0.5"))
    assert few.json["summary"]["newNodes"] < many.json["summary"]["newNodes"]
    assert plan(*docs, args=("--node-cost-per-hour", "-1")).code == 2


def test_two_nodes_trade_pods_when_each_then_fits_a_cheaper_type(tmp_path: Path) -> None:
    # one node full of memory-heavy pods with idle cpu, the other of cpu-heavy ones with idle memory: neither
    # has room to take a pod of the other for free, but a trade halves both
    scheduler, pods, (a, b) = planned(tmp_path, [
        pod("anchor-a", cpu="100m", memory="100Mi"), pod("anchor-b", cpu="100m", memory="100Mi"),
        pod("mem-1", cpu="100m", memory="3Gi"), pod("mem-2", cpu="100m", memory="3Gi"),
        pod("cpu-1", cpu="1500m", memory="100Mi"), pod("cpu-2", cpu="1500m", memory="100Mi")],
        {"node-a": ("anchor-a", "mem-1", "mem-2"), "node-b": ("anchor-b", "cpu-1", "cpu-2")})
    assert (a.price(), b.price()) == pytest.approx((4.0 + PER_NODE, 4.0 + PER_NODE))
    movable = {id(p) for name, p in pods.items() if not name.startswith("anchor")}
    assert _swap([a, b], movable, scheduler.topology, deadline=None, budget=[100])
    assert (a.price(), b.price()) == pytest.approx((2.0 + PER_NODE, 2.0 + PER_NODE))
    assert sorted(p.name for p in a.pods + b.pods) == sorted(pods)
    assert {"anchor-a"} <= {p.name for p in a.pods} and {"anchor-b"} <= {p.name for p in b.pods}
    assert not _swap([a, b], movable, scheduler.topology, deadline=None, budget=[100])   # nothing cheaper left


def test_a_node_gets_cheaper_through_a_chain_of_trades_no_single_trade_makes(tmp_path: Path) -> None:
    # node a's memory is full (7Gi of s4's 8Gi) while its cpu idles: s3 needs it to shed 1Gi, and b and c have
    # half a Gi of room each; each takes a 2Gi pod for a 1.5Gi one that is heavier on cpu, which a has room for
    scheduler, pods, (a, b, c) = planned(tmp_path, [
        pod("anchor-a", cpu="100m", memory="1Gi"), *(pod(f"mem-{i}", cpu="100m", memory="2Gi") for i in range(3)),
        *(pod(f"anchor-{x}", cpu="700m", memory="2Gi") for x in "bc"),
        *(pod(f"cpu-{x}", cpu="1200m", memory="1536Mi") for x in "bc")],
        {"node-a": ("anchor-a", "mem-0", "mem-1", "mem-2"), "node-b": ("anchor-b", "cpu-b"), "node-c": ("anchor-c", "cpu-c")})
    assert (a.price(), b.price(), c.price()) == pytest.approx((4.0 + PER_NODE, 2.0 + PER_NODE, 2.0 + PER_NODE))
    movable = {id(p) for name, p in pods.items() if not name.startswith("anchor")}
    assert _swap([a, b, c], movable, scheduler.topology, deadline=None, budget=[1000])
    assert (a.price(), b.price(), c.price()) == pytest.approx((3.0 + PER_NODE, 2.0 + PER_NODE, 2.0 + PER_NODE))
    assert sorted(p.name for p in a.pods + b.pods + c.pods) == sorted(pods)
    assert [p.name for p in a.pods][0] == "anchor-a" and {"anchor-b", "anchor-c"} <= {p.name for p in b.pods + c.pods}
    for node in (a, b, c):     # every node holds what it asks for at the type it takes
        assert (node.template.allocatable[node.cheapest()] >= node.used).all()


@pytest.mark.parametrize("room_on_b", [True, False])
def test_a_node_tries_to_shed_only_when_room_left_on_the_others_covers_its_shortfall(tmp_path: Path, room_on_b: bool) -> None:
    # node a runs 1.9 cpu (s2); s1 needs it to shed 900m, one of x and y. b (s2) has 900m idle, or only 800m
    scheduler, pods, (a, b) = planned(tmp_path, [
        pod("anchor-a", cpu="100m", memory="100Mi"), pod("x", cpu="900m", memory="100Mi"), pod("y", cpu="900m", memory="100Mi"),
        pod("anchor-b", cpu="1100m" if room_on_b else "1200m", memory="100Mi")],
        {"node-a": ("anchor-a", "x", "y"), "node-b": ("anchor-b",)})
    loose = [pods["x"], pods["y"]]
    t = a.template
    s1 = [it.name for it in t.instance_types].index("s1")
    deficit = estimate(a.used - t.allocatable[s1]).astype(float)
    assert _may_shed(0, loose, deficit, _Bins([a, b], loose, scheduler.topology)) is room_on_b
    _shrink([a, b], {id(p) for p in loose}, scheduler.topology, deadline=None)
    assert (a.price(), b.price()) == pytest.approx((1.0 + PER_NODE if room_on_b else 2.0 + PER_NODE, 2.0 + PER_NODE))
    assert sorted(p.name for p in a.pods + b.pods) == sorted(pods)


@pytest.mark.slow      # plans each batch three times (about a second each)
@pytest.mark.parametrize("seed", [1, 2])
def test_skipping_nodes_whose_loose_pods_have_too_little_room_elsewhere_changes_no_plan(tmp_path: Path, seed: int) -> None:
    docs = [{"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}},
            *diverse_pods(100, seed)]
    with mock.patch.object(optimiser, "_may_shed", lambda *_: True):     # every node orders and tries its pods
        tried = plan_json(solve(tmp_path, *docs, catalog_name="fake-400"))
    with mock.patch.object(optimiser, "_may_shed", lambda *_: False):    # no node sheds: a plan that differs
        assert plan_json(solve(tmp_path, *docs, catalog_name="fake-400")) != tried
    assert plan_json(solve(tmp_path, *docs, catalog_name="fake-400")) == tried


@pytest.mark.parametrize("shrinking", [("b", "c"), ("b",)])
def test_a_lopsided_node_grows_when_several_others_then_shrink_into_it(tmp_path: Path, shrinking: tuple[str, ...]) -> None:
    # node a's memory is full of pods that stay (s2's 4Gi) while 1.7 of its 2 cpu idle; b and c each run 2.2 cpu
    # (s3) with 0.8 idle, short of the 900m a loose pod asks, so no pod moves for free and no trade helps. a on s3
    # has room for a loose pod of each, which then take s2: one dollar more for two less. With b alone the same
    # growth saves nothing, so it is undone.
    scheduler, pods, (a, b, c) = planned(tmp_path, [
        pod("anchor-a", cpu="100m", memory="100Mi"), *(pod(f"mem-{i}", cpu="100m", memory="1950Mi") for i in range(2)),
        *(pod(f"anchor-{x}", cpu="1300m", memory="100Mi") for x in "bc"),
        *(pod(f"cpu-{x}", cpu="900m", memory="100Mi") for x in "bc")],
        {"node-a": ("anchor-a", "mem-0", "mem-1"), "node-b": ("anchor-b", "cpu-b"), "node-c": ("anchor-c", "cpu-c")})
    assert (a.price(), b.price(), c.price()) == pytest.approx((2.0 + PER_NODE, 3.0 + PER_NODE, 3.0 + PER_NODE))
    movable = {id(pods[f"cpu-{x}"]) for x in shrinking}
    assert not _swap([a, b, c], movable, scheduler.topology, deadline=None, budget=[1000])
    # grown too, b and c (memory idle) would shed nothing: only a, idling the cpu most nodes run out of, may grow
    assert not _grow_lopsided([a, b, c], movable, scheduler.topology, deadline=None, scarce_only=False)
    grew = _grow_lopsided([a, b, c], movable, scheduler.topology, deadline=None, scarce_only=True)
    assert grew == (len(shrinking) == 2)
    after = (3.0, 2.0, 2.0) if grew else (2.0, 3.0, 3.0)
    assert (a.price(), b.price(), c.price()) == pytest.approx(tuple(p + PER_NODE for p in after))
    assert sorted(p.name for p in a.pods + b.pods + c.pods) == sorted(pods)
    assert {p.name for p in a.pods} == {"anchor-a", "mem-0", "mem-1"} | ({"cpu-b", "cpu-c"} if grew else set())
    for node in (a, b, c):     # every node holds what it asks for at the type it takes
        assert (node.template.allocatable[node.cheapest()] >= node.used).all()


@pytest.mark.slow      # plans large batches (seconds each)
def test_a_mixed_batch_of_a_few_hundred_pods_tries_every_fill_order_and_keeps_every_rule(tmp_path: Path) -> None:
    # Karpenter's diverse benchmark at 300 pods: anti-affinity, hostname and zone spreads, zone affinity
    docs = [{"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}},
            *diverse_pods(300)]
    greedy = solve(tmp_path, *docs, optimize=False, catalog_name="fake-400")
    best = solve(tmp_path, *docs, catalog_name="fake-400")
    assert price(best) < price(greedy) and placed(best) == placed(greedy) and not best.unschedulable
    assert_nodes_hold_their_pods(best)
    apart = [n.name for n in best.new_nodes for p in n.pods if p.labels.get("app") == "nginx"]
    assert len(apart) == 60 == len(set(apart))                       # hostname anti-affinity: one per node

    def zones_of(results: Results, label: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in results.new_nodes:
            for p in n.pods:
                if label in p.labels and any(s.key == "topology.kubernetes.io/zone" for s in p.spreads):
                    key = f"{n.labels['topology.kubernetes.io/zone']}/{p.labels[label]}"
                    counts[key] = counts.get(key, 0) + 1
        return counts

    assert zones_of(best, "my-label") == zones_of(greedy, "my-label")    # zone-spread pods move only within their zone
    assert plan_json(solve(tmp_path, *docs, catalog_name="fake-400")) == plan_json(best)   # deterministic


def test_of_two_anchored_nodes_whose_growth_costs_the_same_the_fill_can_grow_the_one_left_even(tmp_path: Path) -> None:
    # both nodes use all of s1's cpu, so a 1-cpu pod grows either to s2 for the same price and short of the same;
    # on node-x it would leave 3.8Gi of s2's memory idle with no cpu to use it, on node-y 2Gi
    def fill(tie: str) -> dict[str, list[str]]:
        scheduler, pods, (x, y) = planned(tmp_path, [
            pod("anchor-x", cpu="1", memory="100Mi"), pod("anchor-y", cpu="1", memory="1900Mi"),
            pod("loose", cpu="1", memory="100Mi")], {"node-x": ("anchor-x",), "node-y": ("anchor-y",)})
        template = scheduler.templates[0]
        assert (x.price(), y.price()) == pytest.approx((1.0 + PER_NODE, 1.0 + PER_NODE))
        rest = _fill_anchored([x, y], [_Loose(pods["loose"], Requirements(), template)], scheduler.topology, tie=tie)
        assert not rest and x.price() + y.price() == pytest.approx(3.0 + 2 * PER_NODE)   # either way the same growth
        return {n.hostname: [p.name for p in n.pods] for n in (x, y)}

    assert fill("tightest") == {"node-x": ["anchor-x", "loose"], "node-y": ["anchor-y"]}   # the first of equals
    assert fill("stranded") == {"node-x": ["anchor-x"], "node-y": ["anchor-y", "loose"]}


def test_a_templates_answers_to_which_types_hold_an_amount_are_kept_and_stay_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from karpy.controller.provisioning.scheduling import nodes
    scheduler, _, _ = planned(tmp_path, [pod("p", cpu="1")], {})
    template = scheduler.templates[0]
    monkeypatch.setattr(nodes, "HOLDING_KEPT", 3)                 # past it, the kept answers start again
    rng = np.random.default_rng(2)
    columns = template.allocatable.shape[1]
    amounts: list[np.ndarray] = [np.asarray(rng.integers(0, 2 * int(template.allocatable.max()) + 1, columns))
                                 for _ in range(5)]
    for used in amounts * 3:
        held = template.holding(used)
        assert held.tolist() == (template.allocatable >= used).all(axis=1).tolist()
        assert not held.flags.writeable                               # shared: nobody may change it
    assert len(template._holding) <= 3
    assert template.holding(amounts[0]) is template.holding(amounts[0].copy())   # equal amounts share one answer
    huge = np.array([10**30] * columns, dtype=object)                # Python integers: worked out, never kept
    assert not template.holding(huge).any()


def test_taking_pods_off_a_node_leaves_it_as_if_only_the_others_had_come(tmp_path: Path) -> None:
    ported = [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "1"}},
               "ports": [{"containerPort": 80, "hostPort": 8080}]}]
    pods = [pod("a", cpu="1", memory="1Gi"), pod("b", cpu="500m", memory="3Gi"), pod("c", cpu="1500m"),
            pod("d", containers=ported)]
    scheduler, by_name, (whole, only_b) = planned(tmp_path, pods, {"whole": ("a", "b", "c", "d"), "only-b": ("b",)})
    assert whole.host_ports and whole.options.tolist() != only_b.options.tolist()
    whole.remove([by_name["d"], by_name["a"], by_name["c"]])
    assert [p.name for p in whole.pods] == ["b"]
    assert whole.used.tolist() == only_b.used.tolist()
    assert whole.options.tolist() == only_b.options.tolist() and whole.price() == only_b.price()
    assert whole.host_ports == only_b.host_ports == frozenset()
    whole.remove([by_name["b"]])
    assert whole.pods == [] and not whole.used.any()


def test_rooms_kept_from_one_search_to_the_next_catch_up_with_every_node_changed_in_between(tmp_path: Path) -> None:
    scheduler, pods, (a, b, c) = planned(tmp_path, [
        pod("anchor-a", cpu="100m", memory="100Mi"), pod("x", cpu="900m", memory="1Gi"), pod("y", cpu="1", memory="2Gi"),
        pod("anchor-b", cpu="1", memory="100Mi"), pod("anchor-c", cpu="2", memory="1Gi")],
        {"node-a": ("anchor-a", "x"), "node-b": ("anchor-b",), "node-c": ("anchor-c",)})
    loose = [pods["x"], pods["y"]]
    kept = _Bins([a, b, c], loose, scheduler.topology)

    def assert_as_new() -> None:
        kept.catch_up()
        fresh = _Bins([a, b, c], loose, scheduler.topology)
        assert (kept.free.tolist(), kept.grow.tolist(), kept.price.tolist()) == \
            (fresh.free.tolist(), fresh.grow.tolist(), fresh.price.tolist())

    before = b.snapshot(whole=True)
    assert b.add(pods["y"], scheduler.topology) is None          # b grows past its type: its room and price change
    assert_as_new()
    a.remove([pods["x"]])
    assert_as_new()
    b.restore(before)                                             # put back as it was: the same objects again
    assert_as_new()
    assert kept.free[1].tolist() != kept.free[0].tolist()


def test_swaps_work_out_each_nodes_room_and_shortfall_as_one_node_alone_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default"), *diverse_pods(300, 3)], sort_keys=False))
    scheduler = Scheduler(load([str(path)], catalog="fake-400").snapshot)
    scheduler._place_all(list(scheduler.pending), {}, {})
    nodes = [n for n in scheduler.new_nodes if n.pods]
    movable = {id(p) for n in nodes for p in n.pods if pins_of(p, n, scheduler.topology) is not None}
    monkeypatch.setattr(optimiser, "REFRESH_BLOCK", 7)             # several blocks, the last one short
    swaps = _Swaps(nodes, movable)
    assert len(nodes) > 7 and len(nodes) % 7
    shortfalls = 0
    for i, n in enumerate(nodes):
        used = estimate(n.used).astype(float)
        fixed = used - sum((swaps.need[k] for k in swaps.held[i]), np.zeros_like(used))
        cheaper = [j for j in swaps.by_price.tolist() if swaps.price[j] < n.price() - 1e-12 and (swaps.alloc[j] >= fixed).all()]
        assert swaps.worth[i] == n.price()
        assert swaps.spare[i].tolist() == (swaps.alloc[n.cheapest()] - used).tolist()
        expected = used - swaps.alloc[cheaper[-1]] if cheaper else np.full(len(used), np.inf)
        assert swaps.short[i].tolist() == expected.tolist()
        shortfalls += bool(cheaper)
    assert 0 < shortfalls < len(nodes)


def test_a_nodes_price_with_more_is_kept_per_row_until_the_node_changes(tmp_path: Path) -> None:
    scheduler, by_name, (node, other) = planned(tmp_path, [pod("p", cpu="1"), pod("q", cpu="2", memory="3Gi"),
                                                           pod("r", cpu="500m")], {"n": ("p",), "o": ("r",)})
    rows = scheduler.rows
    q, r = rows.of(by_name["q"]), rows.of(by_name["r"])
    assert q is not None and r is not None
    first = node.option_with(q)
    assert first == node._option_with(q) and node.option_with(q) is first          # asked again: the kept answer
    assert node.option_with(r) == node._option_with(r) != first
    twin = node.clone()
    assert twin.add(by_name["q"], scheduler.topology) is None                       # a copy changes: its own answers
    assert twin.option_with(r) == twin._option_with(r) != node.option_with(r)
    before = node.snapshot()
    assert node.add(by_name["q"], scheduler.topology) is None
    assert node.option_with(q) == node._option_with(q) != first                     # the node changed: worked out again
    node.restore(before)
    assert node.option_with(q) == first and other.option_with(q) == other._option_with(q)


def test_a_templates_most_allocatable_per_mask_of_options_is_kept_and_stays_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from karpy.controller.provisioning.scheduling import nodes
    scheduler, _, (node,) = planned(tmp_path, [pod("p", cpu="1")], {"n": ("p",)})
    template = scheduler.templates[0]
    monkeypatch.setattr(nodes, "HOLDING_KEPT", 3)
    rng = np.random.default_rng(5)
    masks = [rng.integers(0, 2, len(template.instance_types)).astype(bool) | np.eye(1, len(template.instance_types), i, dtype=bool)[0]
             for i in range(4)]
    for mask in masks * 3:
        most = template.most_allocatable(mask)
        assert most.tolist() == template.allocatable[mask].max(axis=0).tolist() and not most.flags.writeable
    assert len(template._most) <= 3
    assert node.grow_room().tolist() == (template.allocatable[node.options].max(axis=0) - node.used).tolist()
    assert node.offering(node.cheapest()) == template.compatible(node.requirements)[2][node.cheapest()]


@pytest.mark.slow      # plans a batch of a few hundred pods five times
def test_a_large_batch_is_planned_in_chunks_to_the_same_plan_wherever_each_chunk_is_optimised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = [{"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}},
            *diverse_pods(300)]
    greedy = solve(tmp_path, *docs, optimize=False, catalog_name="fake-400")
    monkeypatch.setattr(scheduling, "CHUNK_PODS", 100)             # 300 pods: three chunks
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    forks = []
    fork = forked._start

    def counted(*args: Any) -> Any:
        forks.append(args)
        return fork(*args)

    def solved(processes: int) -> Results:
        forks.clear()
        with mock.patch.object(forked, "_start", counted):
            return Scheduler(load([str(path)], catalog="fake-400").snapshot, packing=PackingOptions(processes=processes)).solve()

    chunked = [solved(processes) for processes in (1, 2, 3)]
    # each chunk optimised in a process of its own, the last in LAST_CHUNK_PARTS (its nodes dealt in turn)
    assert len(forks) == 2 + scheduling.LAST_CHUNK_PARTS == 4
    best = chunked[0]
    assert plan_json(chunked[1]) == plan_json(best) == plan_json(chunked[2])   # here, or while the next is placed

    def cannot_fork(*_: Any) -> None:
        raise forked.ForkFailed("no processes left")

    with mock.patch.object(forked, "_start", cannot_fork):        # where no process starts, each is made here
        assert plan_json(Scheduler(load([str(path)], catalog="fake-400").snapshot,
                                   packing=PackingOptions(processes=2)).solve()) == plan_json(best)
    assert price(best) < price(greedy) and placed(best) == placed(greedy) and not best.unschedulable
    assert_nodes_hold_their_pods(best)
    names = [n.name for n in best.new_nodes]
    assert len(names) == len(set(names)) and not any(optimiser.PROVISIONAL in name for name in names)
    apart = [n.name for n in best.new_nodes for p in n.pods if p.labels.get("app") == "nginx"]
    assert len(apart) == 60 == len(set(apart))                       # hostname anti-affinity: one per node
    monkeypatch.setattr(scheduling, "CHUNK_PODS", 10_000)
    assert plan_json(solve(tmp_path, *docs, catalog_name="fake-400")) != plan_json(best)   # whole, it plans otherwise


def test_only_a_large_optimised_batch_without_limits_is_chunked_and_its_chunks_finish_after_the_last_is_placed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduling, "CHUNK_PODS", 3)
    calls: list[tuple[str, int]] = []

    def spy(packer: type, method: str) -> None:
        real = getattr(packer, method)

        def called(self: Any, nodes: Sequence[NewNode], **kwargs: Any) -> Any:
            calls.append((f"{packer.__name__}.{method}", sum(len(n.pods) for n in nodes)))
            return real(self, nodes, **kwargs)

        monkeypatch.setattr(packer, method, called)

    for packer in (optimiser.Optimiser, Greedy):
        spy(packer, "pack")
        spy(packer, "start")

    def chunks(count: int, *, optimize: bool = True, **spec: Any) -> list[tuple[str, int]]:
        calls.clear()
        results = solve(tmp_path, provisioner("default", **spec), *[pod(f"p-{i}", cpu="1") for i in range(count)],
                        optimize=optimize)
        assert len(placed(results)) == count
        return list(calls)

    assert chunks(5) == [("Optimiser.pack", 5)]                    # fewer than twice CHUNK_PODS: whole
    assert chunks(6) == [("Optimiser.start", 3)] * 2                # chunks, each finished after the last is placed
    # a pod per node (one host port): the last chunk's three nodes are dealt into two parts, optimised apart
    port: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9", "resources": {"requests": {"cpu": "1"}},
                            "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    calls.clear()
    solve(tmp_path, provisioner("default"), *[pod(f"p-{i}", **port) for i in range(6)])
    assert calls == [("Optimiser.start", 3), ("Optimiser.start", 2), ("Optimiser.start", 1)]
    assert chunks(6, limits={"resources": {"cpu": "1000"}}) == [("Optimiser.pack", 6)]   # limits they'd share: whole
    assert chunks(6, optimize=False) == [("Greedy.pack", 6)]       # Karpenter's greedy: whole, as Karpenter plans


@pytest.mark.slow      # plans a batch of a few hundred pods three times, eight fills each
def test_a_mid_sized_batchs_fills_made_in_processes_of_their_own_give_the_plan_made_here(tmp_path: Path) -> None:
    docs = [{"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}},
            *diverse_pods(300)]
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    def solved(processes: int | None) -> Results:
        return Scheduler(load([str(path)], catalog="fake-400").snapshot, packing=PackingOptions(processes=processes)).solve()

    plans = {processes: solved(processes) for processes in (None, 1, 2)}
    assert plan_json(plans[1]) == plan_json(plans[2])               # here, or in two processes: the same plan

    def cannot_fork(*_: object, **__: object) -> None:
        raise forked.ForkFailed("no processes left")

    with mock.patch.object(forked, "run_forked", cannot_fork):     # where no process starts, all are made here
        assert plan_json(solved(2)) == plan_json(plans[2])

    def contents(results: Results) -> list[tuple[str, list[str]]]:
        return sorted((n.instance_type.name, sorted(p.key for p in n.pods)) for n in results.new_nodes)

    # one fill after another, new nodes named as they open: the same nodes (a new one may be named otherwise)
    assert contents(plans[None]) == contents(plans[1])
