"""Consolidation's replacements: new nodes planned for the pods that fit on no node that stays,
without building a scheduler (for pods the packing state judges), and costed at their worst case: the most
any launch of them could be billed, under the cost model provisioning minimises (cost.py). Pure."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources
from karpy.controller.cloudprovider.types import InstanceType, Offering
from karpy.controller.consolidation.candidates import worst_case_price
from karpy.controller.provisioning.scheduling.cost import node_cost
from karpy.controller.provisioning.scheduling.nodes import NewNode, NodeTemplate, ResourceRows, offering_allowed
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import (
    MAX_INSTANCE_TYPE_OPTIONS,
    PlannedNode,
    node_labels,
    sort_key,
)
from karpy.controller.provisioning.scheduling.topology import Topology


@dataclasses.dataclass(frozen=True)
class Replacement:
    """A node a replace action launches: the option that costs least with its pods, at its worst case."""

    planned: PlannedNode                      # with only the options that cost less than what it replaces
    instance_type: str
    zone: str
    capacity_type: str
    price_per_hour: float                     # the worst-case list price over the offerings its pods allow
    cost_per_hour: float = 0.0                # what it costs at that price with its pods (cost.py)


class Planner:
    """Plans replacement nodes from the provisioners' templates (heaviest first)."""

    def __init__(self, templates: Mapping[str, NodeTemplate], rows: ResourceRows,
                 name: Callable[[str, int], str]) -> None:
        self.templates = templates
        self.rows = rows
        self._name = name
        self._unit: np.ndarray | None = None     # the cheapest price per unit of each resource row

    def one(self, pods: list[PodInfo]) -> PlannedNode | None:
        """One new node for all of `pods` (only pods `Packing.simple()` accepts), from the heaviest
        provisioner that can take them, as the scheduler plans a node; None when none holds them all."""
        for template in self.templates.values():
            node = NewNode(template, "replacement")
            topology = Topology({})
            if all(node.add(p, topology) is None for p in sorted(pods, key=sort_key)):
                options = node.option_types()
                chosen, offering = options[0]
                return PlannedNode(
                    name=self._name(template.name, 0), provisioner=template.name, instance_type=chosen,
                    offering=offering, options=tuple(t for t, _ in options[:MAX_INSTANCE_TYPE_OPTIONS]),
                    requirements=node.requirements, labels=node_labels(node.requirements, template, chosen, offering),
                    taints=tuple(template.taints + template.startup_taints), pods=tuple(node.pods))
            node.release()
        return None

    def no_cheaper(self, pods: list[PodInfo], price: float, *, one_node: bool = False) -> str | None:
        """Why no new node for `pods` can cost less than `price`, judged from the cheapest instance
        type that holds their sum (a lower bound): saves planning a replacement that cannot pay."""
        total = Resources()
        for p in pods:
            total = total + p.requests
        row = self.rows.row(total)
        bounds = [b for t in self.templates.values() if (b := t.cheapest_price_for(row)) is not None]
        if not bounds and one_node:
            return "no cheaper fit: its pods would need more than one new node"
        if bounds and min(bounds) >= price:
            return (f"no cheaper fit: the cheapest replacement (${min(bounds):.4f}/h at best) "
                    f"does not cost less than ${price:.4f}/h")
        return None

    def split(self, pods: list[PodInfo], price: float) -> list[Replacement] | None:
        """Two smaller nodes for `pods` (shared out largest first, each to the lighter half) when together
        they cost less than `price`, else None."""
        halves: list[list[PodInfo]] = [[], []]
        load = [0, 0]
        for pod in sorted(pods, key=lambda p: (-p.requests.get("cpu", 0), p.key)):
            i = load.index(min(load))
            halves[i].append(pod)
            load[i] += pod.requests.get("cpu", 0)
        if not all(halves) or self.no_cheaper(halves[0], price) or self.no_cheaper(halves[1], price):
            return None
        out = []
        for half in halves:
            planned = self.one(half)
            if planned is None:
                return None
            r = self.cheaper(planned, price)
            if r is None:
                return None
            out.append(r)
        return out if sum(r.cost_per_hour for r in out) < price else None

    def at_worst(self, planned: PlannedNode) -> Replacement | None:
        """The planned node costed at the worst case of its least costly option, keeping only the options that
        cost no more at worst (so no launch costs more than claimed), or None when none is priced."""
        worst = [c for t in planned.options if (c := self.worst_cost(t, planned)) is not None]
        return self.cheaper(planned, min(worst) + 1e-9) if worst else None

    def worst_cost(self, t: InstanceType, planned: PlannedNode) -> float | None:
        """What a node of type `t` holding `planned`'s pods costs (cost.py) at the worst-case price its pods allow."""
        price = worst_case_price(t, planned.requirements)
        if price is None:
            return None
        template = self.templates.get(planned.provisioner)
        if template is None:
            return price
        load = sum(p.requests.get("cpu", 0) for p in planned.pods) + template.daemon_overhead.get("cpu", 0)
        return node_cost(t, price, load, template.node_costs)

    def lower_bound(self, pods: Sequence[PodInfo]) -> float:
        """Less than any set of new nodes holding `pods` can cost: for each resource, its total over the
        cheapest price per unit any template's types offer; the largest of these. Prunes repacks that cannot pay."""
        if not pods:
            return 0.0
        total = Resources()
        for p in pods:
            total = total + p.requests
        need = self.rows.row(total).astype(float)
        if self._unit is None:
            units = []
            for t in self.templates.values():
                _, order, offers = t.compatible(t.requirements)
                for i in order:
                    offer = offers[int(i)]
                    if offer is not None:
                        alloc = np.asarray(t.allocatable[int(i)], dtype=float)
                        units.append(np.where(alloc > 0, offer.price_per_hour / np.maximum(alloc, 1), np.inf))
            self._unit = np.min(units, axis=0) if units else np.zeros(len(need))
        cost = np.multiply(need, self._unit, out=np.zeros(len(need)), where=need > 0)   # inf: no type holds it
        return float(cost.max()) if len(cost) else 0.0

    def cheaper(self, planned: PlannedNode, cost: float) -> Replacement | None:
        """The planned node with only the options whose worst-case cost is below `cost`, or None."""
        priced = [(self.worst_cost(t, planned), t) for t in planned.options]
        options = [(c, t) for c, t in priced if c is not None and c < cost]
        if not options:
            return None
        options.sort(key=lambda ct: (ct[0], ct[1].name))
        worst, chosen = options[0]
        allowed = sorted((o for o in chosen.offerings if offering_allowed(o, planned.requirements)), key=lambda o: o.zone)
        offer: Offering = max(allowed, key=lambda o: o.price_per_hour)     # the first zone among equals
        narrowed = dataclasses.replace(planned, instance_type=chosen, offering=offer,
                                       options=tuple(t for _, t in options))
        return Replacement(narrowed, chosen.name, offer.zone, offer.capacity_type, offer.price_per_hour, worst)


def spot_only(planned: PlannedNode) -> PlannedNode:
    """`planned` launched as spot only (a spot node replaced by a spot node): its requirements narrowed to spot,
    its options to the types with a spot offering."""
    requirements = planned.requirements.intersection(Requirements.from_labels({wk.CAPACITY_TYPE: wk.CAPACITY_TYPE_SPOT}))
    options = tuple(t for t in planned.options if any(o.capacity_type == wk.CAPACITY_TYPE_SPOT for o in t.offerings))
    return dataclasses.replace(planned, requirements=requirements, options=options,
                               labels={**planned.labels, wk.CAPACITY_TYPE: wk.CAPACITY_TYPE_SPOT})


def cheapest_options(r: Replacement, count: int) -> Replacement:
    """`r` launching only from its `count` cheapest options (v1's spot-to-spot rule: the node lands on one of the
    types that made the move worth it, so it is not consolidated again at once)."""
    return dataclasses.replace(r, planned=dataclasses.replace(r.planned, options=r.planned.options[:count]))


def launching_node_manifest(p: PlannedNode, t: InstanceType, zone: str, capacity_type: str) -> dict[str, Any]:
    """The replacement as a Node being launched (not initialized), so the scheduler reserves its
    daemonset overhead and it is capacity, but not a candidate, for the actions after it."""
    labels = {**p.labels, wk.INSTANCE_TYPE: t.name, wk.ZONE: zone, wk.CAPACITY_TYPE: capacity_type, wk.HOSTNAME: p.name}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": p.name, "labels": labels},
            "spec": {"taints": [taint.to_manifest() for taint in p.taints]},
            "status": {"allocatable": t.allocatable.to_manifest(), "capacity": t.capacity.to_manifest()}}
