"""Consolidation candidates: each node as consolidation sees it (list price and true cost, pods that would
move, the cost of disrupting it) and what keeps it from being consolidated, with the reason v0.16 gives. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Mapping, Sequence

from karpy.apis import disruption
from karpy.apis import labels as wk
from karpy.apis.conditions import initialized
from karpy.apis.pods import object_key
from karpy.apis.timestamps import parse_time
from karpy.apis.v1.disruption.consolidatable import consolidatability
from karpy.apis.v1.disruption.do_not_disrupt import disruption_hold
from karpy.apis.v1.disruption.hold import Hold
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.cloudprovider.types import InstanceType
from karpy.controller.consolidation.disruption_cost import disruption_cost, lifetime_remaining
from karpy.controller.provisioning.scheduling.cost import NodeCosts, node_cost
from karpy.controller.provisioning.scheduling.nodes import offering_allowed
from karpy.controller.provisioning.scheduling.pods import PodInfo

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclasses.dataclass
class NodeView:
    """A node as consolidation sees it: its list price, what it costs (cost.py) and the pods that would have to move."""

    raw: Mapping[str, Any]
    name: str
    pods: list[PodInfo]                        # reschedulable: not daemonset, mirror, terminal or terminating
    fixed: list[PodInfo]                       # the others: they use the node's room but go with it
    price: float | None = None                 # the offering's list price
    capacity_type: str | None = None
    instance_type: InstanceType | None = None
    node_costs: NodeCosts = NodeCosts()        # its provisioner's per-node costs
    overhead_cpu: int = 0                      # cpu its DaemonSets will request, when they are not bound yet
    created: dt.datetime = EPOCH
    lifetime: float = 1.0                      # the share of its life left (`lifetime_remaining`)

    @property
    def cost(self) -> float:
        """Karpenter's disruption cost: its pods' eviction costs (those it holds now), weighted by its lifetime left."""
        return disruption_cost(self.pods, self.lifetime)

    @property
    def load(self) -> int:
        """The cpu (thousandths) its pods request, DaemonSets and other pods that stay with it included."""
        return self.overhead_cpu + sum(p.requests.get("cpu", 0) for p in self.pods + self.fixed)

    def cost_with(self, cpu: int = 0) -> float:
        """What it costs per hour (cost.py) with `cpu` more requested of it; its list price when unpriced by type."""
        if self.instance_type is None or self.price is None:
            return self.price or 0.0
        return node_cost(self.instance_type, self.price, self.load + cpu, self.node_costs)

    @property
    def cost_per_hour(self) -> float:
        """What it costs per hour with the pods it holds: list price, burstable credits, per-node costs."""
        return self.cost_with(0)

    @property
    def order(self) -> tuple[float, dt.datetime, str]:
        """Least disruption per dollar saved first (at equal prices, Karpenter's order: cheapest to disrupt
        first); the older node first among equals."""
        cost = self.cost_per_hour
        return (self.cost / cost if cost else self.cost, self.created, self.name)


def view(raw: Mapping[str, Any], pods: list[PodInfo], *, types: Mapping[str, InstanceType],
         provisioners: Mapping[str, Provisioner], now: dt.datetime,
         node_costs: Mapping[str, NodeCosts] | None = None) -> NodeView:
    """`node_costs`: each provisioner's per-node costs (by name); a node of another costs its instance alone."""
    labels = raw["metadata"].get("labels") or {}
    node = NodeView(raw=raw, name=raw["metadata"]["name"], pods=[p for p in pods if reschedulable(p)],
                    fixed=[p for p in pods if not reschedulable(p)],
                    created=parse_time(raw["metadata"].get("creationTimestamp")) or EPOCH)
    node.capacity_type = labels.get(wk.CAPACITY_TYPE)
    t = types.get(labels.get(wk.INSTANCE_TYPE, ""))
    if t is not None:
        offer = next((o for o in t.offerings if o.zone == labels.get(wk.ZONE)
                      and o.capacity_type == node.capacity_type), None)
        node.price = offer.price_per_hour if offer is not None else None
        node.instance_type = t
        node.node_costs = (node_costs or {}).get(wk.pool_of(labels) or "", NodeCosts())
    provisioner = provisioners.get(wk.pool_of(labels) or "")
    node.lifetime = lifetime_remaining(provisioner, node.created, now)
    return node


def reschedulable(pod: PodInfo) -> bool:
    """A pod that would have to find another node if its node went away."""
    return not (pod.is_daemon or pod.terminal or pod.deleting or wk.MIRROR_POD in pod.annotations or pod.owner_kind == "Node")


def worst_case_price(t: InstanceType, reqs: Any) -> float | None:
    """The most any offering of `t` that `reqs` allow could cost: what a launch could end up paying."""
    prices = [o.price_per_hour for o in t.offerings if offering_allowed(o, reqs)]
    return max(prices) if prices else None


def pdb_blocker(pod: PodInfo, pdbs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The PDB (`ns/name`) that allows no disruption of `pod` now, as Karpenter checks it. A PDB's
    status is used when the disruption controller wrote one; else it is computed over `pods`,
    taking pods without a status (plan input) as healthy."""
    for pdb in pdbs:
        if disruption.selects(pdb, pod.raw) and pdb_allowance(pdb, pods) <= 0:
            return object_key(pdb)
    return None


def pdb_allowance(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    """How many of its pods `pdb` lets be disrupted now: its status when the disruption controller
    wrote one, else computed over `pods`."""
    status = pdb.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    if allowed is None or "observedGeneration" not in status:
        allowed = disruption.status_of(pdb, pods, is_healthy=_healthy_or_unknown)["disruptionsAllowed"]
    return int(allowed)


def _healthy_or_unknown(pod: Mapping[str, Any]) -> bool:
    return disruption.healthy(pod) if (pod.get("status") or {}).get("phase") else not (pod.get("metadata") or {}).get("deletionTimestamp")


def unmanaged(node: NodeView, provisioners: Mapping[str, Provisioner]) -> str | None:
    """Why consolidation does not manage `node` at all, or None."""
    owner = wk.pool_of(node.raw["metadata"].get("labels"))
    if owner is None:
        return "not launched by a provisioner (no karpenter.sh/provisioner-name label)"
    provisioner = provisioners.get(owner)
    if provisioner is None:
        return f"provisioner {owner} does not exist"
    if not (provisioner.spec.consolidation and provisioner.spec.consolidation.enabled):
        return f"provisioner {owner} does not have consolidation enabled"
    return None


def nodepool_of(node: NodeView) -> str:
    """The NodePool that launched `node`, or "" for a Provisioner's node (which no budget bounds)."""
    return (node.raw["metadata"].get("labels") or {}).get(wk.NODEPOOL, "")


def nodepool_hold(node: NodeView, provisioners: Mapping[str, Provisioner], now: dt.datetime) -> str | None:
    """What holds a NodePool's `node` from consolidation now, and until when, as v1 says it: its or its pods'
    `karpenter.sh/do-not-disrupt` (or v1alpha5's do-not-evict / do-not-consolidate), then `consolidateAfter`
    not yet passed. None for a Provisioner's node or a free one. An empty node is disrupted for `Empty`,
    another for `Underutilized` (the same holds apply to both)."""
    provisioner = provisioners.get(nodepool_of(node))
    if not isinstance(provisioner, NodePoolProvisioner):
        return None
    hold = disruption_hold(node_annotations=node.raw["metadata"].get("annotations"), pods=[p.raw for p in node.pods],
                           reason="Underutilized" if node.pods else "Empty", now=now)
    if hold is None:
        verdict = consolidatability(consolidate_after=provisioner.node_pool.spec.disruption.consolidate_after,
                                    initialized_at=initialized_at(node), last_pod_event_time=last_pod_event(node), now=now)
        hold = None if verdict.consolidatable else Hold(verdict.why, verdict.at)
    return hold.describe() if hold is not None else None


def initialized_at(node: NodeView) -> dt.datetime:
    """When the node came up: its Ready condition's last transition, else its creation (nodes written by hand)."""
    conditions = (node.raw.get("status") or {}).get("conditions") or []
    turned = next((parse_time(c.get("lastTransitionTime")) for c in conditions
                   if c.get("type") == "Ready" and c.get("status") == "True"), None)
    return turned or node.created


def last_pod_event(node: NodeView) -> dt.datetime | None:
    """The last time a pod that would move was started on (or, not yet started, created for) the node: the
    NodeClaim's lastPodEventTime as the node's own pods show it. A pod that left leaves no trace here."""
    return last_pod_event_of(node.pods)


def last_pod_event_of(pods: Sequence[PodInfo]) -> dt.datetime | None:
    """last_pod_event() over `pods`, the reschedulable pods of one node."""
    times = [parse_time((p.raw.get("status") or {}).get("startTime")) or parse_time(p.raw["metadata"].get("creationTimestamp"))
             for p in pods]
    return max((t for t in times if t is not None), default=None)


def blocker(node: NodeView, *, types: Mapping[str, InstanceType], now: dt.datetime, min_age: float,
            pdbs: Sequence[Mapping[str, Any]], all_pods: Sequence[Mapping[str, Any]],
            awaited: Mapping[str, str], provisioners: Mapping[str, Provisioner]) -> str | None:
    """Why a node consolidation manages may not be consolidated now, or None when it is a candidate.
    `awaited` names nodes that pods are on their way to (node -> pod), as v0.16's nominated nodes."""
    meta = node.raw["metadata"]
    labels = meta.get("labels") or {}
    if not initialized(node.raw):
        return "node is not initialized yet"
    if node.name in awaited:
        return f"node is nominated for pod {awaited[node.name]}, which is on its way to it"
    if min_age and (age := (now - node.created).total_seconds()) < min_age:
        return f"node was launched {age:.0f}s ago (consolidation waits {min_age:.0f}s)"
    if held := nodepool_hold(node, provisioners, now):
        return held
    if (meta.get("annotations") or {}).get(wk.DO_NOT_CONSOLIDATE) == "true":
        return f"node has annotation {wk.DO_NOT_CONSOLIDATE}"
    type_name = labels.get(wk.INSTANCE_TYPE)
    if type_name not in types:
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
        if pdb := pdb_blocker(pod, pdbs, all_pods):
            return f"pdb {pdb} prevents evicting pod {pod.key}"
    return None
