"""The optimising packer: a cheaper set of new nodes for the pods the greedy put on new nodes.

The greedy (scheduler.py) places pods one at a time, largest first, growing nodes as
they fill, which leaves capacity paid for and unused. Here the pods whose placement
no other pod depends on ("loose" pods: no topology spread, no pod (anti-)affinity, no
host ports, and no hostname pod affinity counting on them) are lifted off the planned
nodes and packed again:

1. nodes left holding other pods keep them, shrink to the cheapest type that still
   holds them, and first take loose pods into the room they pay for anyway;
2. the rest are grouped into classes (same provisioner, same node requirements, same
   requests) and an integer program chooses how many nodes of which instance type
   (each priced at the cheapest offering those requirements allow, plus an optional
   per-node cost) hold how many pods of each class, within the provisioners'
   remaining limits; allocatable already has kube-reserved and daemonset overhead
   taken off, and `pods` is a resource like cpu, so max pods counts;
3. the chosen nodes are filled first-fit-decreasing through NewNode.add, which checks
   every scheduling rule again; pods that do not fit open nodes as the greedy would.

A loose pod that a zone (or other non-hostname) topology group counts stays in the
domain it was counted in, so every spread and affinity the greedy checked still holds.
The result replaces the greedy's only when it costs less: never more expensive.
Deterministic: inputs sorted, HiGHS (SciPy's milp, single-threaded for MIP) bounded by
a node limit; its time limit only guards against pathological inputs. Pure: no I/O, no
logging.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.resources import CPU, MEMORY, Resources
from karpy.controller.cloudprovider.types import Offering
from karpy.controller.provisioning.scheduling.nodes import NewNode, NodeTemplate
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.topology import AFFINITY, Topology

GROWTH_CANDIDATES = 32           # anchored nodes a leftover pod may grow, besides the group's new nodes
MAX_TYPES_PER_GROUP = 60          # the most price-efficient types for a group's demand, plus one small type per class
EFFICIENCY_BAND = 0.03           # types this close in price per unit of demand count as equally efficient
MIP_NODE_LIMIT = 300             # the solver's work bound: the same input gets the same answer
MIP_REL_GAP = 1e-3


@dataclasses.dataclass(frozen=True)
class PackingOptions:
    """How new nodes are packed. `node_cost_per_hour` is added to every node while optimising
    (not to the plan's price): above zero it favours fewer, larger nodes."""

    optimize: bool = True
    node_cost_per_hour: float = 0.0
    # wall-clock bound on the whole optimisation (None: none, so a plan depends on its input alone); past it the
    # greedy's plan stands, so a burst never waits on the optimiser (the controller sets one, `karpy plan` does not)
    max_seconds: float | None = None

    def seconds_for(self, pods: int) -> float:
        """A guard on the solver's time for a batch: grows with it, capped so a plan stays interactive.
        The node limit normally ends the search first, which keeps answers deterministic."""
        return min(20.0, 5.0 + pods / 1000)


def total_cost(nodes: Sequence[NewNode], node_cost_per_hour: float = 0.0) -> float:
    """What `nodes` cost per hour at their cheapest options, plus `node_cost_per_hour` each."""
    return sum(n.price() + node_cost_per_hour for n in nodes)


def repack(nodes: Sequence[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
           options: PackingOptions = PackingOptions()) -> list[NewNode]:
    """A cheaper set of nodes for the pods on `nodes`, or `nodes` itself when none is found.

    `open_node(template)` makes an empty new node (naming it). The nodes passed in are left as
    they are (the nodes returned are copies or new); the templates' remaining limits end up
    matching whichever set is returned."""
    nodes = list(nodes)
    if not nodes or not options.optimize:
        return nodes
    # amounts past int64 (nodes.amounts keeps them exact, as Python integers) are beyond the solver's floats:
    # such batches keep the greedy's exact plan
    if any(n.template.allocatable.dtype == object or np.asarray(n.used).dtype == object for n in nodes):
        return nodes
    templates = {id(n.template): n.template for n in nodes}
    saved = {key: t.remaining for key, t in templates.items()}
    candidate = _repack(nodes, topology=topology, open_node=open_node, options=options)
    if candidate is not None and total_cost(candidate, options.node_cost_per_hour) < \
            total_cost(nodes, options.node_cost_per_hour) - 1e-9:
        return candidate
    for key, t in templates.items():
        t.remaining = saved[key]
    return nodes


@dataclasses.dataclass
class _Loose:
    pod: PodInfo
    pins: Requirements                    # the domains topology counted the pod in
    template: NodeTemplate

    @property
    def group(self) -> tuple[str, str, str]:
        return self.template.name, str(self.pod.requirements), str(self.pins)


def pins_of(pod: PodInfo, node: NewNode, topology: Topology) -> Requirements | None:
    """The domains `pod` must stay in if it moves off `node`, or None when it must not move."""
    if pod.spreads or pod.affinities or pod.host_ports:
        return None
    pins = Requirements()
    for kind, key in topology.selecting(pod):
        if key == wk.HOSTNAME:
            if kind == AFFINITY:
                return None               # a pod may be on this node because this one is
            continue                      # a node of loose pods holds no pod that counts hostnames
        if key in node.domains:
            pins.add(Requirement.exactly(key, node.domains[key]))
    return pins


def _order(pod: PodInfo) -> tuple[int, int, str]:
    return (-pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.key)


def _repack(nodes: list[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
            options: PackingOptions) -> list[NewNode] | None:
    started = time.monotonic()
    # 1. lift the loose pods; the rest stay, on copies shrunk to what they still hold
    anchored: list[NewNode] = []
    loose: list[_Loose] = []
    for n in nodes:
        keep, lift = [], []
        for pod in n.pods:
            pins = pins_of(pod, n, topology)
            if pins is None:
                keep.append(pod)
            else:
                lift.append(_Loose(pod, pins, n.template))
        if not lift:
            anchored.append(n.clone())
            continue
        t = n.template
        if t.remaining is not None:
            t.remaining = t.remaining + n.reserved          # given back; the copy reserves what it keeps
        if keep:
            twin = n.clone()
            twin.reserved = type(n.reserved)()
            twin.keep_only(keep)
            anchored.append(twin)
        loose += lift
    if not loose:
        return None
    loose.sort(key=lambda e: _order(e.pod))
    # 2. the room anchored nodes pay for anyway
    rest = _fill_anchored(anchored, loose, topology)
    # 3. new nodes for the rest, chosen by the integer program
    fresh: list[NewNode] = []
    groups: dict[tuple[str, str, str], list[_Loose]] = {}
    for e in rest:
        groups.setdefault(e.group, []).append(e)
    budget = options.seconds_for(len(rest)) / max(1, len(groups))
    deadline = None if options.max_seconds is None else started + options.max_seconds
    for key in sorted(groups):
        if deadline is not None and time.monotonic() > deadline:
            return None
        seconds = budget if deadline is None else max(0.1, min(budget, deadline - time.monotonic()))
        placed = _pack_group(groups[key], anchored, topology=topology, open_node=open_node,
                             node_cost=options.node_cost_per_hour, seconds=seconds, deadline=deadline)
        if placed is None:
            return None
        fresh += placed
    return anchored + fresh


def _fits_pins(node: NewNode, pins: Requirements) -> bool:
    return all(node.domains.get(key) == r.any_value() for key, r in pins.items())


def _try_add(node: NewNode, pod: PodInfo, topology: Topology) -> bool:
    """Add `pod` to `node` if that keeps the node's price; otherwise leave the node as it was."""
    before = _state(node)
    if node.add(pod, topology) is not None:
        return False
    if node.price() <= before[-1] + 1e-12:
        return True
    _restore(node, before)
    return False


def _fill_anchored(anchored: list[NewNode], loose: list[_Loose], topology: Topology) -> list[_Loose]:
    """Put loose pods, largest first, where anchored nodes have room at no extra cost; returns the rest."""
    if not anchored:
        return loose
    free = np.array([n.template.allocatable[n.cheapest()] - n.used for n in anchored], dtype=np.int64)
    rows = anchored[0].template.rows
    hopeless: set[tuple[object, ...]] = set()
    rejected: set[tuple[tuple[object, ...], int]] = set()
    rest = []
    for e in loose:
        need = rows.of(e.pod)
        kind = (e.group, tuple(sorted(e.pod.requests.items())), repr(e.pod.tolerations))
        if need is None or kind in hopeless:
            rest.append(e)
            continue
        found = np.flatnonzero((free >= need).all(axis=1))
        if not len(found):
            hopeless.add(kind)                # rooms only shrink: its twins will not fit either
            rest.append(e)
            continue
        wanted = [(key, r.any_value()) for key, r in e.pins.items()]
        for i in found.tolist():
            node = anchored[i]
            if (kind, i) in rejected or any(node.domains.get(key) != value for key, value in wanted):
                continue
            if _try_add(node, e.pod, topology):
                free[i] = node.template.allocatable[node.cheapest()] - node.used
                break
            rejected.add((kind, i))
        else:
            rest.append(e)
    return rest


def _grow_cheapest(nodes: list[NewNode], pod: PodInfo, topology: Topology, *, alone: float | None) -> bool:
    """Add `pod` to the node whose price grows least, if that is less than `alone` (a node of its own)."""
    need = nodes[0].template.rows.of(pod) if nodes else None
    if need is None or alone is None:
        return False
    best, best_growth = None, alone
    for node in nodes:
        if not (node.grow_room() >= need).all():
            continue
        grown = node.price_with(need)
        if grown is not None and grown - node.price() < best_growth - 1e-12:
            best, best_growth = node, grown - node.price()
    if best is None:
        return False
    before = _state(best)
    if best.add(pod, topology) is None and best.price() <= before[-1] + best_growth + 1e-9:
        return True
    _restore(best, before)
    return False


# What _try_add and _grow_cheapest put back when an added pod makes a node dearer.
_State = tuple[Requirements, np.ndarray, np.ndarray, Resources, Resources, frozenset[tuple[str, str, int]], int,
               dict[str, str], Resources | None, float]


def _state(node: NewNode) -> _State:
    return (node.requirements, node.used, node.options, node.reserved, node.requests, node.host_ports,
            len(node.pods), dict(node.domains), node.template.remaining, node.price())


def _restore(node: NewNode, state: _State) -> None:
    (node.requirements, node.used, node.options, node.reserved, node.requests, node.host_ports,
     count, node.domains, node.template.remaining, _) = state
    del node.pods[count:]


def _pack_group(group: list[_Loose], anchored: list[NewNode], *, topology: Topology,
                open_node: Callable[[NodeTemplate], NewNode], node_cost: float, seconds: float,
                deadline: float | None = None) -> list[NewNode] | None:
    """New nodes for one group's pods (one provisioner, one set of requirements), or None when
    some pod fits nowhere (the greedy's plan then stands)."""
    t = group[0].template
    pins = group[0].pins
    reqs = t.requirements.intersection(group[0].pod.requirements).intersection(pins)
    mask, _, offers = t.compatible(reqs)
    if t.remaining is not None:
        mask = mask & t.within(t.remaining)
    rows = t.rows
    classes: dict[tuple[int, ...], list[_Loose]] = {}
    for e in group:
        need = rows.of(e.pod)
        if need is None:
            return None
        classes.setdefault(tuple(need.tolist()), []).append(e)
    keys = sorted(classes)
    need = np.array(keys, dtype=np.float64).reshape(len(keys), -1)
    count = np.array([len(classes[k]) for k in keys], dtype=np.float64)
    alloc = t.allocatable.astype(np.float64)
    types = _candidate_types(mask, alloc, need, count, offers, t)
    plan = _solve(types, alloc, need, count, offers, t, node_cost=node_cost, seconds=seconds)
    fresh: list[NewNode] = []
    if plan is not None:
        per_type, shares = plan
        for j, it in enumerate(types):
            if not per_type[j]:
                continue
            members = [e for c, k in enumerate(keys) for e in classes[k][shares[c][j][0]:shares[c][j][1]]]
            members.sort(key=lambda e: _order(e.pod))
            nodes = []
            for _ in range(per_type[j]):
                node = open_node(t)
                node.narrow(pins, only=it)
                nodes.append(node)
            _first_fit(nodes, members, topology)
            fresh += nodes
    placed = {id(pod) for n in fresh for pod in n.pods}
    leftovers = [e for e in group if id(e.pod) not in placed]
    for node in fresh:
        node.refit()                          # a cheaper type may hold what the node ended up with
    neighbours = [n for n in anchored if n.template is t and _fits_pins(n, pins)][:GROWTH_CANDIDATES]
    for e in leftovers:
        if deadline is not None and time.monotonic() > deadline:
            return None
        if any(_try_add(n, e.pod, topology) for n in fresh):
            continue
        if _grow_cheapest(fresh + neighbours, e.pod, topology,
                          alone=t.cheapest_price_for(t.rows.of(e.pod))):  # type: ignore[arg-type]  # placed on t before: it has a row
            continue
        node = open_node(t)
        node.narrow(pins)
        if node.add(e.pod, topology) is not None:
            node.release()
            return None
        fresh.append(node)
    kept = []
    for node in fresh:
        if node.pods:
            kept.append(node)
        else:
            node.release()
    return kept


def _candidate_types(mask: np.ndarray, alloc: np.ndarray, need: np.ndarray, count: np.ndarray,
                     offers: Sequence[Offering | None], t: NodeTemplate) -> list[int]:
    """The types worth a column: the most price-efficient for the group's total demand, and for
    each class the cheapest type that holds one of its pods (for the last, small node)."""
    usable = [i for i in np.flatnonzero(mask).tolist() if (alloc[i] >= need).all(axis=1).any()]
    if not usable:
        return []
    demand = (need * count[:, None]).sum(axis=0)
    asked = demand > 0

    def price(i: int) -> float:
        return offers[i].price_per_hour  # type: ignore[union-attr]  # set for every type the mask allows

    def efficiency(i: int) -> float:
        share = holds(i)
        return price(i) / share if share > 0 else float("inf")

    def holds(i: int) -> float:
        return float((alloc[i][asked] / demand[asked]).min()) if asked.any() else 1.0

    # a type that holds the whole demand is worth a column only as the cheapest such; among types
    # within a few percent of the best price per unit of demand, smaller ones leave less room unused
    whole = [i for i in usable if holds(i) >= 1.0]
    usable = [i for i in usable if holds(i) < 1.0] + sorted(whole, key=lambda i: (price(i), t.instance_types[i].name))[:1]
    best = min(efficiency(i) for i in usable)

    def band(i: int) -> float:
        if not 0 < best < float("inf"):
            return 0.0
        return float(np.floor(efficiency(i) / best / EFFICIENCY_BAND))   # inf for a type missing a resource

    ranked = sorted(usable, key=lambda i: (band(i), price(i), t.instance_types[i].name))
    chosen = set(ranked[:MAX_TYPES_PER_GROUP])
    by_price = sorted(usable, key=lambda i: (price(i), t.instance_types[i].name))
    for row in need:
        smallest = next((i for i in by_price if (alloc[i] >= row).all()), None)
        if smallest is not None:
            chosen.add(smallest)
    return sorted(chosen)


def _solve(types: list[int], alloc: np.ndarray, need: np.ndarray, count: np.ndarray, offers: Sequence[Offering | None],
           t: NodeTemplate, *, node_cost: float, seconds: float) -> tuple[list[int], list[list[tuple[int, int]]]] | None:
    """How many nodes of each type, and which slice of each class's pods goes to each type; None
    when the solver finds nothing. Variables: y[j] nodes of types[j] (integer), x[c, j] pods of
    class c on them (continuous; the first-fit that follows makes them whole)."""
    if not types:
        return None
    k, m = len(types), len(need)
    fits = np.array([[(alloc[i] >= need[c]).all() for i in types] for c in range(m)], dtype=bool)
    x_index: dict[tuple[int, int], int] = {}
    for c in range(m):
        for j in range(k):
            if fits[c, j]:
                x_index[(c, j)] = k + len(x_index)
    n_vars = k + len(x_index)
    cost = np.zeros(n_vars)
    cost[:k] = [offers[i].price_per_hour + node_cost for i in types]  # type: ignore[union-attr]  # set for every type the mask allows
    rows_i, cols_i, vals, lower, upper = [], [], [], [], []
    row = 0
    for c in range(m):                                   # every pod of a class goes somewhere
        for j in range(k):
            if (c, j) in x_index:
                rows_i.append(row), cols_i.append(x_index[(c, j)]), vals.append(1.0)
        lower.append(count[c]), upper.append(count[c])
        row += 1
    for j, i in enumerate(types):                        # what a type's nodes hold, per resource
        for r in np.flatnonzero((need > 0).any(axis=0)).tolist():
            if alloc[i][r] <= 0:
                continue
            rows_i.append(row), cols_i.append(j), vals.append(-1.0)
            for c in range(m):
                if (c, j) in x_index and need[c][r] > 0:
                    rows_i.append(row), cols_i.append(x_index[(c, j)]), vals.append(need[c][r] / alloc[i][r])
            lower.append(-np.inf), upper.append(0.0)
            row += 1
    for (c, j), v in sorted(x_index.items()):            # no more of a class per node than fit one node alone
        i = types[j]
        asked = need[c] > 0
        per_node = np.floor((alloc[i][asked] / need[c][asked]).min()) if asked.any() else count[c]
        if per_node < count[c]:
            rows_i.append(row), cols_i.append(v), vals.append(1.0)
            rows_i.append(row), cols_i.append(j), vals.append(-float(per_node))
            lower.append(-np.inf), upper.append(0.0)
            row += 1
    if t.remaining is not None:                          # the provisioner's limits, on the types' capacity
        for name, left in sorted(t.remaining.items()):
            caps = np.array([t.capacity[i].get(name, 0) for i in types], dtype=np.float64)
            if not caps.any():
                continue
            scale = caps.max()
            for j in np.flatnonzero(caps).tolist():
                rows_i.append(row), cols_i.append(j), vals.append(caps[j] / scale)
            lower.append(-np.inf), upper.append(max(float(left), 0.0) / scale)
            row += 1
    matrix = coo_matrix((vals, (rows_i, cols_i)), shape=(row, n_vars)).tocsr()
    ub = np.concatenate([np.full(k, float(count.sum())), np.zeros(len(x_index))])
    for (c, _), v in x_index.items():
        ub[v] = count[c]
    integrality = np.concatenate([np.ones(k), np.zeros(len(x_index))])
    result = milp(cost, integrality=integrality, bounds=Bounds(np.zeros(n_vars), ub),
                  constraints=LinearConstraint(matrix, np.array(lower), np.array(upper)),
                  options={"time_limit": seconds, "node_limit": MIP_NODE_LIMIT, "mip_rel_gap": MIP_REL_GAP,
                           "disp": False, "presolve": True})
    if result.x is None:
        return None
    per_type = [int(round(v)) for v in result.x[:k]]
    shares: list[list[tuple[int, int]]] = []
    for c in range(m):                                   # whole pods per type: floors, then the largest remainders
        amounts = [result.x[x_index[(c, j)]] if (c, j) in x_index and per_type[j] else 0.0 for j in range(k)]
        whole = [int(np.floor(a + 1e-6)) for a in amounts]
        short = int(count[c]) - sum(whole)
        for j in sorted(range(k), key=lambda j: (-(amounts[j] - whole[j]), j)):
            if short <= 0:
                break
            if amounts[j] - whole[j] > 1e-6:
                whole[j] += 1
                short -= 1
        start, spans = 0, []
        for j in range(k):
            spans.append((start, start + whole[j]))
            start += whole[j]
        shares.append(spans)
    return per_type, shares


def _first_fit(nodes: list[NewNode], members: list[_Loose], topology: Topology) -> list[_Loose]:
    """First-fit-decreasing of `members` into `nodes` (each held to one type); returns those that fit none."""
    if not nodes:
        return members
    t = nodes[0].template
    dtype = t.allocatable.dtype                  # Python integers when the types' sizes need them
    room = np.array([t.allocatable[int(np.flatnonzero(n.options)[0])] if n.options.any()
                     else np.zeros(len(t.rows.index), dtype=dtype) for n in nodes], dtype=dtype)
    room = room - np.array([n.used for n in nodes], dtype=dtype)
    rest = []
    for e in members:
        need = t.rows.of(e.pod)
        for i in np.flatnonzero((room >= need).all(axis=1)).tolist():
            if nodes[i].add(e.pod, topology) is None:
                room[i] = room[i] - need
                break
        else:
            rest.append(e)
    return rest
