"""Column generation over packing patterns: how many nodes of which type, each holding which pods.

A pattern is one node of one instance type and how many pods of each class (same requests) it
holds, within the type's allocatable. The master program chooses how many nodes of each
pattern cover every class at the least cost (one HiGHS model, grown a column per pattern, so each
round's LP starts from the last one's basis); it starts from patterns a first-fit builds and
grows by pricing: the LP's duals value each class, and for each type the pattern of the
greatest value (a small knapsack: greedily for every type, exactly with HiGHS for the most
promising few) joins the master when it costs less than it is worth. A pattern costs what its
type costs with its pods (`pattern_cost`, exact per pattern: a burstable type's credits turn on
the pattern's cpu); a type's `price` is the most any of its patterns costs. The last master is
solved with integer node counts over the patterns generated, or past MIP_COLUMNS patterns its LP's
counts are rounded up. Deterministic: the same input
gives the same columns, the search is bounded by rounds and the solver by node limits, never
by the clock unless the caller passes a safety cap (`seconds`). Pure: numbers in, numbers out.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import time
import types
from typing import Any, Callable

import numpy as np

from karpy.controller.provisioning.scheduling.nodes import dot, every

MAX_ROUNDS = 40                  # pricing rounds; each adds at most one pattern per type
EXACT_PRICING = 6                # types priced exactly (HiGHS) per round, besides the greedy for all
MIP_NODE_LIMIT = 2000            # branch-and-bound nodes for the integral master, at most...
MIP_NODE_WORK = 20_000           # ...and at most this many nodes x patterns: each node's LP grows with the patterns
KNAPSACK_NODE_LIMIT = 200
MIP_REL_GAP = 1e-4
MIP_COLUMNS = 1500               # patterns the integral master is solved over at most (past it: the LP rounded up)
INITIAL_TYPES = 4                # types each class starts on, past MIP_COLUMNS pairs of type and class
TIE_PER_NODE = 1e-7              # $/h added per node in the master: ties in cost go to fewer nodes
# HiGHS's presolve stays on: without it a knapsack of a dozen classes took up to thousands of branch-and-bound
# nodes (tens of ms each, 100 s for a batch of 70 shapes), with it one. HiGHS prints a debug line to stdout now
# and then when it maps a solution back (ERGO-Code/HiGHS#2783); `karpy plan` sends what native code prints to
# stderr while it plans (commands.native_stdout_to_stderr), so the line never corrupts `-o json`
# HiGHS runs its feasibility-jump heuristic before every MIP's root node, a fixed cost (tens of ms) that dwarfs
# solving these small programs; the master and the knapsacks find feasible points without it. One thread: HiGHS's
# worker threads are process-wide, and `karpy plan` forks processes that solve (a fork copies no thread), while
# the controller solves in threads of its own; these programs are too small to gain from more
_HIGHS_OPTIONS = {"mip_heuristic_run_feasibility_jump": False, "threads": 1}


def solver() -> types.ModuleType:
    """highspy (HiGHS), imported on first use: a plan whose pods never reach the column generation does not pay for
    its import. A search under a time cap imports it before its clock starts (optimiser.repack)."""
    return importlib.import_module("highspy")


def _highs(options: dict[str, Any]) -> Any:
    """A HiGHS instance that prints nothing, with `options` (and _HIGHS_OPTIONS) set. It is highspy's binding of
    HiGHS itself: highspy.Highs adds Python callbacks, and setting them in its constructor prints HiGHS's banner
    before output_flag can be turned off (ERGO-Code/HiGHS#2749)."""
    h = solver()._Highs()
    h.setOptionValue("output_flag", False)
    for name, value in {**options, **_HIGHS_OPTIONS}.items():
        h.setOptionValue(name, value)
    return h


def _solved(h: Any, *, mip: bool) -> bool:
    """Whether `h`'s run found a point to use: the optimum, or for a MIP stopped at a limit the best found."""
    highspy = solver()
    if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        return True
    return mip and h.getInfo().primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible


@dataclasses.dataclass(frozen=True)
class Choice:
    """`nodes` nodes of type `type_index`, each holding `pods[c]` pods of class c (at most)."""

    type_index: int
    pods: tuple[int, ...]
    nodes: int


def fill(order: list[int], room: np.ndarray, need: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Greedily the most pods of each class in `order` that `room` holds, at most `cap` of each."""
    return np.array(_fill(order, room.tolist(), *_asks(need.tolist()), cap.tolist()), dtype=np.int64)


Asks = list[list[tuple[int, float]]]        # per class, the resources it asks for (by index) and how much of each


def _asks(need: list[list[float]]) -> tuple[Asks, list[tuple[int, float]]]:
    """Per class, what it asks for (`Asks`); and the resources every class asks for, each with the least any class
    asks of it: once the room holds less than that of one of them, no class fits."""
    asks = [[(r, amount) for r, amount in enumerate(row) if amount > 0] for row in need]
    least = [(r, min(row[r] for row in need)) for r in range(len(need[0]) if need else 0)
             if all(row[r] > 0 for row in need)]
    return asks, least


def _fill(order: list[int], room: list[float], asks: Asks, least: list[tuple[int, float]], cap: list[float]) -> list[int]:
    """fill on Python floats: a class at a time over a handful of resources, where numpy's per-call cost is most
    of the work (the same arithmetic, so the same counts). It stops once a resource every class asks for has less
    room than the least any asks (`least`): every class after would take none."""
    counts = [0] * len(asks)
    for c in order:
        asked = asks[c]
        most = math.floor(min([room[r] / amount for r, amount in asked]) + 1e-9) if asked else int(cap[c])
        take = max(0, min(most, int(cap[c])))
        if take:
            counts[c] = take
            room = room.copy()
            for r, amount in asked:
                room[r] -= take * amount
            if any(room[r] / amount + 1e-9 < 1 for r, amount in least):
                break
    return counts


def each_first(first: list[int], order: list[int], room: np.ndarray, need: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """For each class c of `first`, fill() of [c] and then the other classes in `order`: one pattern per row, all
    filled at once, a class at a time over arrays (the same arithmetic as _fill, so the same counts)."""
    starts = np.asarray(first, dtype=np.int64)
    counts = np.zeros((len(starts), len(need)), dtype=np.int64)
    if not len(starts):
        return counts
    rooms = np.tile(np.asarray(room, dtype=float), (len(starts), 1))
    rows = np.arange(len(starts))
    for step in [None, *order]:
        asks = need[starts] if step is None else need[step][None, :]
        caps = (cap[starts] if step is None else np.full(len(starts), cap[step])).astype(np.int64)
        take = np.maximum(0, np.minimum(_most_held(rooms, asks), caps)).astype(np.int64)
        if step is None:
            counts[rows, starts] = take
        else:
            take[starts == step] = 0                  # each row took its own class first
            counts[:, step] += take
        rooms -= take[:, None] * asks
    return counts


def _most_held(room: np.ndarray, need: np.ndarray) -> np.ndarray:
    """How many pods asking `need` fit in `room` (resources along the last axis, the others broadcast): the fewest
    over the resources asked for, as _fill counts them; inf where nothing is asked."""
    asked = need > 0
    most: np.ndarray = np.floor(np.where(asked, room / np.where(asked, need, 1.0), np.inf).min(axis=-1) + 1e-9)
    return most


def knapsack(value: np.ndarray, room: np.ndarray, need: np.ndarray, cap: np.ndarray, *,
             seconds: float | None = None, exact: bool = False) -> np.ndarray | None:
    """The pattern of the greatest total `value` that `room` holds, at most `cap` of each class, solved by HiGHS
    within a node limit (the best found then; `seconds`, when given, caps its time too), or with `exact` to proven
    optimality (for a bound); None when no class is worth anything or the solver fails."""
    useful = np.flatnonzero(value > 1e-12)
    if not len(useful):
        return None
    scale = np.where(room > 0, room, 1.0)                               # each resource's room scaled to 1
    limits: dict[str, Any] = {"mip_rel_gap": 0.0} if exact else {"mip_max_nodes": KNAPSACK_NODE_LIMIT}
    if seconds is not None:
        limits["time_limit"] = seconds
    h = _highs(limits)
    inf = solver().kHighsInf
    _add_rows(h, np.full(len(room), -inf), room / scale + 1e-9)
    _add_columns(h, -value[useful], cap[useful].astype(float), [np.arange(len(room))] * len(useful),
                 list(need[useful] / scale))
    _integral(h, len(useful))
    h.run()
    if not _solved(h, mip=not exact):
        return None
    out = np.zeros(len(value), dtype=np.int64)
    out[useful] = np.round(np.array(h.getSolution().col_value)).astype(np.int64)
    return out if ((need.T @ out) <= room + 1e-6).all() else None


def _add_rows(h: Any, lower: np.ndarray, upper: np.ndarray) -> None:
    """Rows between `lower` and `upper`, empty (the columns added after fill them), added to HiGHS model `h`."""
    h.addRows(len(lower), lower, upper, 0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))


def _add_columns(h: Any, cost: np.ndarray, upper: np.ndarray, rows: list[np.ndarray], values: list[np.ndarray]) -> None:
    """Columns of `cost`, bounds 0 to `upper`, and the entries `values` in `rows`, added to HiGHS model `h`."""
    starts = np.zeros(len(rows), dtype=np.int32)
    if len(rows) > 1:
        np.cumsum([len(r) for r in rows[:-1]], out=starts[1:])
    index = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, dtype=np.int32)
    value = np.concatenate(values).astype(float) if values else np.zeros(0)
    h.addCols(len(rows), np.asarray(cost, dtype=float), np.zeros(len(rows)), np.asarray(upper, dtype=float),
              len(index), starts, index, value)


def _integral(h: Any, count: int) -> None:
    """Every one of `h`'s `count` columns made integer."""
    h.changeColsIntegrality(count, np.arange(count, dtype=np.int32),
                            np.full(count, solver().HighsVarType.kInteger))


def cover(need: np.ndarray, count: np.ndarray, alloc: np.ndarray, price: np.ndarray, *,
          caps: np.ndarray | None = None, left: np.ndarray | None = None, seconds: float | None = None,
          pattern_cost: Callable[[int, np.ndarray], float] | None = None) -> list[Choice] | None:
    """The cheapest nodes found for `count[c]` pods of each class c of requests `need[c]`.

    `alloc[j]` and `price[j]` describe type j (`price[j]`: the most a node of it costs); `pattern_cost(j,
    pattern)`, when given, what a node of type j holding `pattern` costs (else `price[j]`). `caps[j]` is its
    capacity in the limited resources, `left` what the limits still allow (both None: no limits). `seconds`: a
    safety cap on the whole search's time (None: none, the plan depends on the input alone). None when no pattern
    mix covers every class (a class no type holds, or the limits), or when the cap cuts the search short."""
    until = None if seconds is None else time.monotonic() + seconds
    m, k = len(need), len(alloc)

    def cost(j: int, pattern: np.ndarray) -> float:
        return float(price[j]) if pattern_cost is None else pattern_cost(j, pattern)
    fits = every(alloc[None, :, :] >= need[:, None, :])                # classes x types: a node holds one pod
    if not fits.any(axis=1).all():
        return None
    # sizes relative to what the types offer, so no resource's unit dominates the ordering
    unit = np.maximum(alloc.max(axis=0), 1.0)
    size = (need / unit).max(axis=1)
    columns = _Patterns(cost)
    by_size = sorted(range(m), key=lambda c: (-size[c], c))
    (asks, least), counts, rooms = _asks(need.tolist()), count.tolist(), alloc.astype(float).tolist()

    def greedy(j: int, order: list[int]) -> np.ndarray:
        return np.array(_fill(order, rooms[j], asks, least, counts), dtype=np.int64)
    starts = _first_patterns(need, count, alloc, price, fits)
    for j in range(k):
        for pattern in each_first(starts[j], by_size, alloc[j].astype(float), need, count):
            columns.add(j, pattern)
    duals = np.zeros(m)
    master = _Master(count, caps, left)
    for _ in range(MAX_ROUNDS):
        if until is not None and time.monotonic() > until:
            return None                 # each solve keeps to the cap; the rounds of them must too
        solved = master.solve(columns, integral=False, seconds=seconds)
        if solved is None:
            return None
        _, duals = solved
        candidates = []
        for j in range(k):
            room = alloc[j].astype(float)
            weight = need / np.maximum(room, 1.0)
            best, best_value = None, 0.0
            for density in (duals / np.maximum(weight.max(axis=1), 1e-12), duals / np.maximum(weight.sum(axis=1), 1e-12)):
                order = [c for c in sorted(range(m), key=lambda c: (-density[c], c)) if duals[c] > 1e-12 and fits[c, j]]
                pattern = greedy(j, order)
                value = dot(duals, pattern)
                if value > best_value + 1e-12:
                    best, best_value = pattern, value
            candidates.append(((cost(j, best) if best is not None else price[j]) - best_value, j, best))
        candidates.sort(key=lambda x: (x[0], x[1]))
        added = 0
        for reduced, j, column in candidates:
            if reduced < -1e-9 and column is not None and columns.add(j, column):
                added += 1
        # exact pricing for the types the greedy found most promising, once the greedy finds no pattern worth
        # adding (with one class the greedy's pattern, as many pods as fit, is already exact)
        for _, j, _ in candidates[:EXACT_PRICING if m > 1 and not added else 0]:
            exact = knapsack(duals, alloc[j].astype(float), need, count, seconds=seconds)
            if exact is not None and cost(j, exact) - dot(duals, exact) < -1e-9 and columns.add(j, exact):
                added += 1
        if not added:
            break
    if until is not None and time.monotonic() > until:
        return None
    # whole node counts over every pattern found: by HiGHS's branch and bound while the patterns are few; past
    # MIP_COLUMNS its root alone took seconds, and the LP's counts rounded up do as well (the placement after it opens
    # a pattern's nodes only while pods are left for them, so what rounding up adds is not launched)
    integral = len(columns) <= MIP_COLUMNS or master.limits is not None
    solved = master.solve(columns, integral=integral, seconds=seconds)
    if solved is None:
        return None
    x = solved[0] if integral else np.ceil(solved[0] - 1e-9).astype(np.int64)
    out = []
    for j, pattern, n in zip(columns.types, columns.pods, x):
        if n > 0:
            out.append(Choice(j, tuple(int(v) for v in pattern), int(n)))
    return out


def _first_patterns(need: np.ndarray, count: np.ndarray, alloc: np.ndarray, price: np.ndarray,
                    fits: np.ndarray) -> list[list[int]]:
    """Per type, the classes a first pattern of it takes first (each_first): every class it holds, or past
    MIP_COLUMNS pairs of type and class, each class only on the INITIAL_TYPES types where a node full of it
    costs least per pod (pricing adds the others' patterns as the duals call for them). A batch of many shapes
    otherwise began with thousands of patterns, and each round's LP priced them all."""
    m, k = fits.shape
    if m * k <= MIP_COLUMNS:
        return [np.flatnonzero(fits[:, j]).tolist() for j in range(k)]
    held = np.minimum(_most_held(alloc[None, :, :], need[:, None, :]), count[:, None])   # pods of each class a node holds
    per_pod = np.where(fits & (held > 0), price[None, :] / np.maximum(held, 1.0), np.inf)
    starts: list[list[int]] = [[] for _ in range(k)]
    for c in range(m):
        for j in np.lexsort((np.arange(k), per_pod[c]))[:INITIAL_TYPES].tolist():
            if np.isfinite(per_pod[c, j]):
                starts[j].append(c)
    return starts


class _Patterns:
    """The patterns found: each a type, how many pods of each class a node of it holds, and what that costs; and,
    as the master's columns take them, the classes each holds and how many of each (a pattern holds few of many
    classes)."""

    def __init__(self, cost: Callable[[int, np.ndarray], float]) -> None:
        self._cost = cost                          # what a node of type j holding a pattern costs
        self.types: list[int] = []
        self.pods: list[np.ndarray] = []
        self.costs: list[float] = []
        self._seen: set[tuple[int, bytes]] = set()
        self.rows: list[np.ndarray] = []          # per pattern, the classes it holds...
        self.held: list[np.ndarray] = []          # ...and how many of each

    def __len__(self) -> int:
        return len(self.types)

    def add(self, j: int, pattern: np.ndarray) -> bool:
        """Add `pattern` on type j unless it holds nothing or is known."""
        pattern = np.asarray(pattern, dtype=np.int64)
        key = (j, pattern.tobytes())
        if not pattern.any() or key in self._seen:
            return False
        self._seen.add(key)
        self.types.append(j)
        self.pods.append(pattern)
        self.costs.append(self._cost(j, pattern))
        rows = np.flatnonzero(pattern)
        self.rows.append(rows)
        self.held.append(pattern[rows].astype(float))
        return True


class _Master:
    """The master program over the patterns found so far, kept as one HiGHS model that grows a column per pattern
    as they come: each round's LP starts from the last round's optimal basis, a few pivots where solving it anew
    took most of a many-shape batch's time. Rows: the classes (at least `count` pods of each), then the limited
    resources (at most what the limits `left` allow, scaled by the largest capacity)."""

    def __init__(self, count: np.ndarray, caps: np.ndarray | None, left: np.ndarray | None) -> None:
        self.count = count
        # per type its capacity in the limited resources, and what the limits allow, scaled by the largest capacity
        self.limits: tuple[np.ndarray, np.ndarray] | None = None
        if caps is not None and left is not None and len(left):
            scale = np.maximum(caps.max(axis=0), 1.0)
            self.limits = (caps / scale, np.maximum(left, 0) / scale)
        self.highs = _highs({})
        inf = solver().kHighsInf
        lower, upper = count.astype(float), np.full(len(count), inf)
        if self.limits is not None:
            lower = np.concatenate([lower, np.full(len(self.limits[1]), -inf)])
            upper = np.concatenate([upper, self.limits[1]])
        _add_rows(self.highs, lower, upper)
        self.columns = 0                                   # patterns in the model so far

    def solve(self, patterns: _Patterns, *, integral: bool, seconds: float | None) -> tuple[np.ndarray, np.ndarray] | None:
        """Node counts per pattern (whole when `integral`: the last solve) and the classes' duals, over every
        pattern found; None when the program has no solution."""
        self._take(patterns)
        h = self.highs
        if integral:
            # hundreds of near-equal patterns make a hard program whose later nodes seldom make the plan cheaper (the
            # placement after it drops what the cover over-provides); fewer nodes for more patterns bounds the work
            n = len(patterns)
            upper = np.array([max(1.0, float(np.ceil(self.count[p > 0].sum() / max(1, p[p > 0].min())))) for p in patterns.pods])
            h.changeColsBounds(n, np.arange(n, dtype=np.int32), np.zeros(n), upper)
            _integral(h, n)
            h.setOptionValue("mip_max_nodes", max(1, min(MIP_NODE_LIMIT, MIP_NODE_WORK // n)))
            h.setOptionValue("mip_rel_gap", MIP_REL_GAP)
        if seconds is not None:
            h.setOptionValue("time_limit", seconds)
        h.run()
        if not _solved(h, mip=integral):
            return None
        solution = h.getSolution()
        x = np.array(solution.col_value)
        if integral:
            return np.round(x).astype(np.int64), np.zeros(len(self.count))
        return x, np.array(solution.row_dual)[:len(self.count)]

    def _take(self, patterns: _Patterns) -> None:
        """The patterns not yet in the model added as its columns, each costing a hair more per node (so of two
        mixes of equal cost the one with fewer nodes wins)."""
        new = range(self.columns, len(patterns))
        if not len(new):
            return
        rows, values = [patterns.rows[k] for k in new], [patterns.held[k] for k in new]
        if self.limits is not None:
            use, _ = self.limits
            limit_rows = len(self.count) + np.arange(use.shape[1])
            rows = [np.concatenate([r, limit_rows]) for r in rows]
            values = [np.concatenate([v, use[patterns.types[k]]]) for v, k in zip(values, new)]
        _add_columns(self.highs, np.array(patterns.costs[self.columns:]) + TIE_PER_NODE,
                     np.full(len(new), solver().kHighsInf), rows, values)
        self.columns = len(patterns)
