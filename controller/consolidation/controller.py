"""Consolidation, live: decide, wait, decide again, then act.

Each pass, when the cluster is settled (no pod waiting for capacity, no karpy
node launching or terminating), asks `Consolidator` for the first action.
The action is only proposed: after the stabilization wait it is decided
again against fresh state, and it goes ahead only if the same action comes
out moving the same pods, with nothing pending meanwhile. A delete hands
the nodes to termination (cordon, drain through the Eviction API, finalizer).
A replace cordons the old node, launches the replacement, and deletes the
old node only once the replacement is Ready and initialized; if it never
gets there, the replacement is deleted and the old node uncordoned.
Every skipped candidate gets an Event and a log line when its reason changes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Callable

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from karpy.apis import labels as wk
from karpy.apis.conditions import ready
from karpy.controller.clock import Clock
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import CloudProvider
from karpy.controller.consolidation.decisions import REPLACE, Action, ConsolidationPlan, Consolidator
from karpy.controller.launch.launcher import Launcher
from karpy.controller.provisioning.provisioner import provisionable_pods
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.consolidation")
ACTIONS = Counter("karpy_consolidation_actions_performed_total", "Consolidation actions carried out", ["action"])
CANCELLED = Counter("karpy_consolidation_actions_cancelled_total", "Consolidation actions dropped on re-validation",
                    ["action"])
REPLACEMENT_TIMEOUT = dt.timedelta(minutes=10)
REPORT_AGAIN_AFTER = dt.timedelta(minutes=30)   # an unchanged reason for a kept node is said again only this rarely
REPORT_NODE_EVERY = dt.timedelta(minutes=2)     # and a node's changed reason no sooner than this (Karpenter's dedupe TTL)
SETTLE_CHECK_SECONDS = 2.0                   # while an action completes, look again this soon


@dataclasses.dataclass(frozen=True)
class Settings:
    stabilization_seconds: float = 15.0      # between deciding and re-validating
    min_node_age_seconds: float = 60.0       # younger nodes were just launched: leave them
    poll_seconds: float = 10.0               # how often to look when nothing happens


@dataclasses.dataclass
class _Proposal:
    action: Action
    at: dt.datetime


@dataclasses.dataclass
class _Replacing:
    old: str
    new: str
    deadline: dt.datetime


def unsettled(state: ClusterState) -> str | None:
    """Why the cluster is not in a state to consolidate from, or None."""
    if provisionable_pods(state):
        return "pods are waiting for capacity"
    for node in state.nodes.items():
        if state.ours(node) is None:
            continue
        if node["metadata"].get("deletionTimestamp"):
            return f"node {node['metadata']['name']} is being deleted"
        if (node["metadata"].get("labels") or {}).get(wk.INITIALIZED) != "true":
            return f"node {node['metadata']['name']} is being launched"
    return None


def decide(state: ClusterState, catalog: Catalog, now: dt.datetime, *, min_age_seconds: float,
           name_node: Callable[[str, int], str], only: tuple[str, ...] | None = None,
           first_only: bool = True) -> ConsolidationPlan:
    """The first action consolidation would take now on the cluster in `state` (restricted to `only`'s nodes
    when given); every action, one after another, with `first_only=False`."""
    snapshot = state.snapshot(catalog, state.bound_pods())
    consolidator = Consolidator(snapshot, state.pdbs.items(), now=now, min_age_seconds=min_age_seconds, name_node=name_node)
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
        self._proposal: _Proposal | None = None
        self._replacing: _Replacing | None = None
        self._reasons: dict[str, dict[str, dt.datetime]] = {}   # per kept node: each reason given, and when

    # --- deciding ----------------------------------------------------------------------------
    def unsettled(self) -> str | None:
        return unsettled(self.state)

    def decide(self, *, only: tuple[str, ...] | None = None, first_only: bool = True) -> ConsolidationPlan:
        return decide(self.state, self._catalog(), self.clock.now(), min_age_seconds=self.settings.min_node_age_seconds,
                      name_node=self._name_node, only=only, first_only=first_only)

    # --- the loop ----------------------------------------------------------------------------
    def reconcile(self) -> float | None:
        if self._replacing is not None:
            return self._await_replacement()
        if self._proposal is not None:
            waited = (self.clock.now() - self._proposal.at).total_seconds()
            if waited < self.settings.stabilization_seconds:
                return self.settings.stabilization_seconds - waited
            proposal, self._proposal = self._proposal, None
            return self._revalidate_and_act(proposal.action)
        if self.unsettled() is not None:
            return SETTLE_CHECK_SECONDS
        plan = self.decide()
        self._report_kept(plan)
        if plan.actions:
            action = plan.actions[0]
            log.info("Consolidation candidate: %s; re-validating in %.0fs", action.describe(),
                     self.settings.stabilization_seconds)
            self._proposal = _Proposal(action, self.clock.now())
            return self.settings.stabilization_seconds
        return self.settings.poll_seconds

    def _revalidate_and_act(self, action: Action) -> float | None:
        why = self.revalidate(action)
        if why is not None:
            CANCELLED.labels(action.kind).inc()
            log.info("Abandoning consolidation (%s): %s", action.describe(), why)
            return 0.0
        return self._act(action)

    def revalidate(self, action: Action) -> str | None:
        """Why `action` may no longer be taken, decided afresh, or None when it still stands."""
        if why := self.unsettled():
            return why
        fresh = self.decide(only=action.nodes)
        if not fresh.actions:
            return "; ".join(f"{k.node}: {k.reason}" for k in fresh.kept) or "no action any more"
        again = fresh.actions[0]
        if (again.kind, again.nodes, again.pods) != (action.kind, action.nodes, action.pods):
            return f"the cluster changed: now {again.describe()}"
        return None

    def _act(self, action: Action) -> float | None:
        log.info("Consolidating: %s", action.describe())
        for name in action.nodes:
            node = self.state.nodes.get("", name)
            if node is not None:
                events.record(self.state.client, node, reason="Consolidating", component="karpy",
                              message=f"consolidation: {action.describe()}")
        if action.kind != REPLACE:
            for name in action.nodes:
                self.state.delete_node(name)
            ACTIONS.labels(action.kind).inc()
            return SETTLE_CHECK_SECONDS
        assert action.replacement is not None
        old = action.nodes[0]
        self._cordon(old, True)                       # nothing new lands on a node that is going
        new = self.launcher.launch(action.replacement.planned, bind=False)   # its pods move when `old` drains
        if new is None:
            log.error("Consolidation could not launch the replacement for node %s", old)
            self._cordon(old, False)
            return self.settings.poll_seconds
        log.info("Launched replacement %s for node %s", new, old)
        self._replacing = _Replacing(old, new, self.clock.now() + REPLACEMENT_TIMEOUT)
        return 1.0

    def _await_replacement(self) -> float | None:
        r = self._replacing
        assert r is not None
        new = self.state.nodes.get("", r.new)
        up = new is not None and ready(new) and (new["metadata"].get("labels") or {}).get(wk.INITIALIZED) == "true"
        if up:
            log.info("Replacement %s is ready; deleting node %s", r.new, r.old)
            self.state.delete_node(r.old)
            ACTIONS.labels(REPLACE).inc()
            self._replacing = None
            return SETTLE_CHECK_SECONDS
        if self.clock.now() >= r.deadline:
            log.error("Replacement %s for node %s did not become ready; deleting it and keeping node %s", r.new, r.old, r.old)
            self.state.delete_node(r.new)
            self._cordon(r.old, False)
            CANCELLED.labels(REPLACE).inc()
            self._replacing = None
            return self.settings.poll_seconds
        return 1.0

    # --- effects -----------------------------------------------------------------------------
    def _report_kept(self, plan: ConsolidationPlan) -> None:
        """One Unconsolidatable event per node and reason: a reason already given is not repeated each pass,
        nor when the node's reasons alternate, until REPORT_AGAIN_AFTER has passed; a node's new reason waits
        until REPORT_NODE_EVERY after its last one."""
        now = self.clock.now()
        for kept in plan.kept:
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
            events.record(self.state.client, node, reason="Unconsolidatable", message=kept.reason, component="karpy")
        live = {n["metadata"]["name"] for n in self.state.nodes.items()}
        for name in set(self._reasons) - live:
            del self._reasons[name]

    def _cordon(self, name: str, on: bool) -> None:
        try:
            self.state.client.patch(path_of("v1", "nodes", name=name), {"spec": {"unschedulable": on or None}})
        except ApiException as e:
            if e.status != 404:
                raise

