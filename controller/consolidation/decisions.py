"""Consolidation decisions: which nodes the cluster could do without, or run cheaper, and why the others stay.

As Karpenter v0.16 consolidates: empty nodes are deleted first (all at once);
then candidates, cheapest to disrupt first, are tried one at a time: a node
whose pods all fit on the other nodes is deleted; a node whose pods fit on
the others plus one new node is replaced when that node is strictly cheaper
at its worst-case launch price (on-demand nodes only; spot nodes are only
deleted). Each node that is not acted on is kept with the reason: what
blocks it (annotation, do-not-evict pod, PDB, unowned pod, ...) or why no
action pays. The placement simulation is the provisioning scheduler's, so a
consolidation never plans what provisioning would not do. Pure: no I/O,
no clock (`now` is given), no randomness.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from typing import Any, Callable, Iterable, Mapping, Sequence

from karpy.apis import disruption
from karpy.apis import labels as wk
from karpy.apis.pods import object_key
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.clock import parse_time
from karpy.controller.cloudprovider.types import InstanceType, Offering
from karpy.controller.provisioning.scheduling.nodes import offering_allowed
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, PlannedNode, Scheduler, node_name

DELETE, REPLACE = "delete", "replace"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclasses.dataclass(frozen=True)
class Replacement:
    """The one node a replace action launches: the cheapest option, priced at its worst case."""

    planned: PlannedNode                      # with only the options cheaper than what it replaces
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float                     # the worst-case launch price over the offerings its pods allow


@dataclasses.dataclass(frozen=True)
class Action:
    kind: str                                 # DELETE | REPLACE
    nodes: tuple[str, ...]
    savings_per_hour: float
    replacement: Replacement | None = None
    pods: tuple[str, ...] = ()                # the pods that move ("ns/name")

    def describe(self) -> str:
        saving = f"saving ${self.savings_per_hour:.4f}/h"
        if self.replacement is None:
            return f"delete {', '.join(self.nodes)} ({len(self.pods)} pod(s) move; {saving})"
        r = self.replacement
        return (f"replace {', '.join(self.nodes)} with {r.instance_type} {r.capacity_type} in {r.zone} at "
                f"${r.price_per_hour:.4f}/h ({len(self.pods)} pod(s) move; {saving})")


@dataclasses.dataclass(frozen=True)
class Kept:
    node: str
    reason: str
    considered: bool = True       # False: a node consolidation does not manage, or did not get to (no Event)


@dataclasses.dataclass
class ConsolidationPlan:
    actions: list[Action]
    kept: list[Kept]

    def verdict(self, node: str) -> Action | Kept | None:
        """What the plan does with `node`."""
        for action in self.actions:
            if node in action.nodes:
                return action
        return next((k for k in self.kept if k.node == node), None)


@dataclasses.dataclass
class _Node:
    """A node as consolidation sees it: its price and the pods that would have to move."""

    raw: Mapping[str, Any]
    name: str
    pods: list[PodInfo]                        # reschedulable: not daemonset, mirror, terminal or terminating
    fixed: list[PodInfo]                       # the others: they use the node's room but go with it
    price: float | None = None
    capacity_type: str | None = None
    created: dt.datetime = _EPOCH
    cost: float = 0.0                          # disruption cost, weighted by remaining lifetime


def reschedulable(pod: PodInfo) -> bool:
    """A pod that would have to find another node if its node went away."""
    return not (pod.is_daemon or pod.terminal or pod.deleting or wk.MIRROR_POD in pod.annotations or pod.owner_kind == "Node")


def eviction_cost(pod: PodInfo) -> float:
    """Karpenter's: 1 per pod, moved by pod-deletion-cost and priority, clamped to [-10, 10]."""
    cost = 1.0
    try:
        cost += float(pod.annotations.get(wk.POD_DELETION_COST, "0")) / 2 ** 27
    except ValueError:
        pass
    cost += pod.priority / 2 ** 25
    return max(-10.0, min(10.0, cost))


def lifetime_remaining(provisioner: Provisioner | None, created: dt.datetime, now: dt.datetime) -> float:
    """The share of its life a node has left (1.0 when it never expires): nearly expired nodes are cheap to disrupt."""
    ttl = provisioner.spec.ttl_seconds_until_expired if provisioner else None
    if not ttl:
        return 1.0
    return max(0.0, min(1.0, 1.0 - (now - created).total_seconds() / ttl))


def worst_case_price(t: InstanceType, reqs: Any) -> float | None:
    """The most any offering of `t` that `reqs` allow could cost: what a launch could end up paying."""
    prices = [o.price_per_hour for o in t.offerings if offering_allowed(o, reqs)]
    return max(prices) if prices else None


def pdb_blocker(pod: PodInfo, pdbs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The PDB (`ns/name`) that allows no disruption of `pod` now, as Karpenter checks it. A PDB's
    status is used when the disruption controller wrote one; else it is computed over `pods`,
    taking pods without a status (plan input) as healthy."""
    for pdb in pdbs:
        if not disruption.selects(pdb, pod.raw):
            continue
        status = pdb.get("status") or {}
        allowed = status.get("disruptionsAllowed")
        if allowed is None or "observedGeneration" not in status:
            allowed = disruption.status_of(pdb, pods, is_healthy=_healthy_or_unknown)["disruptionsAllowed"]
        if allowed <= 0:
            return object_key(pdb)
    return None


def _healthy_or_unknown(pod: Mapping[str, Any]) -> bool:
    return disruption.healthy(pod) if (pod.get("status") or {}).get("phase") else not (pod.get("metadata") or {}).get("deletionTimestamp")


class Consolidator:
    """Decides over one snapshot. `plan()` returns every action it finds, one after another, each
    applied to the state the next one sees; `plan(first_only=True)` stops at the first."""

    def __init__(self, snapshot: ClusterSnapshot, pdbs: Sequence[Mapping[str, Any]], *, now: dt.datetime,
                 min_age_seconds: float = 0.0, name_node: Callable[[str, int], str] = node_name) -> None:
        self.snapshot = snapshot
        self.pdbs = list(pdbs)
        self.now = now
        self.min_age = min_age_seconds
        self._name_node = name_node
        self.provisioners = {p.name: p for p in snapshot.provisioners if not p.metadata.deletion_timestamp}
        self.types = {t.name: t for t in snapshot.catalog.instance_types()}
        # nodes being deleted and their pods are termination's business: not capacity, not candidates
        self.nodes = {n["metadata"]["name"]: n for n in snapshot.nodes if not n["metadata"].get("deletionTimestamp")}
        self.deleting = sorted(n["metadata"]["name"] for n in snapshot.nodes if n["metadata"].get("deletionTimestamp"))
        self.bound = [p for p in snapshot.pods if p.node_name in self.nodes and not p.terminal and not p.deleting]
        self._raw_pods = [p.raw for p in snapshot.pods]

    # --- candidates -------------------------------------------------------------------------
    def _view(self, raw: Mapping[str, Any], pods: list[PodInfo]) -> _Node:
        labels = raw["metadata"].get("labels") or {}
        node = _Node(raw=raw, name=raw["metadata"]["name"], pods=[p for p in pods if reschedulable(p)],
                     fixed=[p for p in pods if not reschedulable(p)], created=parse_time(raw["metadata"].get("creationTimestamp")) or _EPOCH)
        node.capacity_type = labels.get(wk.CAPACITY_TYPE)
        t = self.types.get(labels.get(wk.INSTANCE_TYPE, ""))
        if t is not None:
            offer = next((o for o in t.offerings if o.zone == labels.get(wk.ZONE)
                          and o.capacity_type == node.capacity_type), None)
            node.price = offer.price_per_hour if offer is not None else None
        provisioner = self.provisioners.get(labels.get(wk.PROVISIONER_NAME, ""))
        node.cost = sum(eviction_cost(p) for p in node.pods) * lifetime_remaining(provisioner, node.created, self.now)
        return node

    def unmanaged(self, node: _Node) -> str | None:
        """Why consolidation does not manage `node` at all, or None."""
        owner = (node.raw["metadata"].get("labels") or {}).get(wk.PROVISIONER_NAME)
        if owner is None:
            return "not launched by a provisioner (no karpenter.sh/provisioner-name label)"
        provisioner = self.provisioners.get(owner)
        if provisioner is None:
            return f"provisioner {owner} does not exist"
        if not (provisioner.spec.consolidation and provisioner.spec.consolidation.enabled):
            return f"provisioner {owner} does not have consolidation enabled"
        return None

    def blocker(self, node: _Node) -> str | None:
        """Why a node consolidation manages may not be consolidated now, or None when it is a candidate."""
        meta = node.raw["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(wk.INITIALIZED) != "true":
            return "node is not initialized yet"
        if self.min_age and (age := (self.now - node.created).total_seconds()) < self.min_age:
            return f"node was launched {age:.0f}s ago (consolidation waits {self.min_age:.0f}s)"
        if (meta.get("annotations") or {}).get(wk.DO_NOT_CONSOLIDATE) == "true":
            return f"node has annotation {wk.DO_NOT_CONSOLIDATE}"
        type_name = labels.get(wk.INSTANCE_TYPE)
        if type_name not in self.types:
            return f"instance type {type_name or '<no label>'} is not in the catalog"
        if node.price is None:
            return f"no price for {type_name} {node.capacity_type} in {labels.get(wk.ZONE)}"
        for pod in node.pods:
            if pod.annotations.get(wk.DO_NOT_EVICT) == "true":
                return f"pod {pod.key} has annotation {wk.DO_NOT_EVICT}"
        for pod in node.pods:
            if pod.owner_kind is None:
                return f"pod {pod.key} has no controller owner"
        for pod in node.pods:
            if pdb := pdb_blocker(pod, self.pdbs, self._raw_pods):
                return f"pdb {pdb} prevents evicting pod {pod.key}"
        return None

    # --- planning -----------------------------------------------------------------------------
    def plan(self, *, first_only: bool = False, only: Iterable[str] | None = None) -> ConsolidationPlan:
        """Actions in the order they would be taken, and every other node with its reason.
        `only` restricts the candidates (re-validating an action); other nodes are still capacity."""
        by_node: dict[str, list[PodInfo]] = collections.defaultdict(list)
        for pod in self.bound:
            by_node[pod.node_name].append(pod)  # type: ignore[index]
        views = {name: self._view(raw, by_node.get(name, [])) for name, raw in sorted(self.nodes.items())}
        wanted = set(only) if only is not None else None
        kept = [Kept(name, "node is being deleted", considered=False) for name in self.deleting
                if wanted is None or name in wanted]
        candidates = []
        for name, view in views.items():
            if wanted is not None and name not in wanted:
                continue
            if why := self.unmanaged(view):
                kept.append(Kept(name, why, considered=False))
            elif why := self.blocker(view):
                kept.append(Kept(name, why))
            else:
                candidates.append(view)
        actions: list[Action] = []
        empty = [n for n in candidates if not n.pods]
        if empty:
            actions.append(Action(DELETE, tuple(n.name for n in empty), round(sum(n.price or 0 for n in empty), 6)))
            for n in empty:
                views.pop(n.name)
        busy = sorted((n for n in candidates if n.pods), key=lambda n: (n.cost, n.created, n.name))
        for i, node in enumerate(busy):
            if first_only and actions:
                kept += [Kept(n.name, "not considered: an earlier action goes first", considered=False) for n in busy[i:]]
                break
            action, why = self._try(node, views)
            if action is None:
                kept.append(Kept(node.name, why))
                continue
            actions.append(action)
        return ConsolidationPlan(actions, sorted(kept, key=lambda k: k.node))

    def _try(self, node: _Node, views: dict[str, _Node]) -> tuple[Action | None, str]:
        """Simulate `node` gone; on success the action is applied to `views` (pods moved, node replaced)."""
        others = [v.raw for name, v in views.items() if name != node.name]
        pods = [p.copy(node_name=None) for p in node.pods]
        placed_pods = [p for name, v in views.items() if name != node.name for p in v.pods + v.fixed]
        snapshot = ClusterSnapshot(self.snapshot.provisioners, self.snapshot.catalog, others, placed_pods + pods,
                                   self.snapshot.daemonsets)
        results = Scheduler(snapshot, name_node=self._name_node).solve()
        if results.unschedulable:
            key, reason = next(iter(results.unschedulable.items()))
            return None, f"no cheaper fit: pod {key} would fit nowhere else ({reason})"
        moved = tuple(sorted(p.key for p in node.pods))
        if not results.new_nodes:
            self._apply(node, views, results, None)
            return Action(DELETE, (node.name,), round(node.price or 0, 6), pods=moved), ""
        if len(results.new_nodes) > 1:
            return None, f"no cheaper fit: its pods would need {len(results.new_nodes)} new nodes"
        if node.capacity_type == wk.CAPACITY_TYPE_SPOT:
            return None, "no cheaper fit: its pods need a new node, and spot nodes are only deleted, never replaced"
        planned = results.new_nodes[0]
        replacement = self._cheaper(planned, node.price or 0.0)
        if replacement is None:
            cheapest = worst_case_price(planned.options[0], planned.requirements) if planned.options else None
            shown = f"${cheapest:.4f}/h" if cheapest is not None else "no price"
            return None, (f"no cheaper fit: the cheapest replacement ({planned.options[0].name if planned.options else '?'}, "
                          f"{shown} at worst) does not cost less than ${node.price:.4f}/h")
        self._apply(node, views, results, replacement)
        return Action(REPLACE, (node.name,), round((node.price or 0) - replacement.price_per_hour, 6),
                      replacement=replacement, pods=moved), ""

    def _cheaper(self, planned: PlannedNode, price: float) -> Replacement | None:
        """The planned node with only the options whose worst-case price is below `price`, or None."""
        priced = [(worst_case_price(t, planned.requirements), t) for t in planned.options]
        options = [(p, t) for p, t in priced if p is not None and p < price]
        if not options:
            return None
        options.sort(key=lambda pt: (pt[0], pt[1].name))
        worst, chosen = options[0]
        allowed = sorted((o for o in chosen.offerings if offering_allowed(o, planned.requirements)), key=lambda o: o.zone)
        offer: Offering = max(allowed, key=lambda o: o.price_per_hour)     # the first zone among equals
        narrowed = dataclasses.replace(planned, instance_type=chosen, offering=offer,
                                       options=tuple(t for _, t in options))
        return Replacement(narrowed, chosen.name, offer.zone, offer.capacity_type, worst)

    def _apply(self, node: _Node, views: dict[str, _Node], results: Any, replacement: Replacement | None) -> None:
        """The state after the action: `node` gone, its pods where the simulation put them."""
        del views[node.name]
        for existing in results.existing_nodes:
            views[existing.name].pods += [p.copy(node_name=existing.name) for p in existing.pods]
        if replacement is not None:
            p = replacement.planned
            raw = launching_node_manifest(p, self.types[replacement.instance_type], replacement.zone, replacement.capacity_type)
            views[p.name] = self._view(raw, [pod.copy(node_name=p.name) for pod in p.pods])


def launching_node_manifest(p: PlannedNode, t: InstanceType, zone: str, capacity_type: str) -> dict[str, Any]:
    """The replacement as a Node being launched (not initialized), so the scheduler reserves its
    daemonset overhead and it is capacity, but not a candidate, for the actions after it."""
    labels = {**p.labels, wk.INSTANCE_TYPE: t.name, wk.ZONE: zone, wk.CAPACITY_TYPE: capacity_type, wk.HOSTNAME: p.name}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": p.name, "labels": labels},
            "spec": {"taints": [taint.to_manifest() for taint in p.taints]},
            "status": {"allocatable": t.allocatable.to_manifest(), "capacity": t.capacity.to_manifest()}}
