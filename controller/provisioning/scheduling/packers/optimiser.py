"""The optimising packer: a cheaper set of new nodes for the pods the greedy put on new nodes.

The greedy (scheduler.py) places pods one at a time, largest first, growing nodes as
they fill, which leaves capacity paid for and unused. Here the pods that may move are
lifted off the planned nodes and packed again. A pod is "loose" when it has no host
ports, no spread or pod (anti-)affinity over hostnames, and no other pod's hostname
affinity counts on it; it keeps the domains (zones...) its own constraints and every
group counting it took, so every count a spread or affinity read stays as it was.

1. nodes left holding other pods ("anchored") keep them and shrink to the cheapest
   type that still holds them;
2. loose pods, largest first (cpu and memory together), go into the tightest room
   an anchored node pays for anyway, else onto the anchored node whose price grows
   least, when that costs no more than a node of its own;
3. the rest are grouped (provisioner, node requirements, pins) into classes of equal
   requests, and column generation over packing patterns (patterns.py) chooses how
   many nodes of which instance type hold how many pods of each class, each type at
   its true cost (cost.py: list price, credits, per-node costs) for the pattern's pods, within
   the provisioners' remaining limits; allocatable already has kube-reserved and
   daemonset overhead taken off, and `pods` is a resource like cpu, so max pods counts;
4. a local search lets a node shed loose pods into room the others pay for anyway
   when that lets it take a cheaper type;
5. another lets two nodes trade loose pods (one or two for one) when that lets one
   take a cheaper type and the other keep its own, or a node make a chain of trades
   with several others, each shedding a little of what it is short of, when the chain
   gets it to a cheaper type; then 4 runs again;
6. nodes that idle a whole step of cpu or memory take their next larger type, so that
   others shrink into them (4) where no single move finds it; kept only when the plan
   costs less, then 5 and 4 run again.

The fill (2) turns on the order loose pods come in: batches of a few hundred to a
few thousand pods with anchored nodes run 1-6 with several orders and keep the cheapest.
Fills may be worked out in processes of their own at once (`PackingOptions.processes`,
forked.py), as plain data (_PlanData) adopted here, so the plan is the same wherever; so
may a chunk of a large batch (`Optimiser.start`) while the scheduler places the next.

Every placement goes through NewNode.add, which checks every scheduling rule again.
The result replaces the greedy's only when it costs less: never more expensive.
Every cost is the true cost (cost.py); of two plans of equal cost the one with fewer nodes wins.
Deterministic: inputs sorted, work bounded by counts (passes, attempts, pricing rounds, solver node
limits), never by the clock, so the same input gives the same plan on any machine; the one exception
is the controller's safety cap (`max_seconds`), and a plan it cut short says so (`Repacked.cut_short`).
Pure: no I/O but the pipes of the processes it may fork (forked.py), no logging.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, Sequence

import numpy as np

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.resources import CPU, MEMORY, Resources
from karpy.controller.provisioning.scheduling import forked
from karpy.controller.provisioning.scheduling.nodes import (
    NewNode,
    NodeState,
    NodeTemplate,
    covers,
    dot,
    estimate,
    every,
    row_sums,
    smallest,
    some,
)
from karpy.controller.provisioning.scheduling.packers.packer import PackingOptions, Repacked, StartedPacking
from karpy.controller.provisioning.scheduling.packers.patterns import cover, solver
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.reasons import Reason
from karpy.controller.provisioning.scheduling.topology import AFFINITY, Topology

FIT_TRIES = 16                   # rooms tried per loose pod, the tightest first
GROWTH_TRIES = 8                 # anchored nodes whose growth is priced exactly per pod, the least by estimate
SHRINK_PASSES = 60                # local-search passes over the nodes
SHRINK_ATTEMPTS = 6000           # the local search's work bound (nodes it tries to shrink, over all passes)
SHRINK_TRIES = 32                 # rooms tried per pod a node sheds, the tightest first
GROWTH_CANDIDATES = 32           # anchored nodes a leftover pod may grow, besides the group's new nodes
MAX_TYPES_PER_GROUP = 60          # the most price-efficient types for a group's demand, plus one small type per class
EFFICIENCY_BAND = 0.03           # types this close in price per unit of demand count as equally efficient
SWAP_ROUNDS = 6                  # rounds of swapping and shrinking
SWAP_ATTEMPTS = 40000            # the swapping's work bound (pods looked for a partner, over all rounds)
GROW_ROUNDS = 3                  # rounds of growing lopsided nodes (_grow_lopsided), each followed by swaps and shrinks
EVEN_OUT_TRADES = 64             # trades a node may make towards a cheaper type before they are undone
EVEN_OUT_PARTNERS = 128          # the nodes with the most room in what it sheds that a node trades with, per trade
EVEN_OUT_IDLE = 4.0              # a node takes two pods for one only with this many times more room idle than it must shed
REFRESH_BLOCK = 512              # nodes _Swaps works out at once (bounds its matrices of nodes by types)


def total_cost(nodes: Sequence[NewNode]) -> float:
    """What `nodes` cost per hour (cost.py: each at its least costly option with its pods)."""
    return sum(n.price() for n in nodes)


def better(cost: float, count: int, than_cost: float, than_count: int) -> bool:
    """Whether a plan of `count` nodes costing `cost` beats one of `than_count` costing `than_cost`:
    cheaper, or as cheap with fewer nodes."""
    return cost < than_cost - 1e-9 or (cost <= than_cost + 1e-9 and count < than_count)


class Optimiser:
    """The optimising packer (the module's docstring says how)."""

    def pack(self, nodes: Sequence[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
             options: PackingOptions) -> Repacked:
        return repack(nodes, topology=topology, open_node=open_node, options=options)

    def start(self, nodes: Sequence[NewNode], *, topology: Topology, options: PackingOptions,
              batch_pods: int) -> StartedPacking:
        return start_repack(nodes, topology=topology, options=options, batch_pods=batch_pods)


def repack(nodes: Sequence[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
           options: PackingOptions = PackingOptions()) -> Repacked:
    """A cheaper set of nodes for the pods on `nodes`, or `nodes` itself when none is found.

    `open_node(template)` makes an empty new node (naming it). The nodes passed in are left as they are (the
    nodes returned are copies or new); the templates' remaining limits and the topology's counts end up matching
    whichever set is returned."""
    nodes = list(nodes)
    if not _optimisable(nodes):
        return Repacked(nodes)
    if options.max_seconds is not None:
        solver()                                  # imported before the cap's clock starts: its import is no search
    fills = fills_for(nodes, topology)
    started = time.monotonic()
    if len(fills) > 1 and options.processes is not None:
        best, moved, cut_short = _race_fills(nodes, fills, topology=topology, open_node=open_node, options=options,
                                             started=started)
    else:
        best, moved, cut_short = _best_fill(nodes, fills, topology=topology, open_node=open_node, options=options,
                                            started=started)
    recount(best, moved, topology)
    return Repacked(best, cut_short)


def start_repack(nodes: Sequence[NewNode], *, topology: Topology, options: PackingOptions, batch_pods: int) -> StartedPacking:
    """repack() of `nodes`, a chunk of a batch of `batch_pods` pods (whose size chooses the fills), begun now: in a
    process of its own when `options.processes` allows more than this one, so that the caller goes on meanwhile;
    finished by `finish(open_node)`. Its plan is made from the state as it is now (the nodes, the topology, the
    templates' limits), wherever it runs; `finish` adopts it then, naming new nodes and counting moved pods. Only
    for templates without limits: the plan does not take its nodes' share of them."""
    nodes = list(nodes)
    if not _optimisable(nodes):
        return StartedPacking(Repacked(nodes))
    templates = _templates(nodes)
    fills = fills_for(nodes, topology, batch_pods=batch_pods)
    call = functools.partial(_plan_apart, nodes, fills, templates, topology=topology, options=options,
                             started=time.monotonic(), number=0)
    planning = forked.start(call, fork=(options.processes or 1) > 1)
    return StartedPacking(lambda open_node: _finish(nodes, planning.result(), templates, topology, open_node))


def _finish(nodes: list[NewNode], plan: _PlanData, templates: list[NodeTemplate], topology: Topology,
            open_node: Callable[[NodeTemplate], NewNode]) -> Repacked:
    best, moved = _adopt(nodes, plan, templates, open_node)
    recount(best, moved, topology)
    return Repacked(best, plan.cut_short)


def _optimisable(nodes: list[NewNode]) -> bool:
    # amounts past int64 (nodes.amounts keeps them exact, as Python integers) are beyond the solver's floats:
    # such batches keep the greedy's exact plan
    return bool(nodes) and not any(n.template.allocatable.dtype == object or np.asarray(n.used).dtype == object
                                   for n in nodes)


Fill = tuple[str, str]          # the order loose pods come in (FILL_ORDERS) and the tie-break (FILL_TIES)


def fills_for(nodes: list[NewNode], topology: Topology, *, batch_pods: int | None = None) -> list[Fill]:
    """The fills a batch's re-packing tries. The fill is a heuristic whose outcome turns on the order pods come in:
    batches of PORTFOLIO_PODS try several (the order matters only where loose pods fill nodes that keep others).
    `batch_pods`: when `nodes` are a chunk of a batch, the batch's pods (the chunk takes the batch's fills)."""
    pods = batch_pods if batch_pods is not None else sum(len(n.pods) for n in nodes)
    if PORTFOLIO_PODS[0] <= pods <= PORTFOLIO_PODS[1] and any(pins_of(p, n, topology) is None for n in nodes for p in n.pods):
        return [(order, tie) for tie in FILL_TIES for order in FILL_ORDERS] if pods <= WHOLE_PORTFOLIO_PODS \
            else list(MID_BATCH_FILLS)
    return [LARGE_BATCH_FILL if pods > PORTFOLIO_PODS[1] else (FILL_ORDERS[0], FILL_TIES[0])]


def _best_fill(nodes: list[NewNode], fills: Sequence[Fill], *, topology: Topology,
               open_node: Callable[[NodeTemplate], NewNode], options: PackingOptions,
               started: float) -> tuple[list[NewNode], set[int], str | None]:
    """The cheapest plan `fills` find for `nodes` (or `nodes` itself), the pods it moved (by id), and what the
    safety cap left undone; the topology's counts are left to the caller (recount)."""
    templates = _templates(nodes)
    saved = [t.remaining for t in templates]
    best, best_cost, best_remaining = nodes, total_cost(nodes), saved
    cut_short = None
    moved: set[int] = set()
    for tried, (order, tie) in enumerate(fills):
        for t, left in zip(templates, saved):
            t.remaining = left
        repacked = _repack(nodes, topology=topology, open_node=open_node, options=options, order=order, tie=tie,
                           started=started)
        if repacked is not None and better(total_cost(repacked[0]), len(repacked[0]), best_cost, len(best)):
            (best, moved), best_cost = repacked, total_cost(repacked[0])
            best_remaining = [t.remaining for t in templates]
        if options.max_seconds is not None and time.monotonic() - started > options.max_seconds:
            kept = "the first-fit plan kept" if best is nodes else "the cheapest plan found so far kept"
            cut_short = (f"optimising {sum(len(n.pods) for n in nodes)} pod(s) on {len(nodes)} node(s) stopped at its "
                         f"{options.max_seconds:g} s cap in fill {tried + 1} of {len(fills)}, {kept}")
            break
    for t, left in zip(templates, best_remaining):
        t.remaining = left
    return best, moved, cut_short


@dataclasses.dataclass
class _PlanData:
    """A plan of some nodes' pods as plain data, so that it comes back the same from a process of its own: per node,
    the node it was made from (None: a new one) and its state, with pods as indices into the pods of the nodes
    planned; the pods moved, as such indices; each template's remaining limits; what the plan costs; and what the
    safety cap left undone."""

    nodes: list[tuple[int | None, int, list[int], NodeState]]   # (the node it was, its template's index, its pods, its state)
    moved: list[int]
    remaining: list[Resources | None]
    cost: float
    cut_short: str | None


PROVISIONAL = "provisional:"   # names a plan's new nodes while it is made in a process of its own (no node name has a colon)


def _plan_apart(nodes: list[NewNode], fills: Sequence[Fill], templates: list[NodeTemplate], *, topology: Topology,
                options: PackingOptions, started: float, number: int) -> _PlanData:
    """The best plan `fills` find for `nodes`, as plain data. Its new nodes take provisional names, so that it names
    them the same wherever it runs; the caller names them in turn (_adopt)."""
    opened = iter(range(1 << 62))
    saved = [t.remaining for t in templates]
    best, moved, cut_short = _best_fill(
        nodes, fills, topology=topology, open_node=lambda t: NewNode(t, f"{PROVISIONAL}{number}:{next(opened)}"),
        options=options, started=started)
    at = {id(p): k for k, p in enumerate(_pods_of(nodes))}
    which = {n.hostname: i for i, n in enumerate(nodes)}     # a node kept is a copy, under the same name
    template_at = {id(t): i for i, t in enumerate(templates)}
    planned = []
    for node in best:
        state = node.snapshot(whole=True)._replace(pods=[], remaining=None)     # its pods as indices, beside it
        planned.append((which.get(node.hostname), template_at[id(node.template)], [at[id(p)] for p in node.pods], state))
    remaining = [t.remaining for t in templates]
    for t, left in zip(templates, saved):
        t.remaining = left                           # as it was: the caller adopts the plan's, or another plan's
    return _PlanData(planned, sorted(at[k] for k in moved), remaining, total_cost(best), cut_short)


def _pods_of(nodes: list[NewNode]) -> list[PodInfo]:
    """The pods of `nodes`, in the order a _PlanData of them numbers them."""
    return [p for n in nodes for p in n.pods]


def _race_fills(nodes: list[NewNode], fills: Sequence[Fill], *, topology: Topology,
                open_node: Callable[[NodeTemplate], NewNode], options: PackingOptions, started: float
                ) -> tuple[list[NewNode], set[int], str | None]:
    """Each fill's plan made on its own, up to `options.processes` at once; the cheapest kept (of equal cost the one
    with fewer nodes, then the earlier fill), as _best_fill keeps it."""
    templates = _templates(nodes)
    calls = [functools.partial(_plan_apart, nodes, [fill], templates, topology=topology, options=options,
                               started=started, number=k) for k, fill in enumerate(fills)]
    try:
        plans = forked.run_forked(calls, processes=options.processes or 1)
    except forked.ForkFailed:
        plans = [call() for call in calls]            # the same plans, here
    chosen = plans[0]
    for plan in plans[1:]:
        if better(plan.cost, len(plan.nodes), chosen.cost, len(chosen.nodes)):
            chosen = plan
    best, moved = _adopt(nodes, chosen, templates, open_node)
    return best, moved, next((plan.cut_short for plan in plans if plan.cut_short is not None), None)


def _templates(nodes: list[NewNode]) -> list[NodeTemplate]:
    return list({id(n.template): n.template for n in nodes}.values())


def _adopt(nodes: list[NewNode], plan: _PlanData, templates: list[NodeTemplate],
           open_node: Callable[[NodeTemplate], NewNode]) -> tuple[list[NewNode], set[int]]:
    """The nodes of `plan` (copies of `nodes`, and new ones named by `open_node`, each as the plan left it), and the
    pods it moved (by id); the templates' remaining limits as the plan left them."""
    pods = _pods_of(nodes)
    out = []
    for was, template, held, state in plan.nodes:
        node = nodes[was].clone() if was is not None else open_node(templates[template])
        domains = dict(state.domains, **{wk.HOSTNAME: node.hostname})
        node.restore(state._replace(pods=[pods[k] for k in held], domains=domains, remaining=node.template.remaining))
        out.append(node)
    for t, left in zip(templates, plan.remaining):
        t.remaining = left
    return out, {id(pods[k]) for k in plan.moved}


@dataclasses.dataclass
class _Loose:
    pod: PodInfo
    pins: Requirements                    # the domains topology counted the pod in
    template: NodeTemplate

    @property
    def group(self) -> tuple[str, str, str]:
        return self.template.name, str(self.pod.requirements), str(self.pins)


def pins_of(pod: PodInfo, node: NewNode, topology: Topology) -> Requirements | None:
    """The domains `pod` must stay in if it moves off `node`, or None when it must not move.

    A pod whose own spreads and (anti-)affinities are over keys other than hostname may move within
    the domains the node took for them: every count those constraints read stays as it was."""
    if pod.host_ports:
        return None
    pins = Requirements()
    for key in [s.key for s in pod.spreads] + [t.key for t in pod.affinities]:
        if key == wk.HOSTNAME or key not in node.domains:
            return None
        pins.add(Requirement.exactly(key, node.domains[key]))
    for kind, key in topology.selecting(pod):
        if key == wk.HOSTNAME:
            if kind == AFFINITY:
                return None               # a pod may be on this node because this one is
            continue                      # a node of loose pods holds no pod that counts hostnames
        if key in node.domains:
            pins.add(Requirement.exactly(key, node.domains[key]))
    return pins


class _Moving:
    """The topology as pods being moved see it: a pod keeps the domains it was counted in (its pins),
    so its own spreads and affinities read the counts they read when it was placed and are not asked
    again; everything else (anti-affinity of other pods that selects it) is checked as usual."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.pins: dict[int, Requirements] = {}

    def domain_for(self, pod: PodInfo, node_requirements: Requirements, **kwargs: object) -> tuple[dict[str, str] | None, Reason | None]:
        pins = self.pins.get(id(pod))
        if pins is None or not (pod.spreads or pod.affinities):
            return self.topology.domain_for(pod, node_requirements, **kwargs)  # type: ignore[arg-type]  # passed through unchanged to Topology.domain_for
        chosen, why = self.topology.domain_for(pod, node_requirements, own=False, **kwargs)  # type: ignore[arg-type]  # passed through unchanged to Topology.domain_for
        if chosen is None:
            return None, why
        for key in [s.key for s in pod.spreads] + [t.key for t in pod.affinities]:
            chosen[key] = pins[key].any_value()  # type: ignore[assignment]  # a pin names one value of the domain
        return chosen, None

    def record(self, pod: PodInfo, domains: object, requirements: object = None) -> None:
        """Count nothing: a moving pod is tried on many nodes before the plan is chosen; recount() then counts it
        where it ends (the search reads no count a moving pod changes: its pins keep its own groups' counts)."""

    def __getattr__(self, name: str) -> object:
        return getattr(self.topology, name)


def recount(nodes: Sequence[NewNode], moved: set[int], topology: Topology) -> None:
    """Count the pods `moved` (by id) where they are on `nodes`, no longer where the first fit put them, so the
    counts a later chunk's placements read are the plan's."""
    for n in nodes:
        for pod in n.pods:
            if id(pod) in moved:
                topology.forget(pod)
                topology.record(pod, n.domains, n.requirements)


def _order(pod: PodInfo) -> tuple[int, int, str]:
    return (-pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.key)


FILL_ORDERS = ("bulk", "cpu", "memory", "largest")   # orders the fill takes loose pods in, largest first by...
# how the fill chooses between anchored nodes whose growth costs the same: the one whose room covers the pod
# most ("tightest"), or the one that strands the least room once grown (_stranded)
FILL_TIES = ("tightest", "stranded")
# batches of this many pods try several orders and tie-breaks (a few pods come in much the same order whichever;
# past the upper end the time is better spent on one); smaller ones take the first, larger ones LARGE_BATCH_FILL
PORTFOLIO_PODS = (200, 6000)
# over ten draws of 20,000 pods of Karpenter's diverse benchmark (bench/cost.py), memory first with the least
# stranded room cost less than the first order and tie on every draw (mean 1.040 of the bound, from 1.049); on
# draws of 100 and 150 pods neither was better on the whole, so small batches keep the first
LARGE_BATCH_FILL = ("memory", "stranded")
# past WHOLE_PORTFOLIO_PODS a batch tries two fills, not eight: over ten draws of 5,000 pods of the diverse
# benchmark, the cheaper of these two came to 1.037 of the bound on average and 1.050 at worst, the cheapest of all
# eight to 1.036 and 1.050, and LARGE_BATCH_FILL alone to 1.039 and 1.050; eight took `karpy plan` 11-19 s, longer
# than a 20,000-pod batch in chunks
WHOLE_PORTFOLIO_PODS = 2000
MID_BATCH_FILLS = (LARGE_BATCH_FILL, ("cpu", "stranded"))


def _fill_order(loose: Sequence[_Loose], order: str) -> Callable[[_Loose], tuple[float, float, str]]:
    """Largest first: by cpu and memory together ("bulk"), cpu then memory, memory then cpu, or the larger of the
    two ("largest"); each relative to what a typical type of the pod's template offers."""
    units: dict[int, tuple[float, float]] = {}
    for e in loose:
        t = e.template
        if id(t) not in units:
            units[id(t)] = (float(t.typical[t.resource_index[CPU]]) if CPU in t.resource_index else 1.0,
                            float(t.typical[t.resource_index[MEMORY]]) if MEMORY in t.resource_index else 1.0)

    def key(e: _Loose) -> tuple[float, float, str]:
        cpu_unit, memory_unit = units[id(e.template)]
        cpu, memory = e.pod.requests.get(CPU, 0) / cpu_unit, e.pod.requests.get(MEMORY, 0) / memory_unit
        first, second = {"bulk": (cpu + memory, 0.0), "cpu": (cpu, memory), "memory": (memory, cpu),
                         "largest": (max(cpu, memory), cpu + memory)}[order]
        return (-first, -second, e.pod.key)

    return key


def _repack(nodes: list[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
            options: PackingOptions, order: str, tie: str, started: float) -> tuple[list[NewNode], set[int]] | None:
    """One fill's plan for the pods on `nodes`, and the pods it lifted to place again (by id); None when it found none."""
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
            twin.remove([e.pod for e in lift])
            anchored.append(twin)
        loose += lift
    if not loose:
        return None
    topology = _Moving(topology)  # type: ignore[assignment]  # _Moving stands in for Topology where the packer asks domain_for
    for e in loose:
        topology.pins[id(e.pod)] = e.pins  # type: ignore[attr-defined]  # the _Moving just made
    loose.sort(key=_fill_order(loose, order))
    # 2. the room anchored nodes pay for anyway
    deadline = None if options.max_seconds is None else started + options.max_seconds
    rest = _fill_anchored(anchored, loose, topology, deadline=deadline, tie=tie)
    # 3. new nodes for the rest, chosen by the integer program
    fresh: list[NewNode] = []
    groups: dict[tuple[str, str, str], list[_Loose]] = {}
    for e in rest:
        groups.setdefault(e.group, []).append(e)
    for key in sorted(groups):
        if deadline is not None and time.monotonic() > deadline:
            return None
        seconds = None if deadline is None else max(0.1, deadline - time.monotonic())
        placed = _pack_group(groups[key], anchored, topology=topology, open_node=open_node, seconds=seconds,
                             deadline=deadline)
        if placed is None:
            return None
        fresh += placed
    out = [n for n in anchored + fresh if n.pods]
    movable = {id(e.pod) for e in loose}
    kept = _Shrinking()
    _shrink(out, movable, topology, deadline=deadline, kept=kept)
    trades_left = [SWAP_ATTEMPTS]
    unevened: set[tuple[str, float]] = set()
    for grow_round in range(GROW_ROUNDS + 1):
        if grow_round and not any(_grow_lopsided(out, movable, topology, deadline=deadline, scarce_only=scarce_only,
                                                 kept=kept)
                                  for scarce_only in (False, True)):
            break
        for _ in range(SWAP_ROUNDS):
            if not _swap(out, movable, topology, deadline=deadline, budget=trades_left, unevened=unevened):
                break
            _shrink(out, movable, topology, deadline=deadline, kept=kept)
    for node in out:
        if not node.pods:
            node.release()
    return [n for n in out if n.pods], movable


def _fits_pins(node: NewNode, pins: Requirements) -> bool:
    return all(node.domains.get(key) == r.any_value() for key, r in pins.items())


def _try_add(node: NewNode, pod: PodInfo, topology: Topology) -> bool:
    """Add `pod` to `node` if that keeps the node's price; otherwise leave the node as it was."""
    before = node.snapshot()
    if node.add(pod, topology) is not None:
        return False
    if node.price() <= before.price + 1e-12:
        return True
    node.restore(before)
    return False


def _leftover(left: np.ndarray) -> np.ndarray:
    """How much room a fit leaves, per row of `left` (room left per resource, in units of a typical type)."""
    total: np.ndarray = row_sums(left)
    return total


class _Bins:
    """The nodes loose pods may go to, with their rooms as matrices (over the resources loose pods
    ask for) and their prices kept current, so one comparison finds every node a pod fits."""

    def __init__(self, nodes: list[NewNode], loose: Sequence[PodInfo], topology: Topology) -> None:
        self.nodes = nodes
        self.topology = topology
        rows = nodes[0].template.rows
        asked = np.zeros(len(rows.index), dtype=bool)
        for pod in loose:
            need = rows.of(pod)
            if need is not None:
                asked |= estimate(need) > 0
        self.columns = np.flatnonzero(asked)
        self.unit = nodes[0].template.typical[self.columns]
        self.free = np.zeros((len(nodes), len(self.columns)))
        self.grow = np.zeros((len(nodes), len(self.columns)))
        self.price = np.zeros(len(nodes))
        self.version = np.zeros(len(nodes), dtype=np.int64)   # bumped whenever a node changes
        self.changes = 0                                      # bumped whenever any node changes
        self._holders: dict[bytes, tuple[int, np.ndarray]] = {}
        self._pinned: dict[tuple[tuple[str, str | None], ...], np.ndarray] = {}
        self._seen = [n.makeup() for n in nodes]                 # what each node was made of at its last refresh
        for i in range(len(nodes)):
            self.refresh(i)

    def catch_up(self) -> None:
        """Refresh the nodes changed by hands other than this one's since (a node's requirements, requests and
        options are replaced, never edited, so a node made of the same objects is as it was)."""
        for i, node in enumerate(self.nodes):
            if not node.made_of(self._seen[i]):
                self.refresh(i)

    def refresh(self, i: int) -> None:
        node = self.nodes[i]
        self._seen[i] = node.makeup()
        self.free[i] = estimate(node.free_room())[self.columns]
        self.grow[i] = estimate(node.grow_room())[self.columns]
        self.price[i] = node.price()
        self.version[i] += 1
        self.changes += 1
        for wanted, mask in self._pinned.items():
            mask[i] = self._admits(node, wanted)

    def holders(self, need: np.ndarray) -> np.ndarray:
        """The nodes whose free room holds `need`, kept until a node changes: a local search asks this of the same
        few pod shapes many times between two moves."""
        kept = self._holders.get(key := need.tobytes())
        if kept is None or kept[0] != self.changes:
            kept = self._holders[key] = (self.changes, np.flatnonzero(covers(self.free, need)))
        return kept[1]

    def held_elsewhere(self, need: np.ndarray, a: int) -> bool:
        """Whether some node other than `a` has free room for `need`."""
        return bool((self.holders(need) != a).any())

    def need(self, pod: PodInfo) -> np.ndarray | None:
        row = self.nodes[0].template.rows.estimate_of(pod)
        return None if row is None else row[self.columns]

    @staticmethod
    def _admits(node: NewNode, wanted: tuple[tuple[str, str | None], ...]) -> bool:
        return all(node.domains.get(key, value) == value for key, value in wanted)

    def pinned(self, pins: Requirements) -> np.ndarray:
        """Which nodes are in (or may still take) the domains `pins` name."""
        wanted = tuple((key, r.any_value()) for key, r in sorted(pins.items()))
        mask = self._pinned.get(wanted)
        if mask is None:
            mask = self._pinned[wanted] = np.array([self._admits(n, wanted) for n in self.nodes], dtype=bool)
        return mask

    def add(self, i: int, pod: PodInfo, *, growth: float = 0.0) -> bool:
        """Add `pod` to node `i` if its price grows by at most `growth`; else leave the node as it was."""
        node = self.nodes[i]
        before = node.snapshot(price=self.price[i])
        if node.add(pod, self.topology) is None:
            if node.price() <= self.price[i] + growth + 1e-9:
                self.refresh(i)
                return True
            node.restore(before)
        return False

    def undo(self, i: int, before: NodeState) -> None:
        self.nodes[i].restore(before)
        self.refresh(i)


def _stranded(node: NewNode, row: np.ndarray, i: int) -> float:
    """What `node` would strand with `row` more on type `i` (the type it then needs): the gap between the shares
    of cpu and of memory in use, times that type's price (the dollars of room one resource keeps idle once the
    other is full, if each resource paid its share). Of two growths that cost the same, the one stranding
    less leaves room later pods can use."""
    t = node.template
    offer = node.offering(i)
    if offer is None or CPU not in t.resource_index or MEMORY not in t.resource_index:
        return 0.0
    used, alloc = node.used + row, t.allocatable[i]
    cpu, memory = (float(used[t.resource_index[r]]) / max(float(alloc[t.resource_index[r]]), 1.0) for r in (CPU, MEMORY))
    return abs(cpu - memory) * offer.price_per_hour


def _fill_anchored(anchored: list[NewNode], loose: list[_Loose], topology: Topology, *,
                   deadline: float | None = None, tie: str = FILL_TIES[0]) -> list[_Loose]:
    """Put loose pods, largest first, on anchored nodes: into the room a node pays for anyway (the
    tightest such room), else onto the node whose price grows least, when that costs no more than a
    node of its own; returns the rest."""
    if not anchored:
        return loose
    bins = _Bins(anchored, [e.pod for e in loose], topology)
    hopeless: set[tuple[object, ...]] = set()
    rejected: set[tuple[tuple[object, ...], int]] = set()
    rest: list[_Loose] = []
    last_kind: tuple[object, ...] | None = None
    allowed = fits_grow = fits_free = np.zeros(len(anchored), dtype=bool)

    def changed(i: int) -> None:
        fits_grow[i] = allowed[i] and bool((bins.grow[i] >= need).all())
        fits_free[i] = fits_grow[i] and bool((bins.free[i] >= need).all())

    for at, e in enumerate(loose):
        if deadline is not None and time.monotonic() > deadline:
            return rest + loose[at:]
        need = bins.need(e.pod)
        kind = (e.group, tuple(sorted(e.pod.requests.items())), repr(e.pod.tolerations))
        if need is None or kind in hopeless:
            rest.append(e)
            continue
        if kind != last_kind:                 # twins come one after another: their masks carry over
            last_kind, allowed = kind, bins.pinned(e.pins)
            fits_grow = covers(bins.grow, need) & allowed
            fits_free = covers(bins.free, need) & fits_grow
        if not fits_grow.any():
            hopeless.add(kind)                # rooms only shrink: its twins will not fit either
            rest.append(e)
            continue
        done = False
        found = fits_free.nonzero()[0]
        if len(found):
            left = _leftover((bins.free[found] - need) / bins.unit)
            for i in found[smallest(left, FIT_TRIES)].tolist():
                if (kind, i) in rejected:
                    continue
                if bins.add(i, e.pod):
                    changed(i)
                    done = True
                    break
                rejected.add((kind, i))
        if not done:
            alone = e.template.cheapest_price_for(e.template.rows.of(e.pod))  # type: ignore[arg-type]  # a pod the greedy placed has a row
            found = (fits_grow & ~fits_free).nonzero()[0]
            if alone is not None and len(found):
                excess = row_sums(np.maximum(need - bins.free[found], 0) / bins.unit)
                best, best_growth, best_stranded, tried = None, alone + 1e-9, np.inf, 0
                row = e.template.rows.of(e.pod)
                for i in found[smallest(excess, 4 * GROWTH_TRIES)].tolist():
                    if (kind, i) in rejected:
                        continue
                    grown = anchored[i].option_with(row)
                    if grown is not None:
                        growth = grown[1] - bins.price[i]
                        if growth < best_growth - 1e-12 or (growth <= best_growth + 1e-12 and best is not None):
                            stranded = _stranded(anchored[i], row, grown[0]) if tie == "stranded" else 0.0  # type: ignore[arg-type]  # a pod the greedy placed has a row
                            if growth < best_growth - 1e-12 or stranded < best_stranded:
                                best, best_growth, best_stranded = i, growth, stranded
                    tried += 1
                    if tried >= GROWTH_TRIES:
                        break
                if best is not None:
                    if bins.add(best, e.pod, growth=best_growth):
                        changed(best)
                        done = True
                    else:
                        rejected.add((kind, best))
        if not done:
            rest.append(e)
    return rest


SHED_ORDERS = ("largest", "smallest", "aligned")   # orders a node that shrinks tries its loose pods in


def _shed_order(loose: list[PodInfo], deficit: np.ndarray, t: NodeTemplate, order: str) -> list[PodInfo]:
    """The largest first (fewest moves), the smallest first (they find room elsewhere more easily), or
    "aligned": the pods asking most for what the node is short of, relative to all they ask, first (a node
    whose memory is full while its cpu idles sheds its memory-heavy pods, not the cpu-heavy ones the
    others have no room for)."""
    if order != "aligned":
        return sorted(loose, key=_order, reverse=order == "smallest")
    unit = t.typical
    short = np.maximum(deficit, 0) / unit
    weight = short / short.sum() if short.sum() > 0 else short

    def key(p: PodInfo) -> tuple[float, float, str]:
        need = t.rows.estimate_of(p) / unit  # type: ignore[operator]  # a pod the greedy placed has a row
        total = float(need.sum())
        return (-dot(need, weight) / total if total > 0 else 0.0, total, p.key)

    return sorted(loose, key=key)


def _to_shed(loose: list[PodInfo], deficit: np.ndarray, t: NodeTemplate, *, order: str) -> list[PodInfo] | None:
    """Loose pods whose requests cover `deficit`, taken in `order` (see _shed_order), skipping pods that
    cover nothing still short; None when all of them do not cover it."""
    # a handful of resources: Python floats, which add as numpy's do, cost less here than arrays
    short: list[float] = deficit.tolist()
    shed = []
    for p in _shed_order(loose, deficit, t, order):
        if all(d <= 0 for d in short):
            break
        need = t.rows.estimate_of(p).tolist()  # type: ignore[union-attr]  # a pod the greedy placed has a row
        if any(n > 0 and d > 0 for n, d in zip(need, short)):
            shed.append(p)
            short = [d - n for d, n in zip(short, need)]
    if not shed or any(d > 0 for d in short):
        return None
    # drop pods the others already cover (the largest first), so no more moves than needed
    for p in sorted(shed, key=_order):
        need = t.rows.estimate_of(p).tolist()  # type: ignore[union-attr]  # a pod the greedy placed has a row
        if all(d + n <= 0 for d, n in zip(short, need)):
            shed.remove(p)
            short = [d + n for d, n in zip(short, need)]
    return shed


def _may_shed(a: int, loose: list[PodInfo], deficit: np.ndarray, bins: _Bins) -> bool:
    """Whether node `a` might shed `deficit`: its loose pods that fit in room some other node has left cover it
    together. Otherwise every set that covers it holds a pod with nowhere to go, which _move_out turns down: most
    nodes that try to shrink are such, and this tells them without ordering and choosing their pods three times.
    The rows are whole amounts as floats, so their sums are exact in any order."""
    rows = [row for p in loose if (need := bins.need(p)) is not None and bins.held_elsewhere(need, a)
            and (row := bins.nodes[a].template.rows.estimate_of(p)) is not None]
    return bool(rows) and bool((np.add.reduce(np.array(rows), axis=0) >= deficit).all())


def _move_out(a: int, shed: list[PodInfo], bins: _Bins) -> bool:
    """Move `shed` off node `a` into the tightest rooms of the others that hold them at no extra cost,
    all or none."""
    node = bins.nodes[a]
    needs = [need for p in shed if (need := bins.need(p)) is not None]
    if len(needs) < len(shed) or not all(bins.held_elsewhere(need, a) for need in needs):
        return False                                     # some pod has no room anywhere else: not worth trying
    saved = bins.free[a].copy()
    bins.free[a] = -1.0                                  # not into the node it leaves
    moved: list[tuple[int, NodeState]] = []
    for p, need in zip(shed, needs):
        found = np.flatnonzero(covers(bins.free, need))
        placed = False
        if len(found):
            left = _leftover((bins.free[found] - need) / bins.unit)
            for b in found[smallest(left, SHRINK_TRIES)].tolist():
                before = bins.nodes[b].snapshot(price=bins.price[b])
                if bins.add(b, p):
                    moved.append((b, before))
                    placed = True
                    break
        if not placed:
            break
    if len(moved) < len(shed):
        for b, before in reversed(moved):
            bins.undo(b, before)
        bins.free[a] = saved
        return False
    node.remove(shed)
    bins.refresh(a)
    return True


@dataclasses.dataclass
class _Shrinking:
    """What one repacking's shrinking searches over the same nodes and loose pods keep from one to the next: the
    rooms (brought up to date with what changed in between), and per node the types that hold what its pods that
    stay put need (which does not change while the loose pods are the same)."""
    bins: _Bins | None = None
    staying: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)


def _shrink(nodes: list[NewNode], movable: set[int], topology: Topology, *, deadline: float | None,
            kept: _Shrinking | None = None) -> None:
    """Local search: a node sheds loose pods into room other nodes pay for anyway when that lets it
    take a cheaper instance type; passes over the nodes, roomiest first, until one changes nothing.
    A shrink usually opens room that lets one more node shrink, so the search runs many passes:
    a node that failed is tried again only when room opened since holds one of its loose pods."""
    if len(nodes) < 2:
        return
    kept = _Shrinking() if kept is None else kept
    if kept.bins is None:
        kept.bins = _Bins(nodes, [p for n in nodes for p in n.pods if id(p) in movable], topology)
    else:
        kept.bins.catch_up()
    bins, staying = kept.bins, kept.staying
    # per node, the types that hold what its pods that stay put need
    for n in nodes:
        if id(n) not in staying:
            fixed = n.used - sum((row for p in n.pods if id(p) in movable and (row := n.template.rows.of(p)) is not None),
                                 np.zeros_like(n.used))
            staying[id(n)] = covers(n.template.allocatable, fixed)
    holds = [staying[id(n)] for n in nodes]
    prices: dict[int, np.ndarray] = {}
    attempts = 0
    # a node that failed to shrink can succeed later only through room that opened since: the nodes that shed
    # pods, counted in turn (`opened`, and per node the count at its last shed); it is tried again only when one
    # of them holds one of its loose pods
    failed_at: dict[int, int] = {}
    opened = 0
    last_opened = np.full(len(nodes), -1, dtype=np.int64)
    least: dict[int, tuple[int, np.ndarray]] = {}
    # nodes with no loose pod or no cheaper type that holds what stays, at the version they had: so while unchanged
    settled: dict[int, int] = {}

    def least_need(a: int) -> np.ndarray:
        """Per resource, the least any loose pod of node `a` asks: a room short of it holds none of them."""
        cached = least.get(a)
        if cached is None or cached[0] != bins.version[a]:
            rows = [need for p in nodes[a].pods if id(p) in movable and (need := bins.need(p)) is not None]
            cached = least[a] = (int(bins.version[a]), np.min(rows, axis=0) if rows else np.full(len(bins.columns), np.inf))
        return cached[1]

    for _ in range(SHRINK_PASSES):
        changed = False
        order = np.argsort(-row_sums(bins.free / bins.unit), kind="stable").tolist()
        for a in order:
            if deadline is not None and time.monotonic() > deadline or attempts >= SHRINK_ATTEMPTS:
                return
            if settled.get(a) == bins.version[a]:
                continue
            since = failed_at.get(a)
            if since is not None:
                others = (last_opened >= since).nonzero()[0]
                others = others[others != a]
                if not len(others) or not covers(bins.free[others], least_need(a)).any():
                    continue
            node = nodes[a]
            t = node.template
            loose = [p for p in node.pods if id(p) in movable and t.rows.of(p) is not None]
            if not loose:
                settled[a] = int(bins.version[a])
                continue
            mask, _, offers = t.compatible(node.requirements)
            price = prices.get(id(offers))
            if price is None:                 # the least each type can cost (no credits): it may be cheaper
                price = prices[id(offers)] = t.list_prices(node.requirements) + t.costs.fixed
            cheaper = (mask & holds[a] & (price < bins.price[a] - 1e-12)).nonzero()[0]
            if not len(cheaper):
                settled[a] = int(bins.version[a])
                continue
            nearest = int(cheaper[np.lexsort((cheaper, -price[cheaper]))[0]])
            attempts += 1
            deficit = estimate(node.used - t.allocatable[nearest]).astype(float)
            for order in SHED_ORDERS if _may_shed(a, loose, deficit, bins) else ():
                shed = _to_shed(loose, deficit, t, order=order)
                if shed is not None and _move_out(a, shed, bins):
                    changed = True
                    last_opened[a] = opened
                    opened += 1
                    failed_at.pop(a, None)
                    break
            else:
                failed_at[a] = opened
        if not changed:
            return


def _grow_lopsided(nodes: list[NewNode], movable: set[int], topology: Topology, *, deadline: float | None,
                   scarce_only: bool, kept: _Shrinking | None = None) -> bool:
    """Let lopsided nodes grow so that others may shrink into them: a node that idles at least as much cpu or
    memory as its next larger type adds takes that type, and the others shed loose pods into the room it then
    has (_shrink). A node full of memory with much cpu idle takes no cpu-heavy pod while its memory is full, and
    growing it pays only once several cpu-short nodes shrink into it, which no move of one pod finds. A node
    that grows sheds nothing itself, so with `scarce_only` only the nodes idling the resource most nodes run out
    of first (by their price) grow. Every node that grew then takes its cheapest type again. Kept when the plan
    costs less, all undone otherwise; whether it was kept."""
    sized = [n for n in nodes if n.template.remaining is None and all(r in n.template.resource_index for r in (CPU, MEMORY))]
    if not sized:
        return False                                         # only nodes of templates with no limits grow
    idling = [CPU, MEMORY]
    if scarce_only:
        runs_out: dict[str, float] = {}                      # resource -> price of the nodes that run out of it first
        for node in sized:
            t, alloc = node.template, node.template.allocatable[node.cheapest()]
            share = {r: float(node.used[c]) / max(float(alloc[c]), 1.0) for r in (CPU, MEMORY) for c in [t.resource_index[r]]}
            first = max(sorted(share), key=share.__getitem__)
            runs_out[first] = runs_out.get(first, 0.0) + node.price()
        idling = [max(sorted(runs_out), key=runs_out.__getitem__)]
    live = [n for n in nodes if n.pods]
    before, count = total_cost(live), len(live)
    saved = [n.snapshot(whole=True) for n in nodes]
    grown = []
    for node in sized:
        larger = node.next_larger()
        if larger is None:
            continue
        t, current = node.template, node.cheapest()
        idle, step = t.allocatable[current] - node.used, t.allocatable[larger] - t.allocatable[current]
        if any(0 < float(step[c]) <= float(idle[c]) for c in (t.resource_index[r] for r in idling)):
            node.keep_room_of(larger)
            grown.append(node)
    if not grown:
        return False
    _shrink(nodes, movable, topology, deadline=deadline, kept=kept)
    for node in grown:
        node.refit()
    live = [n for n in nodes if n.pods]
    if better(total_cost(live), len(live), before, count):
        return True
    for node, state in zip(nodes, saved):
        node.restore(state)
    return False


class _Swaps:
    """Nodes of one template with the same requirements (so any of their loose pods may go to any of them): what
    each uses, the room its type has left, what it must shed for its next cheaper type, and every loose pod."""

    def __init__(self, nodes: list[NewNode], movable: set[int]) -> None:
        self.nodes = nodes
        self.movable = movable
        t = nodes[0].template
        self.alloc = estimate(t.allocatable).astype(np.float64)
        _, order, _ = t.compatible(nodes[0].requirements)
        self.price = t.list_prices(nodes[0].requirements) + t.costs.fixed   # the least each type can cost
        self.by_price = order[np.argsort(self.price[order], kind="stable")]  # the allowed types, the cheapest first
        self._by_price_alloc, self._by_price_price = self.alloc[self.by_price], self.price[self.by_price]
        self.unit = t.typical
        width = self.alloc.shape[1]
        self.spare = np.zeros((len(nodes), width))
        self.short = np.full((len(nodes), width), np.inf)
        self.worth = np.zeros(len(nodes))
        self.pods: list[PodInfo] = []
        self.held: list[list[int]] = [[] for _ in nodes]      # the loose pods of each node, as indices
        for i, n in enumerate(nodes):
            for p in n.pods:
                if id(p) in movable:
                    self.held[i].append(len(self.pods))
                    self.pods.append(p)
        self.need = np.array([self.row(p) for p in self.pods]).reshape(len(self.pods), width)
        # each pod's shape (its row) as a number: pods alike share one
        numbered: dict[tuple[float, ...], int] = {}
        self.shape_ids = np.array([numbered.setdefault(tuple(row), len(numbered)) for row in self.need.tolist()],
                                  dtype=np.int64)
        self.owners = np.array([i for i, held in enumerate(self.held) for _ in held], dtype=np.int64)
        # what pods ask differently (all alike, as the one pod slot each takes, trading evens nothing out)
        self.varies = self.need.max(axis=0) > self.need.min(axis=0) if len(self.pods) else np.zeros(width, dtype=bool)
        self.refresh(*range(len(nodes)))

    def row(self, pod: PodInfo) -> np.ndarray:
        return self.nodes[0].template.rows.estimate_of(pod)  # type: ignore[return-value]  # placed pods have rows

    def move(self, k: int, to: int) -> None:
        self.held[int(self.owners[k])].remove(k)
        self.held[to].append(k)
        self.owners[k] = to

    def refresh(self, *which: int) -> None:
        """Work out again what nodes `which` are worth, have left, and must shed for their next cheaper type:
        a block of nodes at a time (the first time, every node)."""
        for start in range(0, len(which), REFRESH_BLOCK):
            rows = list(which[start:start + REFRESH_BLOCK])
            nodes = [self.nodes[i] for i in rows]
            used = np.array([estimate(n.used) for n in nodes], dtype=np.float64)
            worth = np.array([n.price() for n in nodes])
            self.worth[rows] = worth
            self.spare[rows] = self.alloc[[n.cheapest() for n in nodes]] - used
            # what stays put; whole amounts as floats, so the sum is exact in any order
            fixed = used - np.array([self.need[self.held[i]].sum(axis=0) for i in rows]).reshape(used.shape)
            cheaper = (self._by_price_price < worth[:, None] - 1e-12) & \
                every(self._by_price_alloc[None, :, :] >= fixed[:, None, :])
            if not cheaper.shape[1]:
                continue                                  # no type allowed: nothing cheaper (short stays infinite)
            last = self.by_price[cheaper.shape[1] - 1 - cheaper[:, ::-1].argmax(axis=1)]   # the dearest of them
            self.short[rows] = np.where(cheaper.any(axis=1)[:, None], used - self.alloc[last], np.inf)


def _swap(nodes: list[NewNode], movable: set[int], topology: Topology, *, deadline: float | None,
          budget: list[int], unevened: set[tuple[str, float]] | None = None) -> bool:
    """Local search: a node trades one loose pod for another node's when that lets it take a cheaper type and the
    other keeps its own; whether any trade was made. It evens out nodes that run out of one resource with room
    left in another (a node full of memory-heavy pods, its cpu idle), which moving pods one way cannot.
    `unevened` holds the nodes (hostname, price) that failed to even out (_even_out): they are not tried
    again at that price, in this or a later round."""
    unevened = set() if unevened is None else unevened
    sets: dict[tuple[str, str], list[NewNode]] = {}
    for n in nodes:
        if n.template.remaining is None and any(id(p) in movable for p in n.pods):
            sets.setdefault((n.template.name, str(n.requirements)), []).append(n)
    traded = False
    for key in sorted(sets):
        members = sorted(sets[key], key=lambda n: n.hostname)
        if len(members) < 2:
            continue
        swaps = _Swaps(members, movable)
        for a in np.argsort(-swaps.worth, kind="stable").tolist():
            while np.isfinite(swaps.short[a]).all():
                if deadline is not None and time.monotonic() > deadline or budget[0] <= 0:
                    return traded
                if _trade_one(swaps, a, topology, budget):
                    traded = True
                    continue
                tried = (swaps.nodes[a].hostname, float(swaps.worth[a]))
                if tried in unevened or not _even_out(swaps, a, topology, budget):
                    unevened.add(tried)
                    break
                traded = True
    return traded


def _even_out(swaps: _Swaps, a: int, topology: Topology, budget: list[int]) -> bool:
    """Let node a take a cheaper type by several trades, each moving it closer: one of its loose pods for one of
    another node's, giving more of what a must shed than it takes back, a and the other keeping their types.
    A node whose memory is full while much of its cpu idles gives memory-heavy pods for cpu-heavy ones, a
    little at a time to nodes with a little room each, which no single trade can do. The trades are planned on
    the rooms alone and made only when the plan gets a there within EVEN_OUT_TRADES; all or nothing."""
    short = swaps.short[a].copy()
    over = short > 0
    idle = ~over & swaps.varies         # room in what every pod asks alike (one pod slot each) evens nothing out
    if not over.any() or not np.isfinite(short).all():
        return False
    # only a node with much more room idle than it must shed takes two pods back for one: it has room for them
    pairs = (swaps.spare[a][idle] / swaps.unit[idle]).sum() >= EVEN_OUT_IDLE * (short[over] / swaps.unit[over]).sum()
    others = np.arange(len(swaps.nodes)) != a
    if (swaps.spare[others][:, over].sum(axis=0) < short[over]).any():
        return False                    # all the others together have no room for what a must shed
    spare, owners, mine = swaps.spare.copy(), swaps.owners.copy(), list(swaps.held[a])
    plan: list[tuple[int, list[int]]] = []
    while (short > 0).any():
        if len(plan) >= EVEN_OUT_TRADES or budget[0] <= 0 or not mine:
            return False
        over = short > 0
        ks = np.sort(np.array(mine, dtype=np.int64))
        given = ks[np.sort(np.unique(swaps.shape_ids[ks], return_index=True)[1])]   # the first pod of each shape
        budget[0] -= len(given)
        # one pod of another node for one of a's; failing that, on a node with much room idle, two of one node's
        # the nodes with the most room in what a sheds (only they can take any of it)
        roomiest = row_sums(np.maximum(spare[:, over], 0) / swaps.unit[over])
        roomiest[a] = 0.0
        room = np.zeros(len(roomiest), dtype=bool)
        room[smallest(-roomiest, EVEN_OUT_PARTNERS)] = True
        room &= roomiest > 0
        single = np.flatnonzero(room[owners])
        for theirs in (single[:, None], _pairs(owners, room, swaps.shape_ids) if pairs else np.zeros((0, 2), dtype=np.int64)):
            if not len(theirs):
                return False
            gives, takes = swaps.need[given], swaps.need[theirs].sum(axis=1)
            owner = owners[theirs[:, 0]]
            # a sheds more of what it is short of than it takes back (worked out first, over those resources alone:
            # most pairs fail it), keeps within its own type and within the cheaper one in everything else; the
            # other keeps its type
            shed = gives[:, None, over] - takes[None, :, over]
            found = np.argwhere(every(shed >= 0) & some(shed > 0))
            diff = gives[found[:, 0]] - takes[found[:, 1]]
            fits = every(-diff <= spare[a]) & every(short - diff <= np.where(over, np.inf, 0)) & \
                every(diff <= spare[owner[found[:, 1]]])
            found, diff = found[fits], diff[fits]
            if len(found):
                break
        else:
            return False
        gain = row_sums(np.minimum(diff[:, over], short[over]) / swaps.unit[over])
        best = np.lexsort((found[:, 1], found[:, 0], -gain))[0]
        o, t = found[best].tolist()
        k, qs, b, traded = int(given[o]), theirs[t].tolist(), int(owner[t]), diff[best]
        spare[a] += traded
        spare[b] -= traded
        short -= traded
        owners[k] = b
        owners[qs] = a
        mine.remove(k)
        mine += qs
        plan.append((k, qs))
    worth = swaps.worth[a]
    saved: dict[int, tuple[NodeState, list[int]]] = {}      # the nodes the trades touch, and their loose pods
    owners = swaps.owners.copy()
    for k, qs in plan:
        for i in (a, int(swaps.owners[qs[0]])):
            if i not in saved:
                saved[i] = swaps.nodes[i].snapshot(whole=True), list(swaps.held[i])
        if not _make_trade(swaps, a, [k], qs, topology, cheaper=False):
            break
    else:
        if swaps.worth[a] < worth - 1e-9:
            return True
    swaps.owners = owners
    for i, (state, held) in saved.items():
        swaps.nodes[i].restore(state)
        swaps.held[i] = held
        swaps.refresh(i)
    return False


def _pairs(owners: np.ndarray, room: np.ndarray, shape_ids: np.ndarray) -> np.ndarray:
    """Two loose pods of one node that has `room` (of different requests, or the first two alike): what a node may
    take back for one of its own, so a large pod can go for two smaller ones."""
    out: list[list[int]] = []
    by_owner: dict[int, list[int]] = {}
    for k in np.flatnonzero(room[owners]).tolist():
        by_owner.setdefault(int(owners[k]), []).append(k)
    for b in sorted(by_owner):
        out += _twos(_by_shape(by_owner[b], shape_ids))
    return np.array(out, dtype=np.int64).reshape(len(out), 2)


def _by_shape(pods: list[int], shape_ids: np.ndarray) -> list[list[int]]:
    """`pods` (indices) grouped by shape, each group and the groups in the order of their pods in `pods`."""
    groups: dict[int, list[int]] = {}
    for k in pods:
        groups.setdefault(int(shape_ids[k]), []).append(k)
    return list(groups.values())


def _twos(groups: list[list[int]]) -> list[list[int]]:
    """Two pods of groups of pods alike: the first of each of two groups, then the first two of each group."""
    return [[x[0], y[0]] for i, x in enumerate(groups) for y in groups[i + 1:]] + [ks[:2] for ks in groups if len(ks) > 1]


def _trade_one(swaps: _Swaps, a: int, topology: Topology, budget: list[int]) -> bool:
    """Find and make one trade that lets node a take a cheaper type: one or two of its loose pods (p) for one of
    another node's (q), with p - q covering what a must shed and within the room the other has left (the
    tightest such fit first)."""
    # p - q lies between what a must shed and the room the other node has left: only nodes with room for the
    # shortfall can trade with a, and only what a may give that covers it
    able = covers(swaps.spare, np.maximum(swaps.short[a], 0))
    able[a] = False
    theirs = np.flatnonzero(able[swaps.owners])
    mine = np.array(swaps.held[a], dtype=np.int64)
    if not len(theirs) or not len(mine):
        return False
    distinct = _by_shape(mine[np.lexsort((mine, -row_sums(swaps.need[mine] / swaps.unit)))].tolist(), swaps.shape_ids)
    offers = [[ks[0]] for ks in distinct] + _twos(distinct)
    giving = np.array([swaps.need[given].sum(axis=0) for given in offers])
    useful = np.flatnonzero(covers(giving, swaps.short[a]))   # a pod taken back only adds to the shortfall
    if not len(useful):
        return False
    budget[0] -= len(useful)
    diff = giving[useful][:, None, :] - swaps.need[theirs][None, :, :]
    spare = swaps.spare[swaps.owners[theirs]]
    fits = every(diff >= swaps.short[a]) & every(diff <= spare[None, :, :])
    for o, u in enumerate(useful.tolist()):
        found = np.flatnonzero(fits[o])
        if not len(found):
            continue
        left = row_sums((spare[found] - diff[o, found]) / swaps.unit)
        for q in theirs[found[np.lexsort((found, left))][:4]].tolist():
            if _make_trade(swaps, a, offers[u], q, topology):
                return True
    return False


def _make_trade(swaps: _Swaps, a: int, given: list[int], q: int | list[int], topology: Topology, *,
                cheaper: bool = True) -> bool:
    """Move pods `given` from node a to the owner of pod q (or pods q, all on one node) and q to a, when a then
    costs less (no more, unless `cheaper`) and the other no more; all or nothing."""
    taken = [q] if isinstance(q, int) else q
    b = int(swaps.owners[taken[0]])
    first, second = swaps.nodes[a], swaps.nodes[b]
    out = [swaps.pods[k] for k in given]
    back = [swaps.pods[k] for k in taken]
    saved = [n.snapshot(whole=True) for n in (first, second)]
    first.remove(out)
    second.remove(back)
    if all(first.add(p, topology) is None for p in back) and all(second.add(p, topology) is None for p in out) and \
            first.price() < swaps.worth[a] + (1e-9 if not cheaper else -1e-9) and second.price() <= swaps.worth[b] + 1e-9:
        for k in given:
            swaps.move(k, b)
        for k in taken:
            swaps.move(k, a)
        swaps.refresh(a)
        swaps.refresh(b)
        return True
    for n, state in zip((first, second), saved):
        n.restore(state)
    return False


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
    before = best.snapshot()
    if best.add(pod, topology) is None and best.price() <= before.price + best_growth + 1e-9:
        return True
    best.restore(before)
    return False


def _pack_group(group: list[_Loose], anchored: list[NewNode], *, topology: Topology,
                open_node: Callable[[NodeTemplate], NewNode], seconds: float | None,
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
    cpu = t.cpu_column
    # what a node of each type costs filled with the group's cpu as far as it holds it: no pattern of it costs more
    demand_cpu = float((need[:, cpu] * count).sum()) if cpu is not None else 0.0
    allowed = np.flatnonzero(mask)
    most = np.full(len(mask), np.inf)
    if len(allowed):
        most[allowed] = t.costs_at(reqs, allowed, 0.0) if cpu is None else np.array(
            [t.costs_at(reqs, np.array([i]), min(demand_cpu, float(alloc[i, cpu])))[0] for i in allowed.tolist()])
    types = _candidate_types(mask, alloc, need, count, most, t)
    fresh: list[NewNode] = []
    if types:
        caps = left = None
        if t.remaining is not None:
            names = sorted(t.remaining)
            caps = np.array([[float(t.capacity[i].get(n, 0)) for n in names] for i in types])
            left = np.array([float(t.remaining[n]) for n in names])
        price = most[types]

        def pattern_cost(j: int, pattern: np.ndarray) -> float:
            load = float(need[:, cpu] @ pattern) if cpu is not None else 0.0
            return float(t.costs_at(reqs, np.array([types[j]]), load)[0])

        choices = cover(need, count, alloc[types], price, caps=caps, left=left, seconds=seconds,
                        pattern_cost=pattern_cost) or []
        queues = {k: list(classes[k]) for k in keys}
        for choice in sorted(choices, key=lambda ch: (-price[ch.type_index], ch.type_index, ch.pods)):
            for _ in range(choice.nodes):
                members = [e for c, n in enumerate(choice.pods) for e in queues[keys[c]][:n]]
                if not members:
                    break
                node = open_node(t)
                node.narrow(pins, only=types[choice.type_index])
                turned_away = set()
                for e in sorted(members, key=lambda e: _order(e.pod)):
                    if node.add(e.pod, topology) is not None:
                        turned_away.add(id(e))
                for c, n in enumerate(choice.pods):     # pods a node turned away wait for the next one
                    queue = queues[keys[c]]
                    queues[keys[c]] = [e for e in queue[:n] if id(e) in turned_away] + queue[n:]
                fresh.append(node)
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
                     costs: np.ndarray, t: NodeTemplate) -> list[int]:
    """The types worth a column: the most cost-efficient for the group's total demand (`costs[i]`: a node of
    type i filled with it), and for each class the cheapest type that holds one of its pods (for the last,
    small node)."""
    usable = [i for i in np.flatnonzero(mask).tolist() if (alloc[i] >= need).all(axis=1).any()]
    if not usable:
        return []
    demand = (need * count[:, None]).sum(axis=0)
    asked = demand > 0

    def price(i: int) -> float:
        return float(costs[i])

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
        cheapest = next((i for i in by_price if (alloc[i] >= row).all()), None)
        if cheapest is not None:
            chosen.add(cheapest)
    return sorted(chosen)
