"""Consolidation decisions: which nodes the cluster could do without, or run cheaper, and why the others stay.

As Karpenter consolidates, with v0.16's rules: empty nodes are deleted first
(all at once); then candidates, least disruption cost per dollar first (the
older among equals), are deleted together while each one's pods fit on the
nodes that stay (first on those likely to stay, so no pod moves twice);
then several nodes are replaced by one cheaper node, or repacked onto the
optimiser's cheaper set of new nodes for their pods, or one node by a
cheaper one, or split into several smaller ones when they cost less. Every
node is costed as provisioning costs it (cost.py: list price, a burstable's
credits at its pods' cpu, per-node costs), and an action's saving is the
cluster's cost before less after, credits of the nodes that receive pods
included. A replacement is costed at its worst-case launch price and must
be strictly cheaper; spot nodes are only deleted. Every action must also save
`min_savings_per_pod` $/h per unit of Karpenter's disruption cost of the
pods it moves (disruption_cost.py). Each action is applied before the next
is sought. Every node that is not acted on is kept with the reason.

Karpenter v1's Drift method runs between the empty deletes and the
consolidation proper: each node whose NodeClaim is Drifted (`drifted`), as its
`Drifted` budget and its holds allow, is replaced at any price by what
provisioning would launch for the pods that fit nowhere else (`_drift`). With
`spot_to_spot` (the SpotToSpotConsolidation gate) a spot node may be replaced
by a cheaper spot node under v1's 15-types rule.

Placements are judged on one packing state built from the scheduler's own
view of the cluster (`packing.Packing`); pods with constraints it does not
judge go through the full scheduler, which also plans every replacement, so
consolidation never plans what provisioning would not do. A replace is then
judged the way kube-scheduler will carry it out (`_commit`): its pods go
where kube-scheduler's default score puts them, and a pod that finds no
room there is priced as the node provisioning would launch for it. A time budget
stops the search and returns the actions found so far. Pure: no I/O; the
clock is `now`, the budget's timer is given.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import math
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from karpy.apis import labels as wk
from karpy.apis.conditions import initialized
from karpy.apis.resources import Resources
from karpy.apis.v1.disruption.budgets import PassBudgets
from karpy.apis.v1.disruption.do_not_disrupt import disruption_hold
from karpy.apis.v1.disruption.methods import spot_to_spot
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.controller.consolidation.candidates import NodeView, blocker, nodepool_of, pdb_blocker, unmanaged, view
from karpy.controller.consolidation.disruption_cost import MIN_SAVINGS_PER_POD, unworthy
from karpy.controller.consolidation.packing import Packing
from karpy.controller.consolidation.replacements import (
    Planner,
    Replacement,
    cheapest_options,
    launching_node_manifest,
    spot_only,
)
from karpy.controller.inflight import leaving
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, PlannedNode, Scheduler, node_name

DELETE, REPLACE = "delete", "replace"
MAX_NODES_PER_ACTION = 100                    # as Karpenter bounds multi-node consolidation
REPACK_MIN_SAVING = 0.001                     # $/h a repack of several nodes must at least save,
REPACK_MIN_SHARE = 0.02                       # and this share of their price: not many nodes disrupted for little
SPOT_ONLY_DELETED = "no cheaper fit: its pods need a new node, and spot nodes are only deleted, never replaced"
REPACK_NO_CHEAPER = "no cheaper fit: packing its pods again with other nodes' costs no less"


@dataclasses.dataclass(frozen=True)
class Action:
    kind: str                                 # DELETE | REPLACE
    nodes: tuple[str, ...]
    savings_per_hour: float                   # at list prices: what the nodes' offerings cost less
    replacement: Replacement | None = None    # the first of `replacements`
    pods: tuple[str, ...] = ()                # the pods that move ("ns/name")
    replacements: tuple[Replacement, ...] = ()
    moves: tuple[tuple[str, str], ...] = ()   # (pod, node it goes to: an existing node or a replacement's name)
    provisioned: tuple[Replacement, ...] = ()  # nodes provisioning will launch for pods kube-scheduler leaves without room
    disruption_cost: float = 0.0              # Karpenter's: the pods' eviction costs, weighted by the nodes' lifetime left
    cost_savings_per_hour: float = 0.0        # what the cluster costs less (cost.py): the saving decisions weigh
    drifted: str = ""                         # the Drift method's: the nodes' Drifted reason (replaced at any price)

    @property
    def pods_moved(self) -> int:
        return len(self.pods)

    def describe(self) -> str:
        saving = f"saving ${self.cost_savings_per_hour:.4f}/h, disruption cost {self.disruption_cost:g}"
        if self.provisioned:
            saving += (f" with {len(self.provisioned)} node(s) provisioning will launch for pods kube-scheduler "
                       f"leaves without room")
        if self.drifted:
            saving = f"drifted: {self.drifted}"
        if not self.replacements:
            return f"delete {', '.join(self.nodes)} ({len(self.pods)} pod(s) move; {saving})"
        launched = " and ".join(f"{r.instance_type} {r.capacity_type} in {r.zone} at ${r.price_per_hour:.4f}/h"
                                for r in self.replacements)
        return f"replace {', '.join(self.nodes)} with {launched} ({len(self.pods)} pod(s) move; {saving})"


@dataclasses.dataclass(frozen=True)
class Kept:
    node: str
    reason: str
    considered: bool = True       # False: a node consolidation does not manage, or did not get to (no Event)


@dataclasses.dataclass
class ConsolidationPlan:
    actions: list[Action]
    kept: list[Kept]
    price_before: float = 0.0                 # $/h of every priced node, at list prices
    complete: bool = True                     # False: the time budget ran out first
    cost_before: float = 0.0                  # $/h of every priced node, as cost.py costs it with its pods

    @property
    def price_after(self) -> float:
        return round(self.price_before - sum(a.savings_per_hour for a in self.actions), 6)

    @property
    def cost_after(self) -> float:
        return round(self.cost_before - sum(a.cost_savings_per_hour for a in self.actions), 6)

    def verdict(self, node: str) -> Action | Kept | None:
        """What the plan does with `node`."""
        for action in self.actions:
            if node in action.nodes:
                return action
        return next((k for k in self.kept if k.node == node), None)


@dataclasses.dataclass
class _Planned:
    """New nodes planned without a scheduler (shaped as the scheduler's results)."""

    new_nodes: list[PlannedNode]
    unschedulable: dict[str, str]


@dataclasses.dataclass
class _Found:
    """A tried action: where the pods go, or why it cannot be taken."""

    moves: list[tuple[PodInfo, str]] = dataclasses.field(default_factory=list)
    replacements: list[Replacement] = dataclasses.field(default_factory=list)
    why: str = ""


class Consolidator:
    """Decides over one snapshot. `plan()` returns every action it finds, one after another, each
    applied to the state the next one sees; `plan(first_only=True)` stops at the first."""

    def __init__(self, snapshot: ClusterSnapshot, pdbs: Sequence[Mapping[str, Any]], *, now: dt.datetime,
                 min_age_seconds: float = 0.0, name_node: Callable[[str, int], str] = node_name,
                 budget_seconds: float | None = None, timer: Callable[[], float] = time.monotonic,
                 max_nodes_per_action: int = MAX_NODES_PER_ACTION, incremental: bool = True,
                 as_kube_scheduler_places: bool = True, min_savings_per_pod: float = MIN_SAVINGS_PER_POD,
                 keep_fullest: bool = True, node_cost_per_hour: float = 0.0,
                 drifted: Mapping[str, str] | None = None, spot_to_spot: bool = False) -> None:
        """`min_savings_per_pod`: an action is taken only when it saves at least this many $/h per unit of its
        disruption cost (`_unworthy`). `keep_fullest=False` places moved pods first fit in the scheduler's node
        order, as the full scheduler does, instead of on the nodes likely to stay. `incremental=False`
        simulates every candidate with a scheduler of its own (the reference the packing state is checked against); `as_kube_scheduler_places=False` keeps the moves as planned
        instead of placing the pods as kube-scheduler will (see `_commit`). `drifted`: node name -> the Drifted
        reason of its NodeClaim (controller/consolidation/drift.py), for the Drift method. `spot_to_spot`: the
        SpotToSpotConsolidation feature gate (spot nodes may be replaced by cheaper spot nodes; else only deleted)."""
        self.snapshot = snapshot
        self.spot_to_spot = spot_to_spot
        self.drifted = dict(drifted or {})
        self.pdbs = list(pdbs)
        self.now = now
        self.min_age = min_age_seconds
        self._name_node = name_node
        self._names = collections.Counter[str]()
        self._timer = timer
        self._deadline = timer() + budget_seconds if budget_seconds is not None else None
        self.max_nodes = max(1, max_nodes_per_action)
        self._incremental = incremental
        self._as_kube_scheduler_places = as_kube_scheduler_places
        self.min_savings_per_pod = min_savings_per_pod
        self._keep_fullest = keep_fullest and incremental
        self.provisioners = {p.name: p for p in snapshot.provisioners if not p.metadata.deletion_timestamp}
        self.types = {t.name: t for t in snapshot.catalog.instance_types()}
        # nodes being deleted and their pods are termination's business: not capacity, not candidates
        gone = leaving(snapshot.nodes) | snapshot.leaving
        self.nodes = {n["metadata"]["name"]: n for n in snapshot.nodes if n["metadata"]["name"] not in gone}
        self.deleting = sorted(gone)
        self._gone = gone
        self._all_nodes = list(snapshot.nodes)
        self.bound = [p for p in snapshot.pods if p.node_name in self.nodes and not p.terminal and not p.deleting]
        self._raw_pods = [p.raw for p in snapshot.pods]
        # one scheduler over the cluster as it is: its view of the existing nodes is the packing state,
        # after the pods on their way (pending, or on nodes being deleted) have taken their room
        # `node_cost_per_hour`: what the operator says every node costs besides (cost.py), as provisioning counts it
        self._packing = PackingOptions(node_cost_per_hour=node_cost_per_hour)
        base = Scheduler(snapshot, name_node=lambda p, i: f"{p}-unlaunched-{i}", packing=self._packing)
        on_the_way = base.solve()
        self.awaited = {n.name: n.pods[0].key for n in on_the_way.existing_nodes}
        self.templates = {t.name: t for t in base.templates}
        self.node_costs = {name: t.node_costs for name, t in self.templates.items()}
        self.packing = Packing(base.existing, base.rows)
        self.planner = Planner(self.templates, base.rows, self._fresh_name)
        self._inverse = any(t.anti and not t.weight for p in self.bound for t in p.affinities)
        self._limited = any(p.spec.limits for p in self.provisioners.values())
        # the scheduler's resource rows are cached per pod object: every pod they saw is kept alive,
        # so a later object never takes a dropped one's identity (and its cached row)
        self._keep: list[PodInfo] = []
        self._stranded: list[PodInfo] = []          # what kube-scheduler would leave without room, last we looked
        self._unworthy_why: str | None = None       # why the last replace tried did not pay for its disruption

    def _out_of_time(self) -> bool:
        return self._deadline is not None and self._timer() >= self._deadline

    def _unworthy(self, saving: float, nodes: Sequence[NodeView]) -> str | None:
        """Why an action saving `saving` $/h by disrupting `nodes` is not worth the pods it moves, or None."""
        return unworthy(saving, sum(n.cost for n in nodes), pods=sum(len(n.pods) for n in nodes),
                        min_savings_per_pod=self.min_savings_per_pod)

    def _simple(self, nodes: Iterable[NodeView]) -> bool:
        """True when the packing state judges these nodes' pods as the full scheduler would."""
        return self._incremental and not self._inverse and all(self.packing.simple(p) for n in nodes for p in n.pods)

    # --- planning -----------------------------------------------------------------------------
    def plan(self, *, first_only: bool = False, only: Iterable[str] | None = None) -> ConsolidationPlan:
        """Actions in the order they would be taken, and every other node with its reason.
        `only` restricts the candidates (re-validating an action); other nodes are still capacity."""
        by_node: dict[str, list[PodInfo]] = collections.defaultdict(list)
        for pod in self.bound:
            by_node[pod.node_name].append(pod)  # type: ignore[index]  # bound pods name their node
        self.views = {name: view(raw, by_node.get(name, []), types=self.types, provisioners=self.provisioners, now=self.now,
                                 node_costs=self.node_costs)
                      for name, raw in sorted(self.nodes.items())}
        wanted = set(only) if only is not None else None
        kept = [Kept(name, "node is being deleted", considered=False) for name in self.deleting
                if wanted is None or name in wanted]
        candidates = []
        for name, v in self.views.items():
            if wanted is not None and name not in wanted:
                continue
            if why := unmanaged(v, self.provisioners):
                kept.append(Kept(name, why, considered=False))
            elif why := blocker(v, types=self.types, now=self.now, min_age=self.min_age, pdbs=self.pdbs,
                                all_pods=self._raw_pods, awaited=self.awaited, provisioners=self.provisioners):
                kept.append(Kept(name, why))
            else:
                candidates.append(v)
        price_before = round(sum(v.price or 0 for v in self.views.values()), 6)
        cost_before = round(sum(v.cost_per_hour for v in self.views.values()), 6)
        actions: list[Action] = []
        # a NodePool's budgets bound each reason's nodes in disruption order, as v1 filters its candidates
        budgets = PassBudgets({name: p.node_pool for name, p in self.provisioners.items()
                               if isinstance(p, NodePoolProvisioner)}, self._all_nodes, self.now,
                              ("Empty", "Drifted", "Underutilized"), leaving=self._gone)
        empty = []
        for n in (n for n in candidates if not n.pods):
            if hold := budgets.take(nodepool_of(n), "Empty"):
                kept.append(Kept(n.name, hold.describe()))
            else:
                empty.append(n)
        for start in range(0, len(empty), self.max_nodes):
            group = empty[start:start + self.max_nodes]
            actions.append(Action(DELETE, tuple(n.name for n in group), round(sum(n.price or 0 for n in group), 6),
                                  cost_savings_per_hour=round(sum(n.cost_per_hour for n in group), 6)))
            for n in group:
                self._drop(n)
        if self.drifted:                          # v1's order: Emptiness, Drift, then consolidation
            held: list[Kept] = []
            drifting = self._drift(wanted, budgets, held, actions, first_only=first_only)
            candidates = [n for n in candidates if n.name not in drifting]
            kept = [k for k in kept if k.node not in drifting] + held   # drift's reason, not consolidation's
        remaining = []
        for n in sorted((n for n in candidates if n.pods), key=lambda n: n.order):
            if hold := budgets.take(nodepool_of(n), "Underutilized"):
                kept.append(Kept(n.name, hold.describe()))
            else:
                remaining.append(n)
        if self._keep_fullest:   # pods moved go to the nodes that stay: those no action may take first
            considered = {n.name for n in candidates}
            self.packing.prefer([name for name in self.views if name not in considered]
                                + [n.name for n in reversed(remaining)])
        reasons: dict[str, str] = {}
        self._undeletable: set[str] = set()         # failed deletes and replaces stay failed until capacity
        self._unreplaceable: set[str] = set()       # is added that their pods could use
        self._left: dict[str, np.ndarray | None] = {}   # a failed node's pods that fit nowhere, as rows
        self._last_left: list[PodInfo] | None = None
        self._many_failed = False
        self._repack_failed = False
        self._unrepackable: set[str] = set()        # nodes of a repack that did not pay
        self._unworthy_alone: set[str] = set()      # nodes whose delete would not pay for its disruption (it only
                                                    # gets dearer as pods move in)
        complete = True
        while remaining and not (first_only and actions):
            action = self._next_action(remaining, reasons)
            if self._out_of_time():
                complete = False
            if action is None:
                break
            actions.append(action)
            remaining = [n for n in remaining if n.name not in action.nodes]
        for n in remaining:
            if first_only and actions:
                kept.append(Kept(n.name, "not considered: an earlier action goes first", considered=False))
            elif not complete:
                kept.append(Kept(n.name, "not considered: the decision time budget ran out", considered=False))
            else:
                kept.append(Kept(n.name, reasons.get(n.name, "no cheaper fit")))
        return ConsolidationPlan(actions, sorted(kept, key=lambda k: k.node), price_before, complete, cost_before)

    # --- drift --------------------------------------------------------------------------------
    def _drift(self, wanted: set[str] | None, budgets: PassBudgets, kept: list[Kept], actions: list[Action], *,
               first_only: bool) -> set[str]:
        """v1's Drift method: each Drifted node (the oldest first) its budget and holds allow is replaced, at any
        price, by the nodes its pods need beyond the room the others have (none when they fit: then it is deleted).
        Appends the actions, and Kept for the drifted nodes held; returns every drifted node it looked at."""
        looked: set[str] = set()
        views = sorted((v for name, v in self.views.items() if name in self.drifted and (wanted is None or name in wanted)),
                       key=lambda v: (v.created, v.name))
        for node in views:
            looked.add(node.name)
            if first_only and actions:
                kept.append(Kept(node.name, "not considered: an earlier action goes first", considered=False))
                continue
            why = self._drift_blocker(node)
            if why is None and (hold := budgets.take(nodepool_of(node), "Drifted")):
                why = hold.describe()
            if why is None:
                result = self._replace_drifted(node)
                if isinstance(result, Action):
                    actions.append(result)
                    continue
                why = result
            kept.append(Kept(node.name, f"drifted ({self.drifted[node.name]}), but {why}"))
        return looked

    def _drift_blocker(self, node: NodeView) -> str | None:
        """What keeps a Drifted node from being replaced now, or None: drift passes over consolidateAfter, the
        consolidation policy and do-not-consolidate, not over do-not-disrupt, do-not-evict or a PodDisruptionBudget."""
        if wk.pool_of(node.raw["metadata"].get("labels")) not in self.provisioners:
            return "its owner does not exist"
        if not initialized(node.raw):
            return "node is not initialized yet"
        if node.name in self.awaited:
            return f"node is nominated for pod {self.awaited[node.name]}, which is on its way to it"
        hold = disruption_hold(node_annotations=node.raw["metadata"].get("annotations"), pods=[p.raw for p in node.pods],
                               reason="Drifted", now=self.now)
        if hold is not None:
            return hold.describe()
        for pod in node.pods:
            if pdb := pdb_blocker(pod, self.pdbs, self._raw_pods):
                return f"pdb {pdb} prevents evicting pod {pod.key}"
        return None

    def _replace_drifted(self, node: NodeView) -> Action | str:
        """The Drift command for `node`, applied: its pods on the other nodes where they fit, new nodes (as
        provisioning would launch them) for the rest; or why its pods could not be placed."""
        others = [v for name, v in self.views.items() if name != node.name]
        results = self._schedule(others, self._lifted(node.pods))
        if results.unschedulable:
            key, reason = next(iter(results.unschedulable.items()))
            return f"pod {key} would fit nowhere else ({reason})"
        priced = [self.planner.at_worst(p) for p in results.new_nodes]
        replacements = [r for r in priced if r is not None]
        if len(replacements) < len(priced):
            return "no instance type its pods need has a price"
        by_key = {p.key: p for p in node.pods}
        moves = [(by_key[p.key], e.name) for e in results.existing_nodes for p in e.pods if p.key in by_key]
        for r in replacements:
            self._launching(r)
        moves += [(by_key[p.key], r.planned.name) for r in replacements for p in r.planned.pods if p.key in by_key]
        self._move(moves)
        self._drop(node)
        action = self._action(REPLACE if replacements else DELETE, [node], moves, replacements,
                              cost_saving=node.cost_per_hour - sum(r.cost_per_hour for r in replacements))
        return dataclasses.replace(action, drifted=self.drifted[node.name])

    def _next_action(self, remaining: list[NodeView], reasons: dict[str, str]) -> Action | None:
        """The next action over `remaining` (in disruption order), applied; None when there is none."""
        group: list[NodeView] = []
        moves: list[tuple[PodInfo, str]] = []
        receiving: set[str] = set()
        saving = 0.0
        for node in remaining:
            if len(group) >= self.max_nodes or self._out_of_time():
                break
            if node.name in receiving or node.name in self._undeletable:
                continue                                  # a failed delete stays failed until capacity is added
            if why := self._unworthy(node.cost_per_hour, [node]):
                reasons[node.name] = why                  # a delete saves the most: no replace of it alone pays
                self._unworthy_alone.add(node.name)
                continue
            found = self._fit([node], without={n.name for n in group} | {node.name})
            if found.why:
                reasons[node.name] = found.why
                self._undeletable.add(node.name)
                self._left[node.name] = self._left_rows()
                continue
            gain = node.cost_per_hour - self._landing(found.moves)   # its pods may cost credits where they land
            if gain <= 0 or self._unworthy(gain, [node]):
                reasons[node.name] = self._unworthy(gain, [node]) or (
                    f"no cheaper fit: its pods would cost ${node.cost_per_hour - gain:.4f}/h more where they fit, "
                    f"no less than the ${node.cost_per_hour:.4f}/h it costs")
                self._undeletable.add(node.name)
                self._left[node.name] = None
                continue
            saving += gain
            self._move(found.moves)
            group.append(node)
            moves += found.moves
            receiving |= {to for _, to in found.moves}
        if group:
            for n in group:
                self._drop(n)
            return self._action(DELETE, group, moves, [], cost_saving=saving)
        for find in (self._replace_many, self._repack, self._replace_one):
            action = find(remaining, reasons)
            if action is not None:
                launched = [r.planned.name for r in action.replacements]
                for failed in (self._undeletable, self._unreplaceable):
                    for name in list(failed):         # the replacement is capacity: what failed may fit now
                        left = self._left.get(name)
                        if left is None or self.packing.fits_in_any(left, launched):
                            failed.discard(name)
                return action
        return None

    def _replace_one(self, remaining: list[NodeView], reasons: dict[str, str]) -> Action | None:
        for node in remaining:
            if self._out_of_time():
                return None
            if node.name in self._unreplaceable or node.name in self._unworthy_alone:
                continue
            found = self._fit([node], without={node.name}, price=node.cost_per_hour)
            if found.why:
                reasons[node.name] = found.why
                self._unreplaceable.add(node.name)
                self._left[node.name] = self._left_rows()
                continue
            action = self._commit([node], found)
            if action is None:
                reasons[node.name] = self._stranded_reason()
                self._unreplaceable.add(node.name)
                self._left[node.name] = self.packing.needs(self._stranded)
                continue
            return action
        return None

    def _replace_many(self, remaining: list[NodeView], reasons: dict[str, str]) -> Action | None:
        """Several nodes for one cheaper node: the longest prefix (by binary search, as Karpenter
        does) of the on-demand candidates (or, with the spot-to-spot gate, of candidates of one capacity type)
        whose pods fit on the others and one new node."""
        if self._many_failed:
            return None                                   # found nothing once: the cluster only fills up after
        prefix: list[NodeView] = []
        for n in remaining:
            if not self._joins(prefix, n) or not self._simple([n]) or len(prefix) == self.max_nodes:
                break
            prefix.append(n)
        best: tuple[list[NodeView], _Found] | None = None
        lo, hi = 2, len(prefix)
        while lo <= hi and not self._out_of_time():
            mid = (lo + hi) // 2
            nodes = prefix[:mid]
            found = self._fit(nodes, without={n.name for n in nodes}, price=sum(n.cost_per_hour for n in nodes), one_node=True)
            if found.why:
                hi = mid - 1
            else:
                best, lo = (nodes, found), mid + 1
        action = self._commit(*best) if best is not None else None
        self._many_failed = action is None
        return action

    def _joins(self, prefix: list[NodeView], node: NodeView) -> bool:
        """Whether `node` may join the nodes `prefix` replaces together: an on-demand node always; a spot node only
        with the spot-to-spot gate, and then spot and on-demand nodes never together."""
        if not self.spot_to_spot:
            return node.capacity_type != wk.CAPACITY_TYPE_SPOT
        return not prefix or node.capacity_type == prefix[0].capacity_type

    def _repack(self, remaining: list[NodeView], reasons: dict[str, str]) -> Action | None:
        """Several nodes for several cheaper ones: the on-demand candidates that could save the most (their
        price over a lower bound on what any new nodes for their pods cost), as many as an action may
        disrupt, their pods on the room the others have, the rest packed onto new nodes by the
        provisioning optimiser; taken when those cost less at their worst-case prices. Each node that
        stays after the actions before is full in one resource or another, but not every node in the
        same one: packing their pods together again is what closes the gap to packing from scratch."""
        if self._repack_failed:
            return None                                   # found nothing once: the cluster only fills up after
        pool = [(price - bound, n) for n in remaining
                if n.name not in self._unrepackable and n.capacity_type != wk.CAPACITY_TYPE_SPOT and self._simple([n])
                and (price := n.cost_per_hour) > (bound := self.planner.lower_bound(n.pods)) + REPACK_MIN_SAVING]
        # the most saving per unit of disruption first (free to disrupt: first of all): a repack moves every pod
        pool.sort(key=lambda sn: (-sn[0] / sn[1].cost if sn[1].cost > 0 else -math.inf, sn[1].order))
        while len(pool) >= 2 and not self._out_of_time():
            group, pool = pool[:self.max_nodes], pool[self.max_nodes:]
            nodes = sorted((n for _, n in group), key=lambda n: n.order)
            repacked = self._repacked(nodes)
            action = self._commit(*repacked, at_least=self._enough(repacked[0])) if repacked is not None else None
            if action is not None:
                return action if action.replacements else dataclasses.replace(action, kind=DELETE)
            why = self._stranded_reason() if repacked is not None else REPACK_NO_CHEAPER
            for n in nodes:
                reasons.setdefault(n.name, why)
                self._unrepackable.add(n.name)
        self._repack_failed = not self._out_of_time()
        return None

    def _repacked(self, nodes: list[NodeView]) -> tuple[list[NodeView], _Found] | None:
        """Where the pods of `nodes` go when they are packed again: the room other nodes have, then new nodes
        the optimiser chooses; a node whose pods all go to one new node of its price or more stays as it is.
        The nodes that go and their pods' moves, or None unless they save REPACK_MIN_SHARE of their price."""
        pods = [p for n in nodes for p in n.pods]
        most = sum(n.cost_per_hour for n in nodes) - self.planner.lower_bound(pods)   # the most it could save
        if most < self._enough(nodes) or self._unworthy(most, nodes):
            return None
        without = {n.name for n in nodes}
        left_seconds = max(self._deadline - self._timer(), 0.0) if self._deadline is not None else None
        packing = dataclasses.replace(self._packing, max_seconds=left_seconds)
        if self._limited:                 # the scheduler counts the limits from the nodes that stay
            lifted = self._lifted(pods)
            others = [v for name, v in self.views.items() if name not in without]
            results = self._schedule(others, lifted, packing=packing)
            moves = [(p, e.name) for e in results.existing_nodes for p in e.pods]
        else:
            moves, left = self.packing.fit(pods, without)
            lifted = self._lifted(left)
            results = self._schedule([], lifted, packing=packing)
        priced = [self.planner.at_worst(p) for p in results.new_nodes]
        replacements = [r for r in priced if r is not None]
        if results.unschedulable or len(replacements) < len(priced):
            return None
        owner = {p.key: n for n in nodes for p in n.pods}
        for r in list(replacements):
            mine = {owner[p.key].name for p in r.planned.pods}
            if len(mine) == 1 and (n := owner[r.planned.pods[0].key]).price is not None \
                    and len(r.planned.pods) == len(n.pods) and r.cost_per_hour >= n.cost_per_hour:
                replacements.remove(r)                    # the node, moved as it is onto a new one
                nodes = [m for m in nodes if m is not n]
                self._unrepackable.add(n.name)
        cost = sum(n.cost_per_hour for n in nodes)
        if len(nodes) < 2 or cost - sum(r.cost_per_hour for r in replacements) < self._enough(nodes):
            return None                                   # one node alone is replace_one's to find
        gone = {n.name for n in nodes}
        moves = [(p, to) for p, to in moves if owner[p.key].name in gone]
        moves += [(p, r.planned.name) for r in replacements for p in r.planned.pods]
        return nodes, _Found(moves, replacements=replacements)

    @staticmethod
    def _enough(nodes: list[NodeView]) -> float:
        """What a repack of `nodes` must save, $/h."""
        return max(REPACK_MIN_SAVING, REPACK_MIN_SHARE * sum(n.cost_per_hour for n in nodes))

    def _lifted(self, pods: list[PodInfo]) -> list[PodInfo]:
        """`pods` as pending, for the scheduler to place again (still bound, it would not place them); kept, as
        every pod the rows saw (see _keep)."""
        lifted = [p.copy(node_name=None) for p in pods]
        self._keep += lifted
        return lifted

    def _left_rows(self) -> np.ndarray | None:
        return self.packing.needs(self._last_left) if self._last_left is not None else None

    # --- simulation ---------------------------------------------------------------------------
    def _fit(self, nodes: list[NodeView], *, without: set[str], price: float | None = None,
             one_node: bool = False) -> _Found:
        """Where the pods of `nodes` would go with the nodes in `without` gone: other nodes first,
        then (when `price` is given) new nodes that together cost less than `price`."""
        pods = [p for n in nodes for p in n.pods]        # the packing and a new node only read them
        if self._simple(nodes):
            moves, left = self.packing.fit(pods, without)
            self._last_left = left
            if not left:
                return _Found(moves)
            if price is None:
                return _Found(moves, why=f"no cheaper fit: pod {left[0].key} would fit nowhere else")
            if self._limited:
                return self._fit_full(nodes, without=without, price=price, one_node=one_node)
            spot = self._spot_to_spot(nodes)
            if spot is None:
                return _Found(why=SPOT_ONLY_DELETED)
            if why := self.planner.no_cheaper(left, price, one_node=one_node):
                return _Found(why=why)
            one = self.planner.one(left)
            if one is None and one_node:
                return _Found(why="no cheaper fit: its pods would need more than one new node")
            if one is not None:
                planned: Any = _Planned([one], {})
            else:
                planned = self._schedule([], self._lifted(left))
            return self._priced(moves, planned, left, price, one_node=one_node, spot=spot)
        return self._fit_full(nodes, without=without, price=price, one_node=one_node)

    def _fit_full(self, nodes: list[NodeView], *, without: set[str], price: float | None, one_node: bool) -> _Found:
        self._last_left = None
        others = [v for name, v in self.views.items() if name not in without]
        pods = [p.copy(node_name=None) for n in nodes for p in n.pods]
        results = self._schedule(others, pods)
        if results.unschedulable:
            key, reason = next(iter(results.unschedulable.items()))
            return _Found(why=f"no cheaper fit: pod {key} would fit nowhere else ({reason})")
        moves = [(p, e.name) for e in results.existing_nodes for p in e.pods]
        if not results.new_nodes:
            return _Found(moves)
        if price is None:
            return _Found(why=f"no cheaper fit: its pods would need {len(results.new_nodes)} new node(s)")
        spot = self._spot_to_spot(nodes)
        if spot is None:
            return _Found(why=SPOT_ONLY_DELETED)
        return self._priced(moves, results, [], price, one_node=one_node, spot=spot)

    def _schedule(self, others: list[NodeView], pods: list[PodInfo], *,
                  packing: PackingOptions | None = None) -> Any:
        placed = [p for v in others for p in v.pods + v.fixed]
        snapshot = ClusterSnapshot(self.snapshot.provisioners, self.snapshot.catalog, [v.raw for v in others],
                                   placed + pods, self.snapshot.daemonsets)
        return Scheduler(snapshot, name_node=self._fresh_name, packing=packing or self._packing).solve()

    def _fresh_name(self, provisioner: str, _: int) -> str:
        index = self._names[provisioner]
        self._names[provisioner] += 1
        return self._name_node(provisioner, index)

    def _spot_to_spot(self, nodes: list[NodeView]) -> int | None:
        """How many spot nodes a replacement of `nodes` replaces spot-to-spot: 0 when none is spot (any capacity
        type may replace them), None when spot nodes may only be deleted (the gate is off, or on-demand nodes are
        among them)."""
        spot = sum(1 for n in nodes if n.capacity_type == wk.CAPACITY_TYPE_SPOT)
        if not spot:
            return 0
        return spot if self.spot_to_spot and spot == len(nodes) else None

    def _priced(self, moves: list[tuple[PodInfo, str]], results: Any, left: list[PodInfo], price: float, *,
                one_node: bool, spot: int = 0) -> _Found:
        """`spot`: the spot nodes replaced spot-to-spot (0: none), whose replacements launch as spot only and
        follow v1's rule for how many cheaper types they need (apis/v1/disruption/methods.py)."""
        if results.unschedulable:
            key, reason = next(iter(results.unschedulable.items()))
            return _Found(why=f"no cheaper fit: pod {key} would fit nowhere else ({reason})")
        planned: list[PlannedNode] = [spot_only(p) for p in results.new_nodes] if spot else results.new_nodes
        if one_node and len(planned) > 1:
            return _Found(why=f"no cheaper fit: its pods would need {len(planned)} new nodes")
        chosen: Sequence[Replacement | None] = [self.planner.cheaper(p, price) for p in planned]
        if len(planned) == 1 and chosen[0] is not None and len(left) > 1 and not one_node and not spot:
            split = self.planner.split(left, min(price, chosen[0].cost_per_hour))
            if split is not None:
                chosen, planned = split, [r.planned for r in split]
        replacements = [r for r in chosen if r is not None]
        if len(replacements) < len(chosen) or sum(r.cost_per_hour for r in replacements) >= price:
            cheapest = planned[0]
            best = self.planner.worst_cost(cheapest.options[0], cheapest) if cheapest.options else None
            shown = f"${best:.4f}/h" if best is not None else "no price"
            many = f"{len(planned)} nodes, " if len(planned) > 1 else ""
            return _Found(why=(f"no cheaper fit: the cheapest replacement ({many}{cheapest.instance_type.name}, "
                               f"{shown} at worst) does not cost less than ${price:.4f}/h"))
        if spot:
            verdict = spot_to_spot(feature_gate=True, candidate_count=spot,
                                   cheaper_spot_types=min(len(r.planned.options) for r in replacements))
            if not verdict.allowed:
                return _Found(why=f"no cheaper fit: {verdict.why}")
            replacements = [cheapest_options(r, verdict.launch_options) for r in replacements]
        moves = moves + [(p, r.planned.name) for r in replacements for p in r.planned.pods]
        return _Found(moves, replacements=replacements)

    # --- applying -----------------------------------------------------------------------------
    def _commit(self, nodes: list[NodeView], found: _Found, *, at_least: float = 0.0) -> Action | None:
        """The replace of `nodes` by `found.replacements`, applied with the pods where kube-scheduler will put
        them once the nodes drain: the replacements start empty and it ranks them as it ranks every node
        (`Packing.spread`), so the optimiser's packing is only what it plans. The pods it would leave
        without room wait for the nodes provisioning will launch for them, and those count against the
        saving. None, with nothing applied, when that leaves a saving of no more than `at_least` $/h."""
        replacements: list[Replacement] = list(found.replacements)
        provisioned: list[Replacement] | None = []
        launched = [self._launching(r) for r in replacements]
        moves, left = found.moves, list[PodInfo]()
        if self._as_kube_scheduler_places and self._simple(nodes):   # the others: placed by the full scheduler
            moves, left = self.packing.spread([p for n in nodes for p in n.pods], {n.name for n in nodes})
            most = sum(n.cost_per_hour for n in nodes) - self._landing(moves, launched)
            if left and (most <= 0 or most < at_least):   # nodes for the stranded pods only cost more: not worth planning
                self._forget(launched)
                self._stranded, self._unworthy_why = left, None
                return None
            provisioned = self._for_stranded(left) if left else []
            launched += [self._launching(r) for r in provisioned or []]
        saving = sum(n.cost_per_hour for n in nodes) - self._landing(moves, launched)
        unworthy = self._unworthy(saving, nodes) if provisioned is not None and saving > 0 else None
        if provisioned is None or saving <= 0 or saving < at_least or unworthy:
            self._forget(launched)
            self._stranded = left
            self._unworthy_why = unworthy if saving >= at_least else None
            return None
        moves = moves + [(p, r.planned.name) for r in provisioned for p in r.planned.pods]
        self._move(moves)
        for n in nodes:
            self._drop(n)
        return self._action(REPLACE, nodes, moves, replacements, provisioned, cost_saving=saving)

    def _for_stranded(self, pods: list[PodInfo]) -> list[Replacement] | None:
        """New nodes for `pods` as provisioning would plan them, priced at worst case; None when there are none."""
        results = self._schedule([], self._lifted(pods))
        priced = [self.planner.at_worst(p) for p in results.new_nodes]
        if results.unschedulable or not priced or any(r is None for r in priced):
            return None
        return [r for r in priced if r is not None]

    def _stranded_reason(self) -> str:
        if self._unworthy_why:
            return self._unworthy_why
        if not self._stranded:
            return REPACK_NO_CHEAPER
        return (f"no cheaper fit: kube-scheduler, placing its pods by its own scores, would leave pod "
                f"{self._stranded[0].key} without room, and a node for it costs more than the move saves")

    def _move(self, moves: Sequence[tuple[PodInfo, str]]) -> None:
        self.packing.move(moves)
        for pod, to in moves:
            self.views[to].pods.append(pod.copy(node_name=to))
        self._keep += [pod for pod, _ in moves]

    def _drop(self, node: NodeView) -> None:
        self._keep += node.pods + node.fixed
        self.views.pop(node.name, None)
        self.packing.remove(node.name)

    def _forget(self, launched: list[str]) -> None:
        """Undo `_launching` for these replacements: they are not launched after all."""
        for name in launched:
            self.views.pop(name)
            self.packing.remove(name)

    def _launching(self, r: Replacement) -> str:
        """A replacement as a node being launched: no pods yet, its room what a pod may use of it."""
        p, t = r.planned, self.types[r.instance_type]
        raw = launching_node_manifest(p, t, r.zone, r.capacity_type)
        self.views[p.name] = view(raw, [], types=self.types, provisioners=self.provisioners, now=self.now,
                                  node_costs=self.node_costs)
        template = self.templates.get(p.provisioner)
        self.views[p.name].overhead_cpu = template.daemon_overhead.get("cpu", 0) if template else 0
        room = t.allocatable - Resources(template.daemon_overhead) if template else t.allocatable
        taints = template.taints if template else list(p.taints)
        self.packing.append(p.name, raw["metadata"]["labels"], taints, room, room)
        return p.name

    def _landing(self, moves: Sequence[tuple[PodInfo, str]], launched: Sequence[str] = ()) -> float:
        """What the nodes that stay or launch cost more once `moves` land (cost.py): the launched nodes their whole
        cost, the others the credits a burstable type is billed for the cpu it takes in."""
        cpu: collections.Counter[str] = collections.Counter()
        for pod, to in moves:
            cpu[to] += pod.requests.get("cpu", 0)
        more = sum(self.views[name].cost_per_hour for name in launched)
        for to, added in cpu.items():
            if (v := self.views.get(to)) is not None and v.instance_type is not None and v.instance_type.burst is not None:
                more += v.cost_with(added) - v.cost_per_hour
        return more

    def _action(self, kind: str, nodes: list[NodeView], moves: list[tuple[PodInfo, str]],
                replacements: list[Replacement], provisioned: Sequence[Replacement] = (), *, cost_saving: float) -> Action:
        """`cost_saving`: what the cluster costs less (cost.py), as the caller weighed it before applying `moves`."""
        price = sum(n.price or 0 for n in nodes) - sum(r.price_per_hour for r in [*replacements, *provisioned])
        return Action(kind, tuple(n.name for n in nodes), round(price, 6), disruption_cost=round(sum(n.cost for n in nodes), 6),
                      cost_savings_per_hour=round(cost_saving, 6),
                      replacement=replacements[0] if replacements else None,
                      pods=tuple(sorted(p.key for n in nodes for p in n.pods)),
                      replacements=tuple(replacements),
                      moves=tuple(sorted((p.key, to) for p, to in moves)), provisioned=tuple(provisioned))
