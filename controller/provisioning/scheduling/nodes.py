"""Nodes a pod may be placed on: existing ones and new ones being planned.

`NodeTemplate` is what one Provisioner (or v1 NodePool) can launch: its requirements, labels,
taints, daemonset overhead, remaining limits, and the instance types that
fit it, with their allocatable resources as a matrix so narrowing a new
node's options is one vectorised comparison. `ExistingNode` is a Node with
what is left of its allocatable. `NewNode` is a node being planned: the
intersection of its pods' requirements and the instance types that still
hold all of them. `add()` on either places a pod or says why not. A new node's
price is its true cost (cost.py): the option that costs least with its pods.
Pure.
"""

from __future__ import annotations

import copy
import math
from typing import Mapping, NamedTuple, Sequence, cast

import numpy as np

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.resources import CPU, MEMORY, Resources
from karpy.apis.selectors import Taint, untolerated
from karpy.controller.cloudprovider.types import InstanceType, Offering
from karpy.controller.provisioning.scheduling.cost import CostTable, NodeCosts, credits_per_hour, sustained_cpu
from karpy.controller.provisioning.scheduling.pods import PodInfo, host_ports_conflict
from karpy.controller.provisioning.scheduling.reasons import Reason, Why
from karpy.controller.provisioning.scheduling.topology import Topology

# Taints a node carries while it starts; a node karpy launched is not kept from its pods by them.
STARTING_TAINTS = frozenset({wk.TAINT_NOT_READY, wk.TAINT_UNREACHABLE, wk.TAINT_UNREGISTERED})
# Amounts below this (in thousandths) stay int64: the sum or difference of two of them cannot wrap.
# the extended resources of GPUs and accelerators (NVIDIA, AMD, AWS Inferentia/Trainium, Habana Gaudi)
ACCELERATORS = ("nvidia.com/gpu", "amd.com/gpu", "aws.amazon.com/neuron", "habana.ai/gaudi")
FAST_LIMIT = 2**62
FLOAT_LIMIT = 10**300


def amounts(values: Sequence[Sequence[int]] | Sequence[int], *, width: int | None = None) -> np.ndarray:
    """`values` (a row, or rows of `width`) as an array that holds them exactly: int64, the fast path,
    when every amount is below FAST_LIMIT; else Python integers (dtype object), so a pod asking for
    1e30 bytes compares exactly instead of overflowing."""
    flat = (cast("Sequence[int]", values) if width is None
            else [v for row in cast("Sequence[Sequence[int]]", values) for v in row])
    exact = not flat or -FAST_LIMIT < min(flat) <= max(flat) < FAST_LIMIT
    array = np.array(values, dtype=np.int64 if exact else object)
    return array if width is None else array.reshape(len(values), width)


def covers(matrix: np.ndarray, need: np.ndarray) -> np.ndarray:
    """For each row of `matrix`, whether it is at least `need` in every column: `(matrix >= need).all(axis=1)`,
    reduced a column at a time (every). Amounts kept a resource per row are passed transposed (`columns.T`):
    each column is then one contiguous run."""
    conditions = matrix >= need
    if conditions.dtype == object:                  # amounts held as Python integers compare to Python booleans
        conditions = conditions.astype(bool)
    return every(conditions)


def every(conditions: np.ndarray) -> np.ndarray:
    """`conditions.all(axis=-1)` a slice at a time: numpy reduces along a short last axis several times slower
    than it combines the slices."""
    return _along_last(conditions, np.logical_and)


def some(conditions: np.ndarray) -> np.ndarray:
    """`conditions.any(axis=-1)` a slice at a time (see every)."""
    return _along_last(conditions, np.logical_or)


def _along_last(conditions: np.ndarray, combine: np.ufunc) -> np.ndarray:
    if not conditions.ndim or not conditions.shape[-1]:
        return np.asarray(combine.reduce(conditions, axis=-1), dtype=bool)
    out = np.array(conditions[..., 0], dtype=bool)
    for j in range(1, conditions.shape[-1]):
        combine(out, conditions[..., j], out=out)
    return out


def row_sums(matrix: np.ndarray) -> np.ndarray:
    """`matrix.sum(axis=1)` a column at a time (see every), adding in the same order."""
    if matrix.ndim != 2 or not matrix.shape[1]:
        return np.asarray(matrix.sum(axis=-1))
    total = matrix[:, 0].copy()
    for j in range(1, matrix.shape[1]):
        total += matrix[:, j]
    return total


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """The dot product of two vectors, summed exactly (math.fsum): the same bits on any machine, where a BLAS
    library's dot product adds in an order of its own, which can differ from one CPU to another."""
    return math.fsum((np.asarray(a, dtype=float) * np.asarray(b, dtype=float)).tolist())


def first_in_order(first: np.ndarray, second: np.ndarray, count: int) -> np.ndarray:
    """The first `count` (or more, with ties) positions of `np.lexsort((second, first))`, in that order: the
    same prefix without sorting the whole."""
    if len(first) <= 4 * count:
        ranked: np.ndarray = np.lexsort((second, first))
        return ranked
    cut = np.partition(first, count - 1)[count - 1]
    below = (first < cut).nonzero()[0]                  # fewer than `count`: all come before the ties
    tied = (first == cut).nonzero()[0]
    wanted = count - len(below)
    if len(tied) > wanted:
        tied = tied[second[tied] <= np.partition(second[tied], wanted - 1)[wanted - 1]]
    head = np.concatenate([below, tied])
    ranked = head[np.lexsort((head, second[head], first[head]))]
    return ranked


def smallest(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` smallest `values`, smallest first (ties by index: deterministic)."""
    if len(values) <= 4 * count:
        return np.argsort(values, kind="stable")[:count]
    cut = np.partition(values, count - 1)[count - 1]
    head = (values <= cut).nonzero()[0]                 # the smaller ones and every tie, in order of index
    ranked: np.ndarray = head[np.argsort(values[head], kind="stable")][:count]
    return ranked


def holds_exactly(requirement: Requirement | None, values: Sequence[str]) -> bool:
    """Whether `requirement` already allows `values` and nothing else."""
    return (requirement is not None and not requirement.complement and requirement.greater_than is None
            and requirement.less_than is None and requirement.values == frozenset(values))


def estimate(array: np.ndarray) -> np.ndarray:
    """`array` as floats for rankings that only estimate (huge amounts saturate instead of overflowing)."""
    if array.dtype != object:
        return array
    estimated: np.ndarray = np.clip(array, -FLOAT_LIMIT, FLOAT_LIMIT).astype(float)
    return estimated


def offering_allowed(o: Offering, reqs: Requirements) -> bool:
    return o.allowed_by(reqs)


def carries_accelerator(t: InstanceType) -> bool:
    """Whether `t` has a GPU or an accelerator. Among types of one price the plain ones come first, so a pod
    that asked for no accelerator does not get a machine with one for its name's sake: Karpenter's AWS
    provider likewise sets such "exotic" types aside while a generic type would serve."""
    return any(t.capacity.get(name, 0) > 0 for name in ACCELERATORS)


def cheapest_offering(t: InstanceType, reqs: Requirements) -> Offering | None:
    """The cheapest available offering of `t` that `reqs` allow (ties by zone), or None."""
    best = None
    for o in t.offerings:
        if offering_allowed(o, reqs) and (best is None or (o.price_per_hour, o.zone) < (best.price_per_hour, best.zone)):
            best = o
    return best


HOLDING_KEPT = 65536                # answers a template keeps for holding() and most_allocatable() (past it, it starts again)


class ResourceRows:
    """Resource lists as rows of numbers, one column per resource name, shared by every template of a solve."""

    def __init__(self, names: set[str]) -> None:
        self.index = {n: i for i, n in enumerate(sorted(names))}
        self._pods: dict[int, np.ndarray | None] = {}
        self._estimates: dict[int, np.ndarray | None] = {}

    def row(self, resources: Mapping[str, int]) -> np.ndarray:
        """`resources` as a row (see amounts()); names without a column are dropped."""
        out = [0] * len(self.index)
        for name, amount in resources.items():
            column = self.index.get(name)
            if column is not None:
                out[column] = amount
        return amounts(out)

    def of(self, pod: PodInfo) -> np.ndarray | None:
        """The pod's requests as a row (cached per pod); None when it asks for a resource no column has."""
        key = id(pod)
        if key not in self._pods:
            unknown = any(n not in self.index and a > 0 for n, a in pod.requests.items())
            self._pods[key] = None if unknown else self.row(pod.requests)
        return self._pods[key]

    def estimate_of(self, pod: PodInfo) -> np.ndarray | None:
        """of(pod) as floats (see estimate), cached per pod and read-only: the optimiser's rankings ask it often."""
        key = id(pod)
        if key not in self._estimates:
            row = self.of(pod)
            if row is not None:
                row = estimate(row).astype(float)
                row.flags.writeable = False
            self._estimates[key] = row
        return self._estimates[key]


class NodeTemplate:
    """What one Provisioner or NodePool launches, and how much of its limits is left. `owner_label` names its
    nodes' owner; `min_values` (v1) is the fewest distinct values per key a node's instance-type options keep."""

    def __init__(self, *, name: str, weight: int, requirements: Requirements, labels: Mapping[str, str],
                 taints: Sequence[Taint], startup_taints: Sequence[Taint], instance_types: Sequence[InstanceType],
                 daemon_overhead: Resources, limits: Resources | None, well_known: frozenset[str],
                 rows: ResourceRows, node_costs: NodeCosts | None = None, owner_label: str = wk.PROVISIONER_NAME,
                 annotations: Mapping[str, str] | None = None, min_values: Mapping[str, int] | None = None) -> None:
        self.name, self.weight = name, weight
        self.owner_label = owner_label
        self.annotations = dict(annotations or {})
        self.min_values = dict(min_values or {})
        self.requirements = requirements
        self.labels = dict(labels)
        self.taints, self.startup_taints = list(taints), list(startup_taints)
        self.daemon_overhead = daemon_overhead
        self.remaining = limits                              # None: unlimited
        self._alone_prices: dict[tuple[object, ...], float | None] = {}   # cheapest_price_for, by row
        self.well_known = well_known
        self.node_costs = node_costs = node_costs or NodeCosts()     # none: the instance's price alone
        daemon_cpu = daemon_overhead.get(CPU, 0)
        priced: list[tuple[float, InstanceType, Resources]] = []   # each usable type: its cheapest allowed price, room
        for t in instance_types:
            offer = cheapest_offering(t, requirements) if t.requirements.agrees_with(requirements) else None
            if offer is None:
                continue                                     # the requirements rule it out (most types, usually)
            room = t.allocatable - daemon_overhead
            room[CPU] = min(room.get(CPU, 0), sustained_cpu(t) - daemon_cpu)   # a throttled type sustains less
            if room.get(CPU, 0) <= 0 or room.get(MEMORY, 0) <= 0:
                continue                                     # its overhead leaves nothing for pods
            priced.append((offer.price_per_hour, t, room))
        # what each type costs beyond its list price when its pods use all of its cpu: a cost no load exceeds
        most = [node_costs.per_hour + credits_per_hour(t, room[CPU] + daemon_cpu) for _, t, room in priced]
        ranked = sorted(range(len(priced)), key=lambda i: (priced[i][0] + most[i], carries_accelerator(priced[i][1]),
                                                            priced[i][1].name))
        usable = [priced[i][1] for i in ranked]
        rooms = [priced[i][2] for i in ranked]
        self.full_extra = np.array([most[i] for i in ranked], dtype=float)
        self.costs = CostTable(usable, node_costs, daemon_cpu)
        self.instance_types = usable
        self.median_price = sorted(priced[i][0] + most[i] for i in ranked)[len(ranked) // 2] if ranked else 0.0
        self.rows = rows
        self.resource_index = rows.index
        self.cpu_column = rows.index.get(CPU)
        self.allocatable = amounts([rows.row(room).tolist() for room in rooms], width=len(rows.index))
        self._allocatable_columns = np.ascontiguousarray(self.allocatable.T)   # a row per resource (holding)
        self._holding: dict[tuple[str, bytes], np.ndarray] = {}                 # holding's answers, by amounts
        self._most: dict[bytes, np.ndarray] = {}                                # most_allocatable's, by mask
        # a typical type's allocatable (the median, at least 1 of each resource): the unit resources are weighed in
        self.typical = (np.maximum(np.median(estimate(self.allocatable).astype(float), axis=0), 1.0) if len(rooms)
                        else np.ones(len(rows.index)))
        self.capacity = [t.capacity for t in usable]
        self._limit_names = sorted(limits or {})
        self._limit_capacity = amounts([[c.get(n, 0) for n in self._limit_names] for c in self.capacity],
                                       width=len(self._limit_names))
        self._masks: dict[frozenset[Requirement], tuple[np.ndarray, np.ndarray, list[Offering | None]]] = {}
        self._prices: dict[frozenset[Requirement], np.ndarray] = {}

    def compatible(self, reqs: Requirements) -> tuple[np.ndarray, np.ndarray, list[Offering | None]]:
        """For the instance types `reqs` allow: a mask, their indices cheapest first (by the most they can cost:
        list price and per-node costs, and a burstable type's credits at full load), and each type's cheapest
        allowed offering. Cached per distinct requirement on the types' own keys."""
        relevant = frozenset(r for k, r in reqs.items() if k in self.type_keys)
        hit = self._masks.get(relevant)
        if hit is None:
            offers = [cheapest_offering(t, reqs) if t.requirements.agrees_with(reqs) else None
                      for t in self.instance_types]
            mask = np.array([o is not None for o in offers], dtype=bool)
            prices = np.array([o.price_per_hour if o is not None else np.inf for o in offers], dtype=float)
            ranked = sorted((prices[i] + self.full_extra[i], carries_accelerator(self.instance_types[i]),
                             self.instance_types[i].name, i) for i, o in enumerate(offers) if o is not None)
            order = np.array([i for *_, i in ranked], dtype=np.int64)
            hit = self._masks[relevant] = (mask, order, offers)
            self._prices[relevant] = prices
        return hit

    def list_prices(self, reqs: Requirements) -> np.ndarray:
        """Each type's cheapest allowed list price under `reqs` (inf where none is allowed)."""
        self.compatible(reqs)
        prices: np.ndarray = self._prices[frozenset(r for k, r in reqs.items() if k in self.type_keys)]
        return prices

    def costs_at(self, reqs: Requirements, which: np.ndarray, pods_cpu: float) -> np.ndarray:
        """The true cost of types `which` (indices) holding pods that request `pods_cpu` (thousandths)."""
        costs: np.ndarray = self.list_prices(reqs)[which] + self.costs.extra(pods_cpu, which)
        return costs

    def cpu_of(self, row: np.ndarray) -> float:
        return float(row[self.cpu_column]) if self.cpu_column is not None else 0.0

    @property
    def type_keys(self) -> frozenset[str]:
        keys = getattr(self, "_type_keys", None)
        if keys is None:
            keys = self._type_keys = frozenset(k for t in self.instance_types for k in t.requirements)
        return keys

    def holding(self, used: np.ndarray) -> np.ndarray:
        """Which instance types' allocatable holds `used`: `covers(allocatable, used)`, read-only. Nodes ask it of
        the same few amounts again and again (a 20,000-pod plan: 637 distinct of 30,565 in the first fit), so
        the answers are kept, up to HOLDING_KEPT of them; amounts held as Python integers are worked out each time."""
        if used.dtype == object:
            return covers(self._allocatable_columns.T, used)
        key = (used.dtype.str, used.tobytes())
        found = self._holding.get(key)
        if found is None:
            if len(self._holding) >= HOLDING_KEPT:
                self._holding.clear()
            found = self._holding[key] = covers(self._allocatable_columns.T, used)
            found.flags.writeable = False
        return found

    def most_allocatable(self, options: np.ndarray) -> np.ndarray:
        """Per resource, the most any of the types in `options` (a mask, not empty) has, read-only. Nodes' options
        go through few masks (a 20,000-pod plan: 400 distinct of some 20,000 asked), so the answers are kept, up to
        HOLDING_KEPT of them."""
        key = options.tobytes()
        found = self._most.get(key)
        if found is None:
            if len(self._most) >= HOLDING_KEPT:
                self._most.clear()
            found = self._most[key] = self.allocatable[options].max(axis=0)
            found.flags.writeable = False
        return found

    def cheapest_price_for(self, row: np.ndarray) -> float | None:
        """What a new node of this template would cost holding just `row` (daemon overhead included)."""
        known = self._alone_prices
        key = tuple(row.tolist())                      # pods of one shape ask again and again
        if key not in known:
            _, order, _ = self.compatible(self.requirements)
            candidates = order[self.holding(row)[order]]
            known[key] = float(self.costs_at(self.requirements, candidates, self.cpu_of(row)).min()) if len(candidates) else None
        return known[key]

    def short_of_min_values(self, types: Sequence[InstanceType], reqs: Requirements) -> str | None:
        """Which requirement's minValues `types` fall short of (counting the values `reqs` allow), or None."""
        for key, least in sorted(self.min_values.items()):
            allowed = reqs.get(key)
            values = {v for t in types if key in t.requirements and not t.requirements[key].complement
                      for v in t.requirements[key].values if allowed is None or allowed.has(v)}
            if len(values) < least:
                return f'minValues requirement is not met for "{key}" ({len(values)} of {least} values)'
        return None

    def within(self, budget: Mapping[str, int] | None) -> np.ndarray:
        """Which instance types' capacity fits `budget` of the limited resources (None: all)."""
        if budget is None:
            return np.ones(len(self.instance_types), dtype=bool)
        row = amounts([budget.get(n, 0) for n in self._limit_names])
        return np.asarray((self._limit_capacity <= row).all(axis=1))


class ExistingNode:
    """A Node that exists (or is being launched): what is left of it for pending pods."""

    def __init__(self, *, name: str, labels: Mapping[str, str], taints: Sequence[Taint], available: Resources,
                 host_ports: frozenset[tuple[str, str, int]], provisioner: str | None,
                 allocatable: Resources | None = None) -> None:
        self.name = name
        self.labels = dict(labels)
        self.taints = list(taints)
        self.available = available
        self.allocatable = allocatable if allocatable is not None else available   # before any pod
        self.host_ports = host_ports
        self.provisioner = provisioner
        self.pods: list[PodInfo] = []

    def add(self, pod: PodInfo, topology: Topology) -> Reason | None:
        """Place `pod` here, or say why not."""
        if blocked := untolerated(pod.tolerations, self.taints):
            return Reason(Why.TAINT, f"did not tolerate taint {blocked[0]}")
        if port := host_ports_conflict(pod.host_ports, self.host_ports):
            return Reason(Why.HOST_PORT, f"host port {port[2]}/{port[1]} in use")
        if not pod.requirements.allows_labels(self.labels):
            key, r = next((k, r) for k, r in pod.requirements.items() if not Requirements([r]).allows_labels(self.labels))
            return Reason(Why.NODE_LABELS, f"node label {key}={self.labels.get(key, '<absent>')} does not satisfy {r}")
        if missing := pod.requests.exceeding(self.available):
            return Reason(Why.INSUFFICIENT, f"insufficient {', '.join(missing)}")
        domains, why = topology.domain_for(pod, Requirements(), hostname=self.name, existing_labels=self.labels)
        if domains is None:
            return why
        self.available = self.available - pod.requests
        self.host_ports = self.host_ports | pod.host_ports
        self.pods.append(pod)
        topology.record(pod, self.labels)
        return None


NodeMakeup = tuple[Requirements, np.ndarray, np.ndarray]   # a node's requirements, requests and options (NewNode.makeup)


class NodeState(NamedTuple):
    """What NewNode.restore() puts back: everything a pod's addition changes, the template's remaining limits
    (its reservation moves them), and the node's price then."""

    requirements: Requirements
    used: np.ndarray
    options: np.ndarray
    reserved: Resources
    host_ports: frozenset[tuple[str, str, int]]
    pods: int | list[PodInfo]             # how many (additions only append), or the list itself (see snapshot)
    domains: dict[str, str]
    remaining: Resources | None
    price: float


class NewNode:
    """A node being planned for a template: its requirements narrow and its options shrink as pods join."""

    def __init__(self, template: NodeTemplate, hostname: str) -> None:
        self.template = template
        self.hostname = hostname
        self._ranked_for: Requirements | None = None
        self._ranked_cache: tuple[np.ndarray, np.ndarray, list[Offering | None]] = (np.zeros(0, dtype=np.int64), np.zeros(0), [])
        self._now_cache: tuple[NodeMakeup, tuple[int, float] | None] | None = None
        self._with_cache: tuple[NodeMakeup, dict[bytes, tuple[int, float] | None]] | None = None   # option_with's, by row
        self.requirements = template.requirements.copy()
        # held as Python integers when the types' sizes are: then no sum of requests can wrap
        self.used = np.zeros(len(template.rows.index), dtype=template.allocatable.dtype)
        self.options = template.compatible(self.requirements)[0] & template.within(template.remaining)
        self.reserved = Resources()                          # limited resources held against the template's limits
        self._reserve()
        self.host_ports: frozenset[tuple[str, str, int]] = frozenset()
        self.pods: list[PodInfo] = []
        self.domains: dict[str, str] = {wk.HOSTNAME: hostname}

    def _ranked(self) -> tuple[np.ndarray, np.ndarray, list[Offering | None]]:
        """The types the node's requirements allow, in compatible()'s order, each type's list price and its
        cheapest allowed offering; kept while the requirements stay the same object (they are replaced, never
        edited, as pods come)."""
        if self._ranked_for is not self.requirements:
            t = self.template
            _, order, offers = t.compatible(self.requirements)
            self._ranked_cache = (order, t.list_prices(self.requirements), offers)
            self._ranked_for = self.requirements
        return self._ranked_cache

    def _least(self, candidates: np.ndarray, used: np.ndarray) -> tuple[int, float]:
        """Of `candidates` (indices, in compatible()'s order), the one that costs least holding `used` (the first
        of equal cost), and that cost."""
        t = self.template
        costs = self._ranked()[1][candidates] + t.costs.extra(t.cpu_of(used), candidates)
        at = int(costs.argmin())
        return int(candidates[at]), float(costs[at])

    def makeup(self) -> NodeMakeup:
        """What the node's prices follow: its requirements, requests and options, as the objects they are now."""
        return self.requirements, self.used, self.options

    def made_of(self, makeup: NodeMakeup) -> bool:
        """Whether the node is still made of `makeup`'s objects: they are replaced, never edited, as pods come and
        go, so what was worked out from them then holds now."""
        return makeup[0] is self.requirements and makeup[1] is self.used and makeup[2] is self.options

    def _now(self) -> tuple[int, float] | None:
        """The option that costs least with the node's pods and that cost (None: no option), kept while the node
        is made of the same objects (made_of)."""
        kept = self._now_cache
        if kept is not None and self.made_of(kept[0]):
            return kept[1]
        order = self._ranked()[0]
        candidates = order[self.options[order]]
        found = self._least(candidates, self.used) if len(candidates) else None
        self._now_cache = (self.makeup(), found)
        return found

    def offering(self, index: int) -> Offering | None:
        """The cheapest offering of type `index` the node's requirements allow (None: they allow none)."""
        return self._ranked()[2][index]

    def cheapest(self) -> int:
        """Index of the option that costs least with the node's pods."""
        found = self._now()
        if found is None:
            order = self._ranked()[0]
            return int(order[0]) if len(order) else 0
        return found[0]

    def price(self) -> float:
        """What the node costs now (cost.py): its cheapest option with its pods, per-node costs included."""
        found = self._now()
        return 0.0 if found is None else found[1]

    def option_with(self, row: np.ndarray) -> tuple[int, float] | None:
        """The option that costs least holding `row` more (its requirements as they are) and what the node then
        costs, or None. Kept per row while the node is made of the same objects (made_of): a fill prices the same few
        rows on the same nodes again and again between two changes (a 20,000-pod plan: 32,000 of 47,000 asks). Rows
        of Python integers are worked out each time."""
        if row.dtype == object:
            return self._option_with(row)
        kept = self._with_cache
        if kept is None or not self.made_of(kept[0]):
            kept = self._with_cache = (self.makeup(), {})
        key = row.dtype.str.encode() + row.tobytes()
        answers = kept[1]
        if key not in answers:
            answers[key] = self._option_with(row)
        return answers[key]

    def _option_with(self, row: np.ndarray) -> tuple[int, float] | None:
        t = self.template
        order = self._ranked()[0]
        candidates = order[self.options[order]]
        used = self.used + row
        candidates = candidates[t.holding(used)[candidates]]
        return self._least(candidates, used) if len(candidates) else None

    def price_with(self, row: np.ndarray) -> float | None:
        """What the node would cost with `row` more requested (its requirements as they are), or None."""
        found = self.option_with(row)
        return None if found is None else found[1]

    def free_room(self) -> np.ndarray:
        """What the cheapest option has left: a pod within it costs nothing more."""
        room: np.ndarray = self.template.allocatable[self.cheapest()] - self.used
        return room

    def grow_room(self) -> np.ndarray:
        """Per resource, the most any option has left (a pod beyond it fits no option)."""
        room: np.ndarray = self.template.most_allocatable(self.options) - self.used
        return room

    def add(self, pod: PodInfo, topology: Topology) -> Reason | None:
        """Place `pod` here if some instance type can hold it with the others, or say why not."""
        t = self.template
        row = t.rows.of(pod)
        if row is None:
            unknown = ", ".join(sorted(n for n in pod.requests if n not in t.resource_index))
            return Reason(Why.UNKNOWN_RESOURCE, f"no instance type has {unknown}")
        used = self.used + row
        if blocked := untolerated(pod.tolerations, t.taints):
            return Reason(Why.TAINT, f"did not tolerate taint {blocked[0]}")
        if port := host_ports_conflict(pod.host_ports, self.host_ports):
            return Reason(Why.HOST_PORT, f"host port {port[2]}/{port[1]} in use")
        reqs = self.requirements
        pod_reqs = pod.requirements
        if pod_reqs:
            if conflict := reqs.compatible(pod_reqs, well_known=t.well_known):
                return Reason(Why.REQUIREMENTS, f"incompatible requirements, {conflict}")
            reqs = reqs.intersection(pod_reqs)
        narrowed: dict[str, list[str]] = {}
        domains, why = topology.domain_for(pod, reqs, hostname=self.hostname, existing_labels=None, narrowed=narrowed)
        if domains is None:
            return why
        pinned = {k: [d] for k, d in domains.items() if k != wk.HOSTNAME}
        pinned.update((k, v) for k, v in narrowed.items() if k != wk.HOSTNAME)
        pinned = {k: v for k, v in pinned.items() if not holds_exactly(reqs.get(k), v)}   # already narrowed so
        if pinned:
            if reqs is self.requirements:
                reqs = reqs.copy()
            for key, values in pinned.items():
                reqs.add(Requirement.exactly(key, *values))
        options = self.options
        if reqs is not self.requirements:
            options = options & t.compatible(reqs)[0]
        holds = t.holding(used)
        fitting = options & holds
        if not fitting.any():
            if t.remaining is not None:
                unlimited = t.compatible(reqs)[0]
                if (unlimited & holds).any():
                    left = ", ".join(f"{n}={q}" for n, q in t.remaining.clamp_zero().to_manifest().items())
                    return Reason(Why.LIMITS, f"exceeds limits of provisioner {t.name} (remaining {left})")
            return Reason(Why.NO_INSTANCE_TYPE, "no instance type satisfied resources and requirements")
        if fitting.tobytes() != options.tobytes():    # (of two masks, comparing their bytes is the quickest)
            options = fitting                          # else the same object: what is cached on it holds
        if t.remaining is not None:
            options = options & t.within(t.remaining + self.reserved)
            if not options.any():
                return Reason(Why.LIMITS, f"exceeds limits of provisioner {t.name}")
        if t.min_values and (short := t.short_of_min_values([t.instance_types[i] for i in np.flatnonzero(options)], reqs)):
            return Reason(Why.REQUIREMENTS, short)
        self.requirements, self.used, self.options = reqs, used, options
        self._reserve()
        self.host_ports = self.host_ports | pod.host_ports
        self.pods.append(pod)
        self.domains.update(reqs.single_values())
        topology.record(pod, self.domains, reqs)
        return None

    def clone(self) -> NewNode:
        """An independent copy (pods, domains and options its own), to try a re-packing on."""
        twin = copy.copy(self)
        twin.pods, twin.domains, twin.options = list(self.pods), dict(self.domains), self.options.copy()
        return twin

    def snapshot(self, *, price: float | None = None, whole: bool = False) -> NodeState:
        """The node as it is, for restore() to put back when a change does not pay. `whole` keeps the list of
        pods itself, for changes that take pods away too (otherwise only their count: additions append);
        `price`, when the caller knows it, saves pricing the node again."""
        return NodeState(self.requirements, self.used, self.options, self.reserved, self.host_ports,
                         list(self.pods) if whole else len(self.pods), dict(self.domains), self.template.remaining,
                         self.price() if price is None else price)

    def restore(self, state: NodeState) -> None:
        """Put the node (and its template's remaining limits) back as `state` saved it."""
        (self.requirements, self.used, self.options, self.reserved, self.host_ports,
         pods, self.domains, self.template.remaining, _) = state
        if isinstance(pods, list):
            self.pods = pods
        else:
            del self.pods[pods:]

    def remove(self, pods: Sequence[PodInfo]) -> None:
        """Take `pods` (some of the node's) off it: they are planned elsewhere. What the node requests and its
        options follow; its requirements stay as narrowed, so the pods that stay keep every promise made to them."""
        t = self.template
        gone = {id(p) for p in pods}
        self.pods = [p for p in self.pods if id(p) not in gone]
        if not self.pods:
            self.used = np.zeros(len(t.rows.index), dtype=np.int64)
        elif pods:
            # whole amounts (integers, or Python integers where a row holds them): taking away what leaves gives
            # the very sums of what stays, and reads only the rows of the few pods that leave a node of hundreds
            self.used = self.used - np.add.reduce(np.array([t.rows.of(p) for p in pods]), axis=0)
        if any(p.host_ports for p in pods):
            self.host_ports = frozenset().union(*(p.host_ports for p in self.pods))
        self.refit()

    def next_larger(self) -> int | None:
        """The option one size up: the cheapest that costs more than the current one and holds all it does."""
        t = self.template
        current = self.cheapest()
        prices = self._ranked()[1]
        larger = np.flatnonzero(self.options & t.holding(t.allocatable[current])
                                & (prices > prices[current] + 1e-12))
        return int(larger[prices[larger].argmin()]) if len(larger) else None

    def keep_room_of(self, index: int) -> None:
        """Take no option cheaper than type `index`, keeping the room it has for pods to come; refit() lets go."""
        prices = self._ranked()[1]
        self.options = self.options & (prices >= prices[index] - 1e-12)

    def refit(self) -> None:
        """Make every instance type that holds the node's pods (within the remaining limits) an option again."""
        t = self.template
        options = t.compatible(self.requirements)[0] & t.holding(self.used)
        if t.remaining is not None:
            options = options & t.within(t.remaining + self.reserved)
        self.options = options
        self._reserve()

    def narrow(self, requirements: Requirements, *, only: int | None = None) -> None:
        """Take on `requirements` before any pod comes (the pods to come need them) and, given `only`,
        keep that instance type alone as the option."""
        self.requirements = self.requirements.intersection(requirements)
        options = self.options & self.template.compatible(self.requirements)[0]
        if only is not None:
            alone = np.zeros_like(options)
            alone[only] = options[only]
            options = alone
        self.options = options
        self._reserve()

    def _reserve(self) -> None:
        """Hold the capacity of the cheapest option against the template's remaining limits."""
        t = self.template
        if t.remaining is None or not self.options.any():
            return
        cheapest = t.capacity[self.cheapest()]
        now = Resources({n: cheapest.get(n, 0) for n in t.remaining})
        t.remaining = t.remaining + self.reserved - now
        self.reserved = now

    def release(self) -> None:
        """Give the reservation back (the node is dropped from the plan)."""
        if self.template.remaining is not None:
            self.template.remaining = self.template.remaining + self.reserved
            self.reserved = Resources()

    def option_types(self) -> list[tuple[InstanceType, Offering]]:
        """The instance types that can still hold every pod with their cheapest allowed offering,
        the least costly with the node's pods first (ties as compatible() ranks them)."""
        return [(it, o) for it, o, _ in self.option_costs()]

    def option_costs(self) -> list[tuple[InstanceType, Offering, float]]:
        """option_types() with what the node would cost as each."""
        t = self.template
        offers = t.compatible(self.requirements)[2]
        which, costs = self.ranked_options()
        return [(t.instance_types[i], offers[i], c)                           # an offer is set for every option
                for i, c in zip(which.tolist(), costs.tolist())]

    def ranked_options(self) -> tuple[np.ndarray, np.ndarray]:
        """option_costs() as arrays: the options' indices and what the node would cost as each, in that order."""
        t = self.template
        order = t.compatible(self.requirements)[1]
        candidates = order[self.options[order]]
        costs = np.asarray(t.costs_at(self.requirements, candidates, t.cpu_of(self.used)), dtype=float)
        ranked = np.lexsort((np.arange(len(candidates)), costs))          # by cost, ties in compatible()'s order
        return candidates[ranked], costs[ranked]
