"""Consolidation, live: decide, wait, decide again, then act on several disjoint actions at once.

Each pass, when the cluster is settled (no karpy node launching; pods
waiting for capacity hold consolidation back only for a stabilization
window, as in v0.16, so one pod no provisioner can satisfy does not stop it
for good), asks `Consolidator` for every action it finds within the
decision time budget and takes the first ones that together disrupt at most
`max_disrupted` nodes (an empty node disrupts none) and no more pods of any PodDisruptionBudget than it
allows. The actions are only proposed: after the stabilization wait they are
decided again against fresh state, and the longest run of them that comes
out the same (the same kind over the same nodes) goes ahead as decided
afresh, as far as the disruption budget, less the nodes still being
deleted, allows now; a proposal whose turn comes while the cluster is not
settled, or while drains use the budget, waits for at most one more window.

Proposals overlap: up to PROPOSALS_IN_FLIGHT wait out their windows at
once, staggered evenly over the window, each decided as if the nodes of the
ones before it were already being deleted (their pods on the way, the nodes
receiving them nominated). So the budget bounds the nodes disrupted at once
and the window bounds how stale a decision may be, without either one
setting the pace of the other: after a large scale-in the cluster shrinks by
a budget's worth of nodes every third of a window rather than every window.

A delete hands the nodes to termination (cordon, drain through the
Eviction API, finalizer). A replace cordons the old nodes, launches the
replacements, and deletes the old nodes only once every replacement is
Ready and initialized; if one never gets there, the replacements are
deleted and the old nodes uncordoned. A delete that moves pods onto a
replacement waits for it the same way. Every skipped candidate gets an Event
and a log line when its reason changes.

kube-scheduler places the drained pods by its own scores, which spread them
out, so by default an action is judged with the pods placed that way. With
`steer` (kube-scheduler calls karpy's extender), each receiving node is
marked, before the drain, with how many pods of each owner it waits for
(apis/moving_in.py); the extender scores it first for those owners' pods, so
the pods land where the plan put them and actions are judged as planned.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import math
import time
from typing import Any, Callable, Iterable, Mapping

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from karpy.apis import disruption, moving_in
from karpy.apis import labels as wk
from karpy.apis.conditions import initialized, ready
from karpy.apis.pods import busy, object_key
from karpy.apis.v1.labels import DISRUPTED_TAINT_KEY
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.controller.clock import Clock
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import CloudProvider
from karpy.controller.consolidation.candidates import pdb_allowance
from karpy.controller.consolidation.decisions import DELETE, REPLACE, Action, ConsolidationPlan, Consolidator
from karpy.controller.consolidation.disruption_cost import MIN_SAVINGS_PER_POD
from karpy.controller.consolidation.drift import drifted_nodes
from karpy.controller.inflight import is_leaving
from karpy.controller.launch.launcher import Launcher
from karpy.controller.metrics import CONSOLIDATION_ACTIONS, CONSOLIDATION_NODES_CREATED, count_nodeclaim_disrupted
from karpy.controller.provisioning.provisioner import provisionable_pods
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.consolidation")
CANCELLED = Counter("karpy_consolidation_actions_cancelled_total", "Consolidation actions dropped on re-validation",
                    ["action"])
REPLACEMENT_TIMEOUT = dt.timedelta(minutes=10)
REPORT_AGAIN_AFTER = dt.timedelta(minutes=30)   # an unchanged reason for a kept node is said again only this rarely
REPORT_NODE_EVERY = dt.timedelta(minutes=2)     # and a node's changed reason no sooner than this (Karpenter's dedupe TTL)
TAINT_TRIES = 3                              # a node written meanwhile (409): read it again, this often
SETTLE_CHECK_SECONDS = 2.0                   # while an action completes, look again this soon
PROPOSALS_IN_FLIGHT = 3                      # proposals waiting out their stabilization windows at once
EVENTS_PER_PASS = 20                         # Unconsolidatable Events sent per pass; the rest on later passes
# how long a receiving node waits for the pods moved to it: drains wait for PodDisruptionBudgets, but a plan
# the cluster has moved on from should not steer pods for long
STEER_FOR = dt.timedelta(minutes=5)


@dataclasses.dataclass(frozen=True)
class Settings:
    stabilization_seconds: float = 15.0      # between deciding and re-validating
    min_node_age_seconds: float = 60.0       # younger nodes were just launched: leave them
    poll_seconds: float = 10.0               # how often to look when nothing happens
    max_disrupted: str = "10%"               # nodes drained at once: a count or a share of karpy's nodes
    budget_seconds: float = 10.0             # how long one decision may search
    pending_wait_seconds: float = 300.0      # v0.16's stabilization window while pods are pending
    steer: bool = False                      # kube-scheduler calls karpy's extender: moved pods go where planned
    min_savings_per_pod: float = MIN_SAVINGS_PER_POD   # $/h an action must save per unit of disruption cost
    node_cost_per_hour: float = 0.0          # --node-cost-per-hour: nodes are costed as provisioning costs them
    spot_to_spot: bool = False               # the SpotToSpotConsolidation feature gate


def disruption_budget(max_disrupted: str, nodes: int) -> int:
    """The number of nodes `max_disrupted` ("3" or "10%") allows of `nodes`: at least 1."""
    text = str(max_disrupted).strip()
    if text.endswith("%"):
        return max(1, math.floor(float(text[:-1]) / 100 * nodes))
    return max(1, int(text))


@dataclasses.dataclass
class _Proposal:
    actions: list[Action]
    at: dt.datetime

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for a in self.actions for n in a.nodes)

    @property
    def action(self) -> Action:
        return self.actions[0]


@dataclasses.dataclass
class _Replacing:
    action: Action
    new: tuple[str, ...]
    deadline: dt.datetime

    @property
    def old(self) -> tuple[str, ...]:
        return self.action.nodes


def disrupted_taints(taints: list[dict[str, Any]], *, on: bool) -> list[dict[str, Any]]:
    """Pure: `taints` with v1's `karpenter.sh/disrupted:NoSchedule` added (`on`) or removed."""
    kept = [t for t in taints if t.get("key") != DISRUPTED_TAINT_KEY]
    return kept + [{"key": DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}] if on else kept


def marked_drifted(state: ClusterState) -> dict[str, str]:
    """Node name -> Drifted reason, as the watched NodeClaims say; none when the NodeClaim CRD is not installed."""
    return drifted_nodes(state.claims.items())


def pending_pods(state: ClusterState) -> list[str]:
    """The pods waiting for capacity karpy should launch ("ns/name")."""
    return sorted(object_key(p) for p in provisionable_pods(state))


def unsettled(state: ClusterState) -> str | None:
    """Why the cluster is not in a state to consolidate from, or None."""
    if provisionable_pods(state):
        return "pods are waiting for capacity"
    return launching_or_terminating(state)


def launching_or_terminating(state: ClusterState) -> str | None:
    """The karpy node being launched or deleted, as a reason to wait, or None."""
    return launching(state) or next((f"node {name} is being deleted" for name in disrupting(state)), None)


def launching(state: ClusterState) -> str | None:
    """The karpy node being launched, as a reason to wait, or None."""
    for node in state.nodes.items():
        if state.ours(node) is not None and not is_leaving(node) \
                and not initialized(node):
            return f"node {node['metadata']['name']} is being launched"
    return None


def disrupting(state: ClusterState) -> list[str]:
    """The karpy nodes being deleted, by their Node or their NodeClaim (the in-flight index's leaving set)."""
    return sorted(state.in_flight.leaving_nodes(n for n in state.nodes.items() if state.ours(n) is not None))


def draining(state: ClusterState) -> list[str]:
    """The karpy nodes being deleted that still have pods to move: these count against the disruption budget.
    An empty node disrupts no workload; as in v0.16, every empty node goes at once."""
    return [name for name in disrupting(state) if busy(state.pods_on(name))]


def disrupted(action: Action) -> int:
    """The nodes `action` counts against the disruption budget: none for a delete of empty nodes."""
    return len(action.nodes) if action.pods else 0


def fewer_launches(action: Action, replaced: dict[str, Action]) -> bool:
    """True when `action` replaces only nodes proposed for replacing (`replaced`: node -> its proposed
    action) with no more new nodes than those proposals launch together, as when two proposed
    replacements of one node each are found to fit on one new node."""
    if action.kind != REPLACE or any(n not in replaced for n in action.nodes):
        return False
    before = {id(replaced[n]): replaced[n] for n in action.nodes}
    return len(action.replacements) <= sum(len(a.replacements) for a in before.values())


def decide(state: ClusterState, catalog: Catalog, now: dt.datetime, *, min_age_seconds: float,
           name_node: Callable[[str, int], str], only: tuple[str, ...] | None = None,
           first_only: bool = True, budget_seconds: float | None = None,
           max_nodes_per_action: int | None = None, going: Iterable[str] = (), steer: bool = False,
           min_savings_per_pod: float = MIN_SAVINGS_PER_POD, node_cost_per_hour: float = 0.0,
           drifted: Mapping[str, str] | None = None, spot_to_spot: bool = False) -> ConsolidationPlan:
    """The first action consolidation would take now on the cluster in `state` (restricted to `only`'s nodes
    when given); every action, one after another, with `first_only=False`. Pods waiting for capacity
    are in the snapshot: the nodes they would go to are theirs (nominated), not candidates. The nodes
    in `going` (those of proposals decided before) are judged as if already being deleted. With `steer`
    the moved pods are taken to land as planned, else where kube-scheduler's own scores put them. `drifted` (node ->
    Drifted reason) defaults to what the NodeClaims say now; `spot_to_spot` is the SpotToSpotConsolidation gate."""
    pods = state.bound_pods() + provisionable_pods(state)
    snapshot = state.snapshot(catalog, pods)
    if going := set(going):
        snapshot = dataclasses.replace(snapshot, leaving=snapshot.leaving | going)
    extra: dict[str, Any] = {"max_nodes_per_action": max_nodes_per_action} if max_nodes_per_action and max_nodes_per_action > 0 else {}
    consolidator = Consolidator(snapshot, state.pdbs.items(), now=now, min_age_seconds=min_age_seconds, name_node=name_node,
                                budget_seconds=budget_seconds, as_kube_scheduler_places=not steer,
                                min_savings_per_pod=min_savings_per_pod, node_cost_per_hour=node_cost_per_hour,
                                drifted=marked_drifted(state) if drifted is None else drifted,
                                spot_to_spot=spot_to_spot, **extra)
    return consolidator.plan(first_only=first_only, only=only)


class Consolidation:
    def __init__(self, state: ClusterState, cloud: CloudProvider, catalog: Callable[[], Catalog], clock: Clock,
                 name_node: Callable[[str, int], str], settings: Settings = Settings(), *,
                 launcher: Launcher | None = None) -> None:
        self.state, self.cloud, self.clock = state, cloud, clock
        self.launcher = launcher or Launcher(state, cloud, catalog)
        self._catalog = catalog
        self._name_node = name_node
        self.settings = settings
        self._proposals: list[_Proposal] = []      # oldest first
        self._replacing: list[_Replacing] = []
        self._deferred: list[Action] = []          # deletes that move pods onto a replacement not up yet
        self._launched_as: dict[str, str] = {}     # a replacement's planned name -> its Node's name, while in flight
        self._reasons: dict[str, dict[str, dt.datetime]] = {}   # per kept node: each reason given, and when
        self._pending_since: dt.datetime | None = None
        self._waiting_logged: str | None = None

    # --- deciding ----------------------------------------------------------------------------
    @property
    def _proposal(self) -> _Proposal | None:
        """The proposal whose turn comes next."""
        return self._proposals[0] if self._proposals else None

    def unsettled(self) -> str | None:
        """Why consolidation waits now, or None. Pending pods hold it back for `pending_wait_seconds`
        from when they were first seen (v0.16's stabilization window), not for as long as they exist."""
        if why := launching(self.state):
            return why
        pending = pending_pods(self.state)
        if not pending:
            self._pending_since = None
            return None
        now = self.clock.now()
        if self._pending_since is None:
            self._pending_since = now
        waited = (now - self._pending_since).total_seconds()
        if waited < self.settings.pending_wait_seconds:
            return "pods are waiting for capacity"
        if self._waiting_logged != "past":
            self._waiting_logged = "past"
            log.info("Consolidating though %d pod(s) wait for capacity (%s): they have waited %.0fs, past the "
                     "stabilization window", len(pending), ", ".join(pending[:3]), waited)
        return None

    def decide(self, *, only: tuple[str, ...] | None = None, first_only: bool = True,
               going: Iterable[str] = ()) -> ConsolidationPlan:
        """Actions sized to the whole disruption budget: the nodes being deleted now are gone by the
        time a proposal's turn comes, and `select` cuts what the budget does not allow then."""
        return decide(self.state, self._catalog(), self.clock.now(), min_age_seconds=self.settings.min_node_age_seconds,
                      name_node=self._name_node, only=only, first_only=first_only, going=going,
                      budget_seconds=self.settings.budget_seconds, max_nodes_per_action=self.full_budget(),
                      steer=self.settings.steer, min_savings_per_pod=self.settings.min_savings_per_pod,
                      node_cost_per_hour=self.settings.node_cost_per_hour, spot_to_spot=self.settings.spot_to_spot)

    def full_budget(self) -> int:
        """The nodes `max_disrupted` allows of karpy's nodes."""
        ours = [n for n in self.state.nodes.items() if self.state.ours(n) is not None]
        return disruption_budget(self.settings.max_disrupted, len(ours))

    def budget(self) -> int:
        """How many more nodes may be disrupted now: the budget less the karpy nodes being drained."""
        return self.full_budget() - len(draining(self.state))

    def select(self, actions: list[Action], *, budget: int | None = None) -> list[Action]:
        """The first actions that together disrupt at most `budget` (default `budget()`) nodes, and no more
        pods of any PodDisruptionBudget than it allows now; at least the first action while the budget
        is not used up."""
        budget = self.budget() if budget is None else budget
        pods = self.state.pods.items()
        by_key = {object_key(p): p for p in pods}
        pdbs = self.state.pdbs.items()
        left = {id(pdb): pdb_allowance(pdb, pods) for pdb in pdbs}
        chosen: list[Action] = []
        for action in actions:
            moving = [by_key[k] for k in action.pods if k in by_key]
            uses = {id(pdb): sum(1 for p in moving if disruption.selects(pdb, p)) for pdb in pdbs}
            if (chosen or budget <= 0) and disrupted(action) \
                    and (sum(disrupted(a) for a in chosen) + disrupted(action) > budget
                           or any(n > left[i] for i, n in uses.items() if n)):
                break
            chosen.append(action)
            for i, n in uses.items():
                left[i] -= n
        return chosen

    # --- the loop ----------------------------------------------------------------------------
    def reconcile(self) -> float | None:
        if self._replacing or self._deferred:
            return self._await_replacements()
        now = self.clock.now()
        if self._proposals:
            late = (now - self._proposals[0].at).total_seconds() - self.settings.stabilization_seconds
            if late >= 0:
                return self._take(late)
        wait = self._propose()
        if self._proposals:
            due = self.settings.stabilization_seconds - (now - self._proposals[0].at).total_seconds()
            wait = min(wait, max(due, 0.0))
        return wait

    def _propose(self) -> float:
        """Decide the next proposal when one is due; the seconds until another one could be."""
        now = self.clock.now()
        spacing = self.settings.stabilization_seconds / PROPOSALS_IN_FLIGHT
        if len(self._proposals) >= PROPOSALS_IN_FLIGHT:
            return self.settings.poll_seconds
        if self._proposals and (since := (now - self._proposals[-1].at).total_seconds()) < spacing:
            return spacing - since
        if why := self.unsettled():
            if why != self._waiting_logged:
                self._waiting_logged = why
                log.info("Consolidation waits: %s", why)
            return SETTLE_CHECK_SECONDS
        if self._waiting_logged != "past":
            self._waiting_logged = None
        going = tuple(n for p in self._proposals for n in p.nodes)
        plan = self.decide(first_only=False, going=going)
        chosen = self.select(plan.actions, budget=self.full_budget())
        if chosen:
            for action in chosen:
                log.info("Consolidation candidate: %s; re-validating in %.0fs", action.describe(),
                         self.settings.stabilization_seconds)
            self._proposals.append(_Proposal(chosen, now))
        self._report_kept(plan)                # while the proposal waits: Events cost a request each
        if chosen:
            return spacing
        return self.settings.poll_seconds

    def _take(self, late: float) -> float | None:
        """The oldest proposal's turn: re-validated and acted on, or held (at most one more window)
        while the cluster is not settled or drains use the disruption budget."""
        head = self._proposals[0]
        hold = self.unsettled()
        if hold is None and (going := draining(self.state)) and self.budget() < sum(disrupted(a) for a in head.actions):
            hold = f"{len(going)} node(s) being drained use the disruption budget ({going[0]}, ...)"
        if hold is not None and late < self.settings.stabilization_seconds:
            if hold != self._waiting_logged:
                self._waiting_logged = hold
                log.info("Consolidation waits to act: %s", hold)
            return 1.0
        self._proposals.pop(0)
        return self._revalidate_and_act(head.actions)

    def _revalidate_and_act(self, actions: list[Action]) -> float | None:
        standing, why = self.revalidate_all(actions)
        taken = {n for a in standing for n in a.nodes}
        for action in actions:
            if any(n not in taken for n in action.nodes):
                CANCELLED.labels(action.kind).inc()
                log.info("Abandoning consolidation (%s): %s", action.describe(), why)
        allowed = self.select(standing)
        for action in standing[len(allowed):]:
            log.info("Postponing consolidation (%s): the disruption budget allows %d more node(s) now",
                     action.describe(), max(self.budget(), 0))
        if not allowed:
            return 0.0
        wait: float | None = SETTLE_CHECK_SECONDS
        for action in allowed:
            wait = self._act(action, [r.planned.name for a in allowed for r in a.replacements])
        return wait

    def revalidate(self, action: Action) -> str | None:
        """Why `action` may no longer be taken, decided afresh, or None when it still stands."""
        return self.revalidate_all([action])[1]

    def revalidate_all(self, actions: list[Action]) -> tuple[list[Action], str | None]:
        """What a fresh decision over the proposed nodes still takes: the longest run of its actions (later
        ones may rely on earlier ones) that are each a proposed action decided again (the same kind over
        the same nodes), a delete of proposed nodes (their pods now fit on the nodes that stay, as when a
        scale-in goes on during the window) or a replace of nodes proposed for replacing that launches no
        more nodes than they would have (so nothing is launched that was not proposed); as proposed when
        the same pods move (a replacement keeps its name), else as decided now. And why any proposed node
        is not acted on."""
        if why := self.unsettled():
            return [], why
        fresh = self.decide(only=tuple(n for a in actions for n in a.nodes), first_only=False)
        proposed = {(a.kind, a.nodes): a for a in actions}
        replaced = {n: a for a in actions if a.kind == REPLACE for n in a.nodes}
        standing: list[Action] = []
        why = None
        for again in fresh.actions:
            before = proposed.get((again.kind, again.nodes))
            if before is None and again.kind != DELETE and not fewer_launches(again, replaced):
                why = f"the cluster changed: now {again.describe()}"
                break
            standing.append(before if before is not None and before.pods == again.pods else again)
        taken = {n for a in standing for n in a.nodes}
        if why is None and any(n not in taken for a in actions for n in a.nodes):
            why = "; ".join(f"{k.node}: {k.reason}" for k in fresh.kept if k.considered) or "no action any more"
        return standing, why

    def _act(self, action: Action, launching: list[str]) -> float | None:
        log.info("Consolidating: %s", action.describe())
        for name in action.nodes:
            node = self.state.nodes.get("", name)
            if node is not None:
                events.record(self.state.client, node, reason="Consolidating", component="karpy",
                              message=f"consolidation: {action.describe()}")
        if action.kind != REPLACE:
            if any(to in launching for _, to in action.moves):
                for name in action.nodes:
                    self._cordon(name, True)          # its pods go to a replacement: it waits for it
                self._deferred.append(action)
                return 1.0
            self._steer(action)
            for name in action.nodes:
                self._taint_nodepool_node(name)
                self._count_disrupted(action, name)
                self.state.delete_node(name)
            CONSOLIDATION_ACTIONS.inc(action.kind)
            return SETTLE_CHECK_SECONDS
        for name in action.nodes:
            self._cordon(name, True)                   # nothing new lands on a node that is going
        launched: list[str] = []
        for replacement in action.replacements:
            new = self.launcher.launch(replacement.planned, bind=False)   # its pods move when the old nodes drain
            if new is None:                            # the launcher said why (log, Events on the pods)
                log.error("Consolidation could not launch the replacement for node(s) %s", ", ".join(action.nodes))
                for name in launched:
                    self.state.delete_node(name)
                for name in action.nodes:
                    self._cordon(name, False)
                return self.settings.poll_seconds
            log.info("Launched replacement %s for node(s) %s", new, ", ".join(action.nodes))
            CONSOLIDATION_NODES_CREATED.inc()
            launched.append(new)
            self._launched_as[replacement.planned.name] = new
        self._replacing.append(_Replacing(action, tuple(launched), self.clock.now() + REPLACEMENT_TIMEOUT))
        return 1.0

    def _await_replacements(self) -> float | None:
        for r in list(self._replacing):
            up = all((new := self.state.nodes.get("", name)) is not None and ready(new) and initialized(new)
                     for name in r.new)
            if up:
                log.info("Replacement(s) %s ready; deleting node(s) %s", ", ".join(r.new), ", ".join(r.old))
                self._steer(r.action)
                for name in r.old:
                    self._count_disrupted(r.action, name)
                    self.state.delete_node(name)
                CONSOLIDATION_ACTIONS.inc(REPLACE)
                self._replacing.remove(r)
            elif self.clock.now() >= r.deadline:
                log.error("Replacement(s) %s for node(s) %s did not become ready; deleting them and keeping node(s) %s",
                          ", ".join(r.new), ", ".join(r.old), ", ".join(r.old))
                for name in r.new:
                    self.state.delete_node(name)
                for name in r.old:
                    self._cordon(name, False)
                CANCELLED.labels(REPLACE).inc()
                self._replacing.remove(r)
                for action in [a for a in self._deferred if any(to in r.new for _, to in a.moves)]:
                    for name in action.nodes:
                        self._cordon(name, False)      # its pods had nowhere else to go
                    CANCELLED.labels(action.kind).inc()
                    self._deferred.remove(action)
        if not self._replacing:
            for action in self._deferred:
                self._steer(action)
                for name in action.nodes:
                    self.state.delete_node(name)
                CONSOLIDATION_ACTIONS.inc(action.kind)
            self._deferred = []
            self._launched_as = {}
            return SETTLE_CHECK_SECONDS
        return 1.0

    # --- effects -----------------------------------------------------------------------------
    def _report_kept(self, plan: ConsolidationPlan) -> None:
        """One Unconsolidatable event per node and reason: a reason already given is not repeated each pass,
        nor when the node's reasons alternate, until REPORT_AGAIN_AFTER has passed; a node's new reason waits
        until REPORT_NODE_EVERY after its last one."""
        now = self.clock.now()
        sent = 0
        for kept in plan.kept:
            if sent >= EVENTS_PER_PASS:
                break                          # the others on later passes: a pass sends a bounded number
            given = self._reasons.setdefault(kept.node, {})
            if not kept.considered or (kept.reason in given and now - given[kept.reason] < REPORT_AGAIN_AFTER):
                continue
            if given and now - max(given.values()) < REPORT_NODE_EVERY:
                continue                       # a reason that changes every pass is said every few minutes, not every pass
            given[kept.reason] = now
            node = self.state.nodes.get("", kept.node)
            if node is None or self.state.ours(node) is None:
                continue
            log.info("Not consolidating node %s: %s", kept.node, kept.reason)
            sent += 1
            events.record(self.state.client, node, reason="Unconsolidatable", message=kept.reason, component="karpy")
        live = {n["metadata"]["name"] for n in self.state.nodes.items()}
        for name in set(self._reasons) - live:
            del self._reasons[name]

    def _steer(self, action: Action) -> None:
        """With `steer`, mark each node the action's pods move to with the owners it waits for, before the
        drain evicts them: recreated pods have new names, so they are steered by owner. A mark that cannot be
        written only leaves those pods to kube-scheduler's own scores."""
        if not self.settings.steer or not action.moves:
            return
        now = self.clock.now()
        moving = moving_in.by_owner(action.moves, self.state.pods.items(), renamed=self._launched_as)
        for name, owners in moving.items():
            node = self.state.nodes.get("", name)
            if node is None:
                continue
            held = collections.Counter(o for p in self.state.pods_on(name) if (o := moving_in.owner_of(p)) is not None)
            before = moving_in.parse((node["metadata"].get("annotations") or {}).get(wk.MOVING_IN))
            mark = moving_in.merged(before, held, owners, now=now, until=now + STEER_FOR)
            try:
                self.state.client.patch(path_of("v1", "nodes", name=name),
                                        {"metadata": {"annotations": {wk.MOVING_IN: mark.encode()}}})
            except ApiException as e:
                if e.status != 404:
                    log.warning("Could not mark node %s with the pods moving to it: %s %s", name, e.status, e.reason)

    def _count_disrupted(self, action: Action, name: str) -> None:
        """`karpenter_nodeclaims_disrupted_total` for a NodePool's node this action deletes, with v1's reason."""
        node = self.state.nodes.get("", name)
        if node is None:
            return
        reason = "drifted" if action.drifted else "underutilized" if action.pods else "empty"
        pool_name = (node["metadata"].get("labels") or {}).get(wk.NODEPOOL)
        pool = next((p for p in self.state.live_provisioners()
                     if isinstance(p, NodePoolProvisioner) and p.name == pool_name), None)   # decoded: defaults filled
        policy = pool.node_pool.spec.disruption.consolidation_policy if pool is not None else ""
        count_nodeclaim_disrupted(node, reason, consolidation_policy=policy)

    def _taint_nodepool_node(self, name: str) -> None:
        """v1 taints every node it disrupts before deleting it; a Provisioner's node goes as in v0.16."""
        node = self.state.nodes.get("", name)
        if node is not None and wk.NODEPOOL in (node["metadata"].get("labels") or {}):
            self._cordon(name, True)

    def _cordon(self, name: str, on: bool) -> None:
        """Keep new pods off a node being disrupted (`on`), or let them back when the action is abandoned: cordoned,
        and a NodePool's node also tainted `karpenter.sh/disrupted:NoSchedule` as v1 does."""
        path = path_of("v1", "nodes", name=name)
        for attempt in range(1, TAINT_TRIES + 1):
            try:
                node = self.state.client.get(path)      # fresh: the taint list is written whole
                patch: dict[str, Any] = {"spec": {"unschedulable": on or None}}
                if wk.NODEPOOL in (node["metadata"].get("labels") or {}):
                    taints = disrupted_taints(node["spec"].get("taints") or [], on=on)
                    patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                             "spec": {"unschedulable": on or None, "taints": taints or None}}
                self.state.client.patch(path, patch)
                return
            except ApiException as e:
                if e.status == 404:
                    return                               # gone: nothing lands on it any more
                if e.status != 409 or attempt == TAINT_TRIES:
                    raise
                time.sleep(0.05 * attempt)               # written meanwhile: back off a moment, read it again

