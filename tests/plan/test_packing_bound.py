"""The LP lower bound and the pattern generator behind the optimising packer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from bench.bound import lower_bound, pattern_bound
from bench.cost import many_shapes
from karpy.controller.provisioning.scheduling.packers import PackingOptions, optimiser, patterns
from karpy.controller.provisioning.scheduling.packers.patterns import cover
from karpy.controller.provisioning.scheduling.scheduler import Scheduler
from karpy.plan.inputs import load
from tests.builders import catalog, instance_type, pod, provisioner
from tests.plan.test_optimize import ANTI, CATALOG

LINEAR = catalog(   # price in step with size: the bound is what the pods' requests cost, plus overhead
    instance_type("one", cpu="1", memory="2Gi", pods="10", price=1.0),
    instance_type("four", cpu="4", memory="8Gi", pods="40", price=4.0),
)


def scheduler(tmp_path: Path, *documents: dict[str, Any], optimize: bool = True) -> Scheduler:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all(list(documents), sort_keys=False))
    return Scheduler(load([str(path)], catalog="aws").snapshot, packing=PackingOptions(optimize=optimize))


def cost(s: Scheduler) -> tuple[float, float]:
    """(the bound, the plan's $/h) for a scheduler's batch."""
    bound = lower_bound(s.templates[0], s.pending)
    return bound, sum(n.offering.price_per_hour for n in s.solve().new_nodes)


def test_the_bound_is_below_both_the_greedy_and_the_optimiser(tmp_path: Path) -> None:
    docs = [CATALOG, provisioner("default")] + [pod(f"db-{i}", cpu="1", labels={"app": "db"}, affinity=ANTI)
                                                 for i in range(3)] + [
        pod(f"w-{i}", cpu=c, memory=m) for i, (c, m) in enumerate([("250m", "1Gi"), ("1500m", "512Mi"), ("3", "6Gi")] * 4)]
    bound, greedy = cost(scheduler(tmp_path, *docs, optimize=False))
    _, best = cost(scheduler(tmp_path, *docs))
    assert 0 < bound <= best <= greedy


def test_the_bound_pays_for_a_node_per_pod_anti_affinity_keeps_apart(tmp_path: Path) -> None:
    docs = [LINEAR, provisioner("default")] + [pod(f"db-{i}", cpu="100m", memory="100Mi", labels={"app": "db"},
                                                   affinity=ANTI) for i in range(5)]
    apart, _ = cost(scheduler(tmp_path, *docs))
    together, _ = cost(scheduler(tmp_path, *[LINEAR, provisioner("default")] + [
        pod(f"w-{i}", cpu="100m", memory="100Mi") for i in range(5)]))
    assert apart >= 5 * 1.0 - 1e-9                # five nodes of the smallest type at least
    assert together < 1.0                         # half a cpu of requests: a fraction of one node


def test_patterns_cover_every_pod_within_each_type() -> None:
    need = np.array([[1.0, 1.0], [3.0, 3.0], [2.0, 0.5]])
    count = np.array([7.0, 3.0, 5.0])
    alloc = np.array([[4.0, 4.0], [8.0, 8.0]])
    price = np.array([1.0, 1.9])
    choices = cover(need, count, alloc, price)
    assert choices is not None
    held = np.zeros(3)
    for ch in choices:
        assert (np.array(ch.pods) @ need <= alloc[ch.type_index] + 1e-9).all()
        held += ch.nodes * np.array(ch.pods)
    assert (held >= count).all()
    total = sum(ch.nodes * price[ch.type_index] for ch in choices)
    # 26 cpu of requests: three large nodes and a small one hold them exactly (3+3+2, 3+2+2+1, 2+2+1+1+1+1, 1+1)
    assert abs(total - (3 * 1.9 + 1.0)) < 1e-9


def test_patterns_are_none_when_no_type_holds_a_class() -> None:
    assert cover(np.array([[9.0]]), np.array([1.0]), np.array([[4.0], [8.0]]), np.array([1.0, 2.0])) is None


def random_classes(seed: int, *, classes: int, largest: int, replicas: tuple[int, int],
                   size: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Classes of random requests in two resources (need, count) and nine types of three sizes and three shapes
    (alloc, price), priced a little under their size."""
    rng = np.random.default_rng(seed)
    need = rng.integers(1, largest, size=(classes, 2)).astype(float)
    count = rng.integers(*replicas, size=classes).astype(float)
    alloc = np.array([[size * s, size * s * r] for s in (1, 2, 4) for r in (0.5, 1.0, 2.0)])
    return need, count, alloc, np.array([float(a.sum()) ** 0.9 for a in alloc])


def test_past_its_safety_cap_the_search_stops_between_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # each solve keeps to the cap by itself; a search of many rounds of them must stop too, not run them all
    need, count, alloc, price = random_classes(7, classes=12, largest=9, replicas=(5, 40), size=8.0)
    solves: list[float] = []                  # each master solve, and how long it is made to take
    real = patterns._Master.solve

    def counted_solve(*args: Any, **kwargs: Any) -> Any:
        time.sleep(solves[-1] if solves else 0.0)
        solves.append(solves[-1] if solves else 0.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(patterns._Master, "solve", counted_solve)
    assert cover(need, count, alloc, price) is not None
    rounds = len(solves)
    solves[:] = [0.05]                        # now each solve takes 50 ms: four fit in the cap
    assert cover(need, count, alloc, price, seconds=0.2) is None
    assert rounds > 8 and len(solves) - 1 <= 6


def test_a_master_grown_a_pattern_at_a_time_solves_as_one_built_at_once() -> None:
    # each round's LP starts from the last one's basis: it must reach the optimum a program built whole reaches
    need, count, alloc, price = random_classes(5, classes=20, largest=9, replicas=(2, 30), size=16.0)
    def priced(j: int, pattern: np.ndarray) -> float:
        return float(price[j])

    found = patterns._Patterns(priced)
    order = list(range(len(need)))
    for j in range(len(alloc)):
        for pattern in patterns.each_first(order, order, alloc[j], need, count):
            found.add(j, pattern)
    grown = patterns._Master(count, None, None)
    values = []
    for upto in (len(found) // 3, 2 * len(found) // 3, len(found)):
        part = patterns._Patterns(priced)
        for j, pods in zip(found.types[:upto], found.pods[:upto]):
            part.add(j, pods)
        solved = grown.solve(part, integral=False, seconds=None)
        assert solved is not None
        values.append(float(solved[1] @ count))         # the LP's value, by its duals
    whole = patterns._Master(count, None, None).solve(found, integral=False, seconds=None)
    assert whole is not None
    x, duals = whole
    assert values[0] >= values[1] >= values[2] - 1e-9    # more patterns: never dearer
    assert abs(values[-1] - float(duals @ count)) < 1e-6
    assert abs(float(duals @ count) - float((np.array(found.costs) + patterns.TIE_PER_NODE) @ x)) < 1e-6


@pytest.mark.parametrize("classes", [10, 400])
def test_the_last_master_is_integral_while_patterns_are_few_else_its_lp_rounded_up(
        classes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # past MIP_COLUMNS patterns the integral master's root alone took seconds: the LP's counts, rounded up, still
    # cover every class
    need, count, alloc, price = random_classes(3, classes=classes, largest=9, replicas=(1, 20), size=16.0)
    kinds: list[tuple[bool, int]] = []              # per solve: whether integral, and the patterns then
    real = patterns._Master.solve

    def solve(master: Any, found: Any, *, integral: bool, seconds: float | None) -> Any:
        kinds.append((integral, len(found)))
        return real(master, found, integral=integral, seconds=seconds)

    monkeypatch.setattr(patterns._Master, "solve", solve)
    choices = cover(need, count, alloc, price)
    assert choices is not None
    held = np.zeros(len(need))
    for ch in choices:
        assert (np.array(ch.pods) @ need <= alloc[ch.type_index] + 1e-9).all()
        held += ch.nodes * np.array(ch.pods)
    assert (held >= count).all()
    last_is_integral, patterns_then = kinds[-1]
    assert not any(flag for flag, _ in kinds[:-1])      # every round's program is the LP
    assert last_is_integral == (patterns_then <= patterns.MIP_COLUMNS)
    assert last_is_integral == (classes == 10), f"{patterns_then} patterns"


def test_past_mip_columns_each_class_starts_on_the_types_it_costs_least_on() -> None:
    need, count, alloc, price = random_classes(9, classes=200, largest=9, replicas=(1, 20), size=16.0)
    fits = np.asarray((alloc[None, :, :] >= need[:, None, :]).all(axis=2))
    assert fits.size > patterns.MIP_COLUMNS
    starts = patterns._first_patterns(need, count, alloc, price, fits)
    per_class = [[j for j, first in enumerate(starts) if c in first] for c in range(len(need))]
    for c, types in enumerate(per_class):
        assert 1 <= len(types) <= patterns.INITIAL_TYPES
        held = np.minimum(np.floor((alloc / need[c]).min(axis=1) + 1e-9), count[c])
        per_pod = np.where(fits[c] & (held > 0), price / np.maximum(held, 1.0), np.inf)
        assert per_pod[types].max() <= np.sort(per_pod)[patterns.INITIAL_TYPES - 1] + 1e-12
    few = patterns._first_patterns(need[:10], count[:10], alloc, price, fits[:10])
    assert few == [np.flatnonzero(fits[:10, j]).tolist() for j in range(len(alloc))]


def test_fill_takes_what_the_greedy_over_numpy_arrays_takes() -> None:
    rng = np.random.default_rng(3)
    for at in range(400):                     # the second half: every class asks for every resource (fill stops early)
        need = rng.integers(at // 200, 9, size=(12, 3)).astype(float) * rng.choice([0.25, 1.0, 1000.0], size=3)
        cap = rng.integers(0, 20, size=12).astype(float)
        room = rng.integers(1, 60, size=3).astype(float) * need.max(axis=0).clip(1.0)
        order = rng.permutation(12).tolist()
        counts, left = np.zeros(12, dtype=np.int64), room.copy()
        for c in order:                       # the greedy, written over arrays
            asked = need[c] > 0
            most = int(np.floor((left[asked] / need[c][asked]).min() + 1e-9)) if asked.any() else int(cap[c])
            take = max(0, min(most, int(cap[c])))
            counts[c] = take
            left = left - take * need[c]
        assert patterns.fill(order, room, need, cap).tolist() == counts.tolist()


def test_each_first_fills_as_fill_does_with_each_class_moved_to_the_front() -> None:
    rng = np.random.default_rng(5)
    for at in range(400):                     # the second half: every class asks for every resource
        m = int(rng.integers(1, 15))
        need = rng.integers(at // 200, 9, size=(m, 3)).astype(float) * rng.choice([0.25, 1.0, 1000.0, 0.1, 1 / 3], size=3)
        cap = rng.integers(0, 20, size=m).astype(float)
        room = rng.integers(1, 60, size=3).astype(float) * need.max(axis=0).clip(1.0) + rng.choice([0.0, 0.3, 1 / 7])
        order = rng.permutation(m).tolist()
        first = sorted(rng.choice(m, size=int(rng.integers(0, m + 1)), replace=False).tolist())
        each = patterns.each_first(first, order, room, need, cap)
        assert each.shape == (len(first), m)
        for row, c in zip(each.tolist(), first):
            assert row == patterns.fill([c] + [d for d in order if d != c], room, need, cap).tolist()


def test_exact_pricing_runs_only_in_rounds_whose_greedy_pricing_adds_no_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    # each exact pricing is a MIP: run in every round, a batch of many shapes took minutes
    need, count, alloc, price = random_classes(11, classes=30, largest=16, replicas=(1, 12), size=16.0)
    columns: list[Any] = []
    at_round: list[int] = []                  # the patterns there were when each round's LP was solved
    exact_calls: list[tuple[int, int]] = []   # (round, patterns added in the round before this exact pricing)
    real_solve, real_knapsack = patterns._Master.solve, patterns.knapsack

    def solve(master: Any, found: Any, *args: Any, **kwargs: Any) -> Any:
        columns[:] = [found]
        at_round.append(len(found))
        return real_solve(master, found, *args, **kwargs)

    def knapsack(*args: Any, **kwargs: Any) -> Any:
        exact_calls.append((len(at_round), len(columns[0]) - at_round[-1]))
        return real_knapsack(*args, **kwargs)

    monkeypatch.setattr(patterns._Master, "solve", solve)
    monkeypatch.setattr(patterns, "knapsack", knapsack)
    assert cover(need, count, alloc, price) is not None
    assert exact_calls, "the greedy alone found every pattern: the case tests nothing"
    assert len(at_round) > 2
    for i, (round_, added) in enumerate(exact_calls):   # only the round's earlier exact pricings added patterns
        earlier = sum(1 for r, _ in exact_calls[:i] if r == round_)
        assert added <= earlier, f"round {round_}: exact pricing after the greedy added {added} patterns"


LOPSIDED = catalog(   # one type rich in cpu, one in memory, both cheap; the balanced one dearer
    instance_type("cpu-heavy", cpu="8", memory="4Gi", pods="20", price=1.0),
    instance_type("memory-heavy", cpu="2", memory="16Gi", pods="20", price=1.0),
    instance_type("balanced", cpu="8", memory="16Gi", pods="20", price=3.0),
)


def test_the_pattern_bound_holds_each_pod_on_one_node(tmp_path: Path) -> None:
    # four pods of 1.5 cpu / 3Gi: the lopsided types hold one each ($4 in all), the balanced type all four ($3);
    # the resource LP takes cpu from the one and memory from the other, as no node can
    s = scheduler(tmp_path, LOPSIDED, provisioner("default"), *[pod(f"p-{i}", cpu="1500m", memory="3Gi") for i in range(4)])
    resources, patterns = lower_bound(s.templates[0], s.pending), pattern_bound(s.templates[0], s.pending)
    plan = sum(n.cost_per_hour for n in s.solve().new_nodes)
    per_node = s.templates[0].node_costs.per_hour               # one node's volume and address
    assert resources < 1.5 < patterns
    assert abs(patterns - (3.0 + per_node)) < 1e-9 and abs(plan - (3.0 + per_node)) < 1e-6


def test_the_pattern_bound_is_never_above_a_plan(tmp_path: Path) -> None:
    docs = [CATALOG, provisioner("default")] + [
        pod(f"w-{i}", cpu=c, memory=m) for i, (c, m) in enumerate([("250m", "1Gi"), ("1500m", "512Mi"), ("3", "6Gi")] * 5)]
    s = scheduler(tmp_path, *docs)
    bound = pattern_bound(s.templates[0], s.pending)
    assert lower_bound(s.templates[0], s.pending) <= bound + 1e-9
    assert bound <= sum(n.cost_per_hour for n in s.solve().new_nodes) + 1e-9


@pytest.mark.parametrize("capped", [False, True])
def test_the_solver_is_imported_when_first_used_or_before_a_capped_search_starts_its_clock(capped: bool,
                                                                                            tmp_path: Path) -> None:
    # a plan whose pods never reach the column generation pays no import; a capped search must not spend its cap
    # importing (highspy took 0.02-0.03 s here, where the controller's first chunk has 0.2 s)
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default")] + [
        pod(f"db-{i}", cpu="1", labels={"app": "db"}, affinity=ANTI) for i in range(2)], sort_keys=False))
    script = ("import sys\n"
              "from karpy.controller.provisioning.scheduling.packers import PackingOptions\n"
              "from karpy.controller.provisioning.scheduling.scheduler import Scheduler\n"
              "from karpy.plan.inputs import load\n"
              "loaded = 'highspy' in sys.modules\n"
              f"options = PackingOptions(max_seconds={1.0 if capped else None})\n"
              f"results = Scheduler(load([{str(path)!r}]).snapshot, packing=options).solve()\n"
              "print(loaded, 'highspy' in sys.modules, len(results.new_nodes))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.split() == ["False", str(capped), "2"], out.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to compare with one")
def test_a_batch_of_many_shapes_plans_the_same_on_one_core_as_on_two(tmp_path: Path) -> None:
    # HiGHS's default runs its LPs on as many threads as it finds cores, and its pivots (so the patterns, so the plan)
    # followed: 500 pods of 71 shapes cost $37.52/h planned on one core, $37.69/h on two
    path = tmp_path / "shapes.yaml"
    path.write_text(yaml.safe_dump_all(many_shapes(500, 1), sort_keys=False))
    cores = sorted(os.sched_getaffinity(0))
    plans = []
    for allowed in ({cores[0]}, set(cores[:2])):
        out = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "-o", "json"],
                             capture_output=True, text=True, timeout=300,
                             preexec_fn=lambda allowed=allowed: os.sched_setaffinity(0, allowed))  # type: ignore[misc]
        assert out.returncode == 0, out.stderr
        plans.append(out.stdout)
    assert plans[0] == plans[1]


@pytest.mark.parametrize(("batch", "fills"), [(100, 1), (1000, 8), (5000, 2), (20000, 1)])
def test_a_batch_tries_every_fill_up_to_whole_portfolio_pods_then_two_then_one(tmp_path: Path, batch: int,
                                                                                fills: int) -> None:
    # eight fills of a 5,000-pod batch took longer than a 20,000-pod batch in chunks; two cost as little
    s = scheduler(tmp_path, CATALOG, provisioner("default"), *[pod(f"db-{i}", cpu="1", labels={"app": "db"}, affinity=ANTI)
                                                               for i in range(2)], pod("web", cpu="500m"))
    s._place_in_turn(s.pending, {}, {})
    tried = optimiser.fills_for(s.new_nodes, s.topology, batch_pods=batch)
    assert len(tried) == fills
    assert tried == {1: [optimiser.LARGE_BATCH_FILL if batch > optimiser.PORTFOLIO_PODS[1] else
                         (optimiser.FILL_ORDERS[0], optimiser.FILL_TIES[0])],
                     2: list(optimiser.MID_BATCH_FILLS)}.get(fills, tried)
