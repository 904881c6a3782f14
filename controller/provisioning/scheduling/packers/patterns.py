"""Column generation over packing patterns: how many nodes of which type, each holding which pods.

A pattern is one node of one instance type and how many pods of each class (same requests) it
holds, within the type's allocatable. The master program chooses how many nodes of each
pattern cover every class at the least cost; it starts from patterns a first-fit builds and
grows by pricing: the LP's duals value each class, and for each type the pattern of the
greatest value (a small knapsack: greedily for every type, exactly with HiGHS for the most
promising few) joins the master when it costs less than it is worth. A pattern costs what its
type costs with its pods (`pattern_cost`, exact per pattern: a burstable type's credits turn on
the pattern's cpu); a type's `price` is the most any of its patterns costs. The last master is
solved with integer node counts over the patterns generated. Deterministic: the same input
gives the same columns, the search is bounded by rounds and the solver by node limits, never
by the clock unless the caller passes a safety cap (`seconds`). Pure: numbers in, numbers out.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import time
import types
import warnings
from typing import Any, Callable

import numpy as np

from karpy.controller.provisioning.scheduling.nodes import dot

MAX_ROUNDS = 40                  # pricing rounds; each adds at most one pattern per type
EXACT_PRICING = 6                # types priced exactly (HiGHS) per round, besides the greedy for all
MIP_NODE_LIMIT = 2000            # branch-and-bound nodes for the integral master, at most...
MIP_NODE_WORK = 20_000           # ...and at most this many nodes x patterns: each node's LP grows with the patterns
KNAPSACK_NODE_LIMIT = 200
MIP_REL_GAP = 1e-4
TIE_PER_NODE = 1e-7              # $/h added per node in the master: ties in cost go to fewer nodes
# HiGHS's presolve stays on: without it a knapsack of a dozen classes took up to thousands of branch-and-bound
# nodes (tens of ms each, 100 s for a batch of 70 shapes), with it one. HiGHS prints a debug line to stdout now
# and then when it maps a solution back (ERGO-Code/HiGHS#2783); `karpy plan` sends what native code prints to
# stderr while it plans (commands.native_stdout_to_stderr), so the line never corrupts `-o json`
# HiGHS runs its feasibility-jump heuristic before every MIP's root node, a fixed cost (tens of ms) that dwarfs
# solving these small programs; the master and the knapsacks find feasible points without it
_HIGHS_MIP_OPTIONS = {"mip_heuristic_run_feasibility_jump": False}


def solver() -> types.ModuleType:
    """scipy.optimize, imported on first use: a plan whose pods never reach the column generation does not pay for
    its import (about 0.4 s). A search under a time cap imports it before its clock starts (optimiser.repack)."""
    return importlib.import_module("scipy.optimize")


def _milp(c: np.ndarray, *, options: dict[str, Any], **program: Any) -> Any:
    """scipy's milp with `_HIGHS_MIP_OPTIONS`, which scipy passes to HiGHS as they are (with a warning it
    gives for every option it does not list itself, silenced here)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unrecognized options detected", category=RuntimeWarning)
        return solver().milp(c, options={**options, **_HIGHS_MIP_OPTIONS}, **program)


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
        asked = asks > 0
        lowest = np.where(asked, rooms / np.where(asked, asks, 1.0), np.inf).min(axis=1)
        most = np.where(asked.any(axis=1), np.floor(lowest + 1e-9), caps)
        take = np.maximum(0, np.minimum(most, caps)).astype(np.int64)
        if step is None:
            counts[rows, starts] = take
        else:
            take[starts == step] = 0                  # each row took its own class first
            counts[:, step] += take
        rooms -= take[:, None] * asks
    return counts


def knapsack(value: np.ndarray, room: np.ndarray, need: np.ndarray, cap: np.ndarray, *,
             seconds: float | None = None, exact: bool = False) -> np.ndarray | None:
    """The pattern of the greatest total `value` that `room` holds, at most `cap` of each class, solved by HiGHS
    within a node limit (the best found then; `seconds`, when given, caps its time too), or with `exact` to proven
    optimality (for a bound); None when no class is worth anything or the solver fails."""
    useful = np.flatnonzero(value > 1e-12)
    if not len(useful):
        return None
    a = need[useful].T
    scale = np.where(room > 0, room, 1.0)
    limits: dict[str, float] = {"mip_rel_gap": 0.0} if exact else {"node_limit": KNAPSACK_NODE_LIMIT}
    if seconds is not None:
        limits["time_limit"] = seconds
    result = _milp(-value[useful], integrality=np.ones(len(useful)), bounds=solver().Bounds(0, cap[useful]),
                  constraints=solver().LinearConstraint(a / scale[:, None], -np.inf, room / scale + 1e-9),
                  options={**limits, "disp": False})
    if result.x is None or (exact and result.status != 0):
        return None
    out = np.zeros(len(value), dtype=np.int64)
    out[useful] = np.round(result.x).astype(np.int64)
    return out if ((need.T @ out) <= room + 1e-6).all() else None


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
    fits = np.array([[(alloc[j] >= need[c]).all() for j in range(k)] for c in range(m)], dtype=bool)
    if not fits.any(axis=1).all():
        return None
    # sizes relative to what the types offer, so no resource's unit dominates the ordering
    unit = np.maximum(alloc.max(axis=0), 1.0)
    size = (need / unit).max(axis=1)
    columns = _Patterns(m, cost)
    by_size = sorted(range(m), key=lambda c: (-size[c], c))
    (asks, least), counts, rooms = _asks(need.tolist()), count.tolist(), alloc.astype(float).tolist()

    def greedy(j: int, order: list[int]) -> np.ndarray:
        return np.array(_fill(order, rooms[j], asks, least, counts), dtype=np.int64)
    for j in range(k):
        for pattern in each_first(np.flatnonzero(fits[:, j]).tolist(), by_size, alloc[j].astype(float), need, count):
            columns.add(j, pattern)
    duals = np.zeros(m)
    for _ in range(MAX_ROUNDS):
        if until is not None and time.monotonic() > until:
            return None                 # each solve keeps to the cap; the rounds of them must too
        solved = _master(columns, count, caps, left, integral=False, seconds=seconds)
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
    solved = _master(columns, count, caps, left, integral=True, seconds=seconds)
    if solved is None:
        return None
    x, _ = solved
    out = []
    for j, pattern, n in zip(columns.types, columns.pods, x):
        if n > 0:
            out.append(Choice(j, tuple(int(v) for v in pattern), int(n)))
    return out


class _Patterns:
    """The patterns found: each a type, how many pods of each class a node of it holds, and what that costs. The
    master program is solved over them every round, so they are kept as the columns of a sparse classes x patterns
    matrix too, grown as they come (a pattern holds few of many classes)."""

    def __init__(self, classes: int, cost: Callable[[int, np.ndarray], float]) -> None:
        self.classes = classes
        self._cost = cost                          # what a node of type j holding a pattern costs
        self.types: list[int] = []
        self.pods: list[np.ndarray] = []
        self.costs: list[float] = []
        self._seen: set[tuple[int, bytes]] = set()
        self._rows: list[np.ndarray] = []         # per pattern, the classes it holds...
        self._held: list[np.ndarray] = []         # ...and how many of each

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
        self._rows.append(rows)
        self._held.append(pattern[rows].astype(float))
        return True

    def matrix(self) -> Any:
        """Pods of each class (rows) each pattern (columns) holds, as scipy's sparse CSC array."""
        starts = np.zeros(len(self._rows) + 1, dtype=np.int64)
        np.cumsum([len(rows) for rows in self._rows], out=starts[1:])
        return sparse().csc_array((np.concatenate(self._held), np.concatenate(self._rows), starts),
                                  shape=(self.classes, len(self._rows)))


def sparse() -> types.ModuleType:
    """scipy.sparse, imported on first use (as solver())."""
    return importlib.import_module("scipy.sparse")


def _master(columns: _Patterns, count: np.ndarray, caps: np.ndarray | None, left: np.ndarray | None, *,
            integral: bool, seconds: float | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The master program over the patterns `columns`: node counts per pattern (whole when `integral`) and the
    classes' duals."""
    a = columns.matrix()                                            # classes x patterns
    # a hair per node, so of two mixes of equal cost the one with fewer nodes wins
    cost = np.array(columns.costs) + TIE_PER_NODE
    blocks_a, blocks_lo, blocks_hi = [a], [count.astype(float)], [np.full(len(count), np.inf)]
    if caps is not None and left is not None and len(left):
        scale = np.maximum(caps.max(axis=0), 1.0)
        use = np.array([caps[j] / scale for j in columns.types], dtype=float).T   # limited resources x patterns
        blocks_a.append(sparse().csc_array(use)), blocks_lo.append(np.full(len(left), -np.inf))
        blocks_hi.append(np.maximum(left, 0) / scale)
    lo, hi = np.concatenate(blocks_lo), np.concatenate(blocks_hi)
    if not integral:
        # as A_ub x <= b_ub: -a x <= -count, use x <= left
        result = solver().linprog(cost, A_ub=sparse().vstack([-a] + blocks_a[1:], format="csc"),
                                  b_ub=np.concatenate([-blocks_lo[0]] + blocks_hi[1:]), bounds=(0, None), method="highs")
        if result.status != 0:
            return None
        return result.x, -result.ineqlin.marginals[:len(count)]
    # hundreds of near-equal patterns make a hard program whose later nodes seldom make the plan cheaper (the
    # placement after it drops what the cover over-provides); fewer nodes for more patterns bounds the work
    node_limit = max(1, min(MIP_NODE_LIMIT, MIP_NODE_WORK // len(columns)))
    upper = np.array([max(1.0, float(np.ceil(count[p > 0].sum() / max(1, p[p > 0].min())))) for p in columns.pods])
    result = _milp(cost, integrality=np.ones(len(columns)), bounds=solver().Bounds(0, upper),
                  constraints=solver().LinearConstraint(sparse().vstack(blocks_a, format="csc"), lo, hi),
                  options={"node_limit": node_limit, "mip_rel_gap": MIP_REL_GAP, "disp": False,
                           **({"time_limit": seconds} if seconds is not None else {})})
    if result.x is None:
        return None
    return np.round(result.x).astype(np.int64), np.zeros(len(count))
