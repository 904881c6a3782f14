"""The scheduling core: which pending pods go where, and which nodes to launch.

Given Provisioners, an instance-type catalog, the Nodes that exist (with
their bound pods), DaemonSets and the pending pods, `Scheduler.solve()`
places pods as Karpenter v0.16 does: largest first, each onto an existing
node that fits, else onto a node already being planned, else onto a new
node from the heaviest provisioner that can hold it; soft constraints start
out required and are relaxed one at a time when a pod fits nowhere. The
result names every new node's cheapest offering and every pod that stays
pending, with the reason. Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence, cast

import numpy as np

from karpy.apis import labels as wk
from karpy.apis.conditions import initialized
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.resources import CPU, MEMORY, Resources
from karpy.apis.selectors import Taint, untolerated
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.apis.v1alpha1 import AWSSettings
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import InstanceType, Offering
from karpy.controller.provisioning.scheduling.cost import node_costs
from karpy.controller.provisioning.scheduling.nodes import (
    FLOAT_LIMIT,
    STARTING_TAINTS,
    ExistingNode,
    NewNode,
    NodeTemplate,
    ResourceRows,
    covers,
    estimate,
    first_in_order,
    row_sums,
)
from karpy.controller.provisioning.scheduling.packers import PackingOptions, StartedPacking, packer_for
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.reasons import Reason, Why, every_provisioner, failed
from karpy.controller.provisioning.scheduling.topology import Topology

MAX_INSTANCE_TYPE_OPTIONS = 60
FIRST_CHUNK_PODS = 200             # the controller's first chunk of a batch: small, so its first launch starts soon
FIRST_CHUNK_SECONDS = 0.2          # the optimiser's time on that chunk, at most (past it the greedy's nodes stand)
# the most pods a chunk takes (but the last): the optimiser's work bounds are set for about so many, and a batch of
# twice as many is planned in chunks whose optimisation overlaps the next chunk's placing (Scheduler.solve)
CHUNK_PODS = 5000
# karpy plan optimises its last chunk's nodes in so many parts at once: once every chunk is placed, nothing is left
# to place beside the last chunk's optimisation, and one process would keep one core busy and the other idle
LAST_CHUNK_PARTS = 2
TOPOLOGY_KEYS_FROM_OFFERINGS = (wk.ZONE, wk.CAPACITY_TYPE)


@dataclasses.dataclass(frozen=True)
class PlannedNode:
    """A new node to launch: its cheapest offering, the other options, and its pods."""

    name: str
    provisioner: str
    instance_type: InstanceType
    offering: Offering
    options: tuple[InstanceType, ...]               # cheapest first, at most MAX_INSTANCE_TYPE_OPTIONS
    requirements: Requirements
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    pods: tuple[PodInfo, ...]
    cost_per_hour: float = 0.0                      # its true cost with its pods (cost.py)
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)   # a NodePool's template annotations


@dataclasses.dataclass
class Results:
    new_nodes: list[PlannedNode]
    existing_nodes: list[ExistingNode]               # only those that received pending pods
    unschedulable: dict[str, Reason]                 # pod key -> why it fits nowhere
    pending: list[PodInfo]                           # every pod that was to be placed
    # What broke while handling one object, confined to it (its pods are in `unschedulable` too);
    # the caller logs and reports these: the core stays pure.
    failed_pods: dict[str, str] = dataclasses.field(default_factory=dict)           # pod key -> error
    failed_provisioners: dict[str, str] = dataclasses.field(default_factory=dict)   # name -> error
    # where the optimiser's safety cap (PackingOptions.max_seconds) cut a search short, and what it left
    cut_short: list[str] = dataclasses.field(default_factory=list)


def failure(e: Exception) -> str:
    """An unexpected error as one line for a reason, an Event and a log line."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


@dataclasses.dataclass
class ClusterSnapshot:
    """Everything the scheduler reads, already parsed."""

    provisioners: Sequence[Provisioner]
    catalog: Catalog
    nodes: Sequence[Mapping[str, Any]] = ()
    pods: Sequence[PodInfo] = ()
    daemonsets: Sequence[PodInfo] = ()               # one pod per DaemonSet, from its template
    node_templates: Mapping[str, AWSSettings] = dataclasses.field(default_factory=dict)   # AWSNodeTemplates by name
    leaving: frozenset[str] = frozenset()            # nodes to plan as deleted (an interrupted node's replacements)


def node_name(provisioner: str, index: int) -> str:
    """A stable, Karpenter-looking name (`default-7kq2m`) for the index-th planned node."""
    digest = int(hashlib.sha1(f"{provisioner}/{index}".encode()).hexdigest(), 16)
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    suffix = ""
    for _ in range(5):
        digest, r = divmod(digest, len(alphabet))
        suffix += alphabet[r]
    return f"{provisioner}-{suffix}"


class Rooms:
    """Room left per node as a matrix, so one comparison finds every node a pod might fit.

    Each kind of pod also has a mask of the nodes that turned it away for other reasons (taints,
    labels, anti-affinity). Nodes only fill up, so they turn away its twins too, until the topology
    groups of the kind widen (Topology.widenings): a mask holds for one such stamp."""

    def __init__(self, width: int) -> None:
        # one row per resource, one column per node: a comparison reads each resource's amounts contiguously
        self._columns = np.zeros((width, 64), dtype=np.int64)
        self._count = 0
        self._versions = np.zeros(64, dtype=np.int64)     # per node, bumped whenever its room changes
        # per request row, what was worked out for each node at the version it had (see _worked_out): pods come
        # largest first, so runs of pods ask the same of the nodes, of which one or two change between them
        self._fits: dict[bytes, _PerNode] = {}
        self._growth: dict[bytes, _PerNode] = {}
        self._rejected: dict[tuple[object, ...], tuple[int, np.ndarray]] = {}
        # per topology key, the domain each node is in (an index into _domain_names[key]; -1: not decided yet)
        self._domains: dict[str, np.ndarray] = {}
        self._domain_names: dict[str, list[str]] = {}

    def append(self, row: np.ndarray) -> None:
        self._hold(row)
        if self._count == self._columns.shape[1]:
            self._columns = np.concatenate([self._columns, np.zeros_like(self._columns)], axis=1)
            for kind, (stamp, mask) in self._rejected.items():
                self._rejected[kind] = (stamp, np.concatenate([mask, np.zeros_like(mask)]))
            for key, codes in self._domains.items():
                self._domains[key] = np.concatenate([codes, np.full_like(codes, -1)])
            self._versions = np.concatenate([self._versions, np.zeros_like(self._versions)])
        self._columns[:, self._count] = row
        self._versions[self._count] += 1
        self._count += 1

    def settle(self, i: int, domains: Mapping[str, str], keys: Iterable[str]) -> None:
        """Note node `i`'s domain for each of `keys` it has taken (domains only ever narrow to one)."""
        for key in keys:
            domain = domains.get(key)
            if domain is None:
                continue
            codes = self._domains.get(key)
            if codes is None:
                codes = self._domains[key] = np.full(self._columns.shape[1], -1, dtype=np.int64)
                self._domain_names[key] = []
            names = self._domain_names[key]
            if domain not in names:
                names.append(domain)
            codes[i] = names.index(domain)

    def in_domains(self, found: np.ndarray, key: str, admitted: Callable[[Sequence[str]], Collection[str]]) -> np.ndarray:
        """Of `found`, the nodes whose domain for `key` is not decided yet or one of those `admitted(domains)` lets in."""
        codes = self._domains.get(key)
        if codes is None or not len(found):
            return found
        names = self._domain_names[key]
        let_in = admitted(names)
        shut = np.array([name not in let_in for name in names] + [False])   # -1 (undecided): the last
        return found[~shut[codes[found]]] if shut.any() else found

    def set(self, i: int, row: np.ndarray) -> None:
        self._hold(row)
        self._columns[:, i] = row
        self._versions[i] += 1

    def _hold(self, row: np.ndarray) -> None:
        """Switch to Python integers the first time a row needs them (see nodes.amounts)."""
        if row.dtype == object and self._columns.dtype != object:
            self._columns = self._columns.astype(object)

    def reject(self, kind: tuple[object, ...], stamp: int, i: int) -> None:
        entry = self._rejected.get(kind)
        if entry is None or entry[0] != stamp:
            entry = self._rejected[kind] = (stamp, np.zeros(self._columns.shape[1], dtype=bool))
        entry[1][i] = True

    def candidates(self, need: np.ndarray | None, kinds: Sequence[tuple[object, ...]], stamp: int) -> np.ndarray:
        """Indices of nodes whose room holds `need` and that have turned none of these kinds away since the
        kinds' topology was last at `stamp`."""
        if not self._count:
            return np.zeros(0, dtype=np.int64)
        if need is None:
            ok = np.ones(self._count, dtype=bool)
        else:
            ok = self._worked_out(self._fits, need, lambda columns: (covers(columns.T, need),))[0][:self._count].copy()
        for kind in kinds:
            entry = self._rejected.get(kind)
            if entry is not None and entry[0] == stamp:
                ok &= ~entry[1][:self._count]
        return ok.nonzero()[0]

    def holds(self, i: int, need: np.ndarray) -> bool:
        """True when node `i`'s room holds `need` as it is."""
        return bool((self._columns[:, i] >= need).all())

    def _worked_out(self, kept: dict[bytes, _PerNode], need: np.ndarray, work_out: Callable[[np.ndarray], tuple[np.ndarray, ...]],
                    *, also: bytes = b"") -> tuple[np.ndarray, ...]:
        """`work_out(columns)` for every node's column (one value per node in each array it returns), kept in
        `kept` per `need` (and `also`, what else work_out reads) and worked out again only for the nodes whose
        room changed (or that came) since. Amounts held as Python integers are worked out whole each time (their
        bytes do not name their values)."""
        count, capacity = self._count, len(self._versions)
        if need.dtype == object:
            return work_out(self._columns[:, :count])
        key = need.tobytes() + also
        entry = kept.get(key)
        if entry is None:
            if len(kept) >= KEPT_ROWS:
                kept.clear()
            entry = kept[key] = _PerNode()
        if len(entry.versions) < capacity:                 # the nodes outgrew it: room for as many as they have
            versions = np.full(capacity, -1, dtype=np.int64)
            versions[:len(entry.versions)] = entry.versions
            entry.versions = versions
            entry.values = tuple(np.concatenate([values, np.zeros(capacity - len(values), dtype=values.dtype)])
                                 for values in entry.values)
        stale = (entry.versions[:count] != self._versions[:count]).nonzero()[0]
        if len(stale):
            fresh = work_out(self._columns[:, stale])
            if not entry.values:
                entry.values = tuple(np.zeros(capacity, dtype=values.dtype) for values in fresh)
            for values, worked in zip(entry.values, fresh):
                values[stale] = worked
            entry.versions[stale] = self._versions[stale]
        return tuple(values[:count] for values in entry.values)

    def cheapest_growth_first(self, found: np.ndarray, need: np.ndarray, price: np.ndarray) -> Iterator[int]:
        """`found` ordered by what adding `need` would cost: first the nodes it fits without
        growing (the tightest fit first), then those it makes grow least, by `price` per unit.
        Most pods take one of the first few, so those are ranked first and the rest only when asked for."""
        if len(found) <= 1:
            yield from found.tolist()
            return

        def growth(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # a resource at a time, in column order: a node's sums are the same bits however many nodes are worked
            # out together and on any machine (a matrix product's order is the BLAS library's)
            short = estimate(need[:, None] - columns).T
            return row_sums(np.maximum(short, 0) * price), row_sums(np.maximum(-short, 0) * price)

        excess, left = (values[found] for values in self._worked_out(self._growth, need, growth, also=price.tobytes()))
        head = first_in_order(excess, left, HEAD_RANKED)
        yield from found[head].tolist()
        if len(head) < len(found):
            yield from found[np.lexsort((left, excess))[len(head):]].tolist()


HEAD_RANKED = 8                    # nodes ranked before the rest of the order is worked out
KEPT_ROWS = 64                     # request rows Rooms keeps what it worked out for (past it, it starts again)


@dataclasses.dataclass
class _PerNode:
    """Values worked out per node for one request row, and the version of each node's room they were worked out
    at (-1: not yet), each sized to Rooms' capacity."""
    values: tuple[np.ndarray, ...] = ()
    versions: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def price_per_unit(types: Sequence[InstanceType], resource_index: Mapping[str, int]) -> np.ndarray:
    """What a unit of each resource costs per hour, as if a type's whole price bought that resource
    alone: the median over the types that have it. Only the ratios matter (ranking growth)."""
    # a catalog's types are one list for every scheduler planned over it (consolidation builds many): the
    # weights are worked out once per list and set of resources (keyed by identity: types are equal by name)
    types = tuple(types)
    return _weights(tuple(id(t) for t in types), tuple(sorted(resource_index.items())), types).copy()


@functools.lru_cache(maxsize=8)
def _weights(_: tuple[int, ...], index: tuple[tuple[str, int], ...], types: tuple[InstanceType, ...]) -> np.ndarray:
    return _price_per_unit(types, dict(index))


def _price_per_unit(types: Sequence[InstanceType], resource_index: Mapping[str, int]) -> np.ndarray:
    weights = np.zeros(len(resource_index))
    offered = [(min(o.price_per_hour for o in t.offerings), t.allocatable) for t in types if t.offerings]  # each read once
    for name, column in resource_index.items():
        ratios = [price / min(allocatable[name], FLOAT_LIMIT) for price, allocatable in offered if allocatable.get(name, 0) > 0]
        if ratios:
            weights[column] = float(np.median(ratios))
    return weights


def placement_kinds(pod: PodInfo) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """What decides where `pod` may go (pods of one such kind are turned away by the same nodes), and its
    topology_kind, which is part of it."""
    topology = topology_kind(pod)
    return ("placement", tuple(sorted(pod.requests.items())), repr(pod.tolerations), pod.host_ports) + topology, topology


def topology_kind(pod: PodInfo) -> tuple[object, ...]:
    """What decides whether a node's spreads and (anti-)affinities take `pod`: a node that turns a pod away
    for its topology turns away every pod of this kind, whatever they request."""
    return (pod.namespace, tuple(sorted(pod.labels.items())), str(pod.requirements), tuple(pod.spreads),
            tuple(pod.affinities), len(pod.relaxations))


def take_evenly(queue: list[PodInfo], size: int) -> tuple[list[PodInfo], list[PodInfo]]:
    """A chunk of `size` pods spread evenly over `queue` (in its order) and the rest of the queue; the whole queue
    when the rest would be smaller than a chunk (it joins it). Chunks cut off the front of a queue ordered largest
    first held only large pods, then only small ones, and their nodes packed each apart: on ten draws of 1,000 pods of
    Karpenter's diverse benchmark, 26-32% dearer than the whole batch planned at once."""
    if len(queue) - size < size:
        return queue, []
    picked = {len(queue) * i // size for i in range(size)}
    return [p for i, p in enumerate(queue) if i in picked], [p for i, p in enumerate(queue) if i not in picked]


def deal(nodes: list[NewNode], parts: int) -> list[list[NewNode]]:
    """`nodes` dealt in turn into `parts` parts, none empty (no nodes: one empty part): nodes are opened as the
    chunk's pods come, largest first, so each part holds nodes of every size, as the chunk does."""
    return [nodes[k::parts] for k in range(min(parts, len(nodes)))] or [nodes]


def first_chunk_packing(packing: PackingOptions) -> PackingOptions:
    """The optimiser's options for a batch's first chunk: its time held to FIRST_CHUNK_SECONDS."""
    budget = FIRST_CHUNK_SECONDS if packing.max_seconds is None else min(packing.max_seconds, FIRST_CHUNK_SECONDS)
    return dataclasses.replace(packing, max_seconds=budget)


def sort_key(pod: PodInfo) -> tuple[int, int, str]:
    """Largest first (cpu, then memory), as Karpenter orders its queue; ties by name."""
    return (-pod.requests.get(CPU, 0), -pod.requests.get(MEMORY, 0), pod.key)


class Scheduler:
    def __init__(self, snapshot: ClusterSnapshot, *, name_node: Callable[[str, int], str] = node_name,
                 packing: PackingOptions = PackingOptions()) -> None:
        """`name_node(provisioner, index)` names planned nodes (stable names by default, for plans);
        `packing` says whether (and how) the new nodes are re-packed by the optimiser."""
        self.snapshot = snapshot
        self.packing = packing
        self._name_node = name_node
        self.well_known = wk.WELL_KNOWN_LABELS | {wk.NODEPOOL} | snapshot.catalog.known_label_keys()
        live = [p for p in snapshot.provisioners if not p.metadata.deletion_timestamp]
        self.provisioners = {p.name: p for p in live}
        nodes = {n["metadata"]["name"]: n for n in snapshot.nodes}
        self.deleting_nodes = {name for name, n in nodes.items()
                               if n["metadata"].get("deletionTimestamp") or name in snapshot.leaving}
        self.bound = [p for p in snapshot.pods if p.node_name and p.node_name not in self.deleting_nodes
                      and not p.terminal and not p.deleting]
        self.pending = [p for p in snapshot.pods if (not p.node_name or p.node_name in self.deleting_nodes)
                        and not p.terminal and not p.deleting]
        names = {n for t in snapshot.catalog.instance_types() for n in t.capacity}
        self.rows = ResourceRows(names | {n for d in snapshot.daemonsets for n in d.requests})
        self.resource_index = self.rows.index
        self.failed_provisioners: dict[str, str] = {}
        self.templates = []
        for p in sorted(live, key=lambda p: (-(p.spec.weight or 0), p.name)):
            try:
                self.templates.append(self._template(p, nodes))
            except Exception as e:  # one Provisioner's (or NodePool's) error is confined to it
                self.failed_provisioners[p.name] = failure(e)
        self.topology = Topology(self._domains(nodes))
        self._unregistered: dict[str, Reason] = {}     # pending pods whose topology could not be read
        for pod in self.pending + self.bound:   # groups first, so the bound pods below are counted in them
            try:
                self.topology.register(pod)
            except Exception as e:  # confined to the pod
                if pod in self.pending:
                    self._unregistered[pod.key] = failed(failure(e))
        self.existing = self._existing_nodes(nodes)
        self.new_nodes: list[NewNode] = []
        self._names = collections.Counter[str]()
        width = len(self.resource_index)
        self._price = price_per_unit(snapshot.catalog.instance_types(), self.resource_index)
        self._existing_rooms = Rooms(width)
        for n in self.existing:
            self._existing_rooms.append(self.rows.row(n.available))
        self._free_rooms, self._grow_rooms = Rooms(width), Rooms(width)

    # --- setup -------------------------------------------------------------------
    def _template(self, p: Provisioner, nodes: Mapping[str, Mapping[str, Any]]) -> NodeTemplate:
        """What `p` launches. A v1 NodePool comes as a Provisioner too (apis/v1/pool.py): one path for both."""
        spec = p.spec
        requirements = p.node_requirements()
        requirements.add(Requirement.exactly(p.owner_label, p.name))
        taints = [Taint.parse(t.model_dump(exclude_none=True)) for t in spec.taints or []]
        startup = [Taint.parse(t.model_dump(exclude_none=True)) for t in spec.startup_taints or []]
        overhead = Resources()
        for daemon in self.snapshot.daemonsets:
            if not untolerated(daemon.tolerations, taints) and requirements.compatible(
                    daemon.requirements, well_known=self.well_known) is None:
                overhead = overhead + daemon.requests
        limits = Resources.parse((spec.limits.resources if spec.limits else None) or {}) or None
        if limits is not None:
            used = Resources()
            for n in nodes.values():
                if (n["metadata"].get("labels") or {}).get(p.owner_label) == p.name:
                    status = n.get("status") or {}
                    used = used + Resources.parse(status.get("capacity") or status.get("allocatable"))
            reported = Resources.parse((p.status.resources if p.status else None) or {})
            limits = Resources({n: amount - max(used.get(n, 0), reported.get(n, 0)) for n, amount in limits.items()})
        return NodeTemplate(
            name=p.name, weight=spec.weight or 0, requirements=requirements,
            labels={**(spec.labels or {}), p.owner_label: p.name}, taints=taints, startup_taints=startup,
            instance_types=self.snapshot.catalog.instance_types(spec.kubelet_configuration),
            daemon_overhead=overhead, limits=limits, well_known=self.well_known, rows=self.rows,
            node_costs=node_costs(self._aws_settings(p), operator=self.packing.node_cost_per_hour),
            owner_label=p.owner_label, annotations=p.node_annotations, min_values=p.min_values,
        )

    def _aws_settings(self, p: Provisioner) -> AWSSettings | None:
        """The provisioner's inline provider block, else the AWSNodeTemplate its providerRef names (when known)."""
        if p.spec.provider is not None:
            return p.spec.provider
        if isinstance(p, NodePoolProvisioner):           # a NodePool's nodes cost what its EC2NodeClass says
            return p.node_class_settings
        ref = p.spec.provider_ref
        return self.snapshot.node_templates.get(ref.name) if ref is not None else None

    def _domains(self, nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, set[str]]:
        # As Karpenter: every value the provisioners' instance types offer, whether or not the provisioner
        # allows it. A zone no provisioner may launch in is still a domain a spread counts (empty), so it
        # holds the other zones to maxSkew instead of letting them fill up.
        domains: dict[str, set[str]] = collections.defaultdict(set)
        for t in self.templates:
            for it in t.instance_types:
                for o in it.offerings:
                    if o.available:
                        domains[wk.ZONE].add(o.zone)
                        domains[wk.CAPACITY_TYPE].add(o.capacity_type)
                for key, r in it.requirements.items():
                    if key not in TOPOLOGY_KEYS_FROM_OFFERINGS and not r.complement:
                        domains[key].update(r.values)
            for key, r in t.requirements.items():
                if not r.complement and key not in TOPOLOGY_KEYS_FROM_OFFERINGS:
                    domains[key].update(r.values)
        for name, n in nodes.items():
            if name in self.deleting_nodes:
                continue
            for key, value in (n["metadata"].get("labels") or {}).items():
                domains[key].add(value)
            domains[wk.HOSTNAME].add(name)
        return domains

    def _existing_nodes(self, nodes: Mapping[str, Mapping[str, Any]]) -> list[ExistingNode]:
        by_node: dict[str, list[PodInfo]] = collections.defaultdict(list)
        for pod in self.bound:
            by_node[pod.node_name].append(pod)  # type: ignore[index]  # bound pods name their node
        types = {it.name: it for t in self.templates for it in t.instance_types}
        out: list[tuple[bool, ExistingNode]] = []
        for name, n in sorted(nodes.items()):
            if name in self.deleting_nodes:
                continue
            meta, status, spec = n["metadata"], n.get("status") or {}, n.get("spec") or {}
            labels = dict(meta.get("labels") or {})
            labels.setdefault(wk.HOSTNAME, name)
            bound = by_node.get(name, [])
            for pod in bound:
                self.topology.record(pod, labels)   # after every group is registered (solve())
            if spec.get("unschedulable"):
                continue
            template = next((t for t in self.templates if t.name == labels.get(t.owner_label)), None)
            up = initialized(n)
            taints = [Taint.parse(t) for t in spec.get("taints") or []]
            allocatable = Resources.parse(status.get("allocatable") or status.get("capacity"))
            if template is not None:
                ignored = STARTING_TAINTS | ({t.key for t in template.startup_taints} if not up else set())
                taints = [t for t in taints if t.key not in ignored]
                it = types.get(labels.get(wk.INSTANCE_TYPE, ""))
                if it is not None and not up:
                    for resource, amount in it.allocatable.items():
                        if allocatable.get(resource, 0) == 0:
                            allocatable[resource] = amount
                    running = {p.owner_name for p in bound if p.is_daemon}
                    for daemon in self.snapshot.daemonsets:
                        if daemon.owner_name not in running and not untolerated(daemon.tolerations, taints) \
                                and daemon.requirements.allows_labels(labels):
                            allocatable = allocatable - daemon.requests
            used = Resources()
            ports: frozenset[tuple[str, str, int]] = frozenset()
            for pod in bound:
                used = used + pod.requests
                ports = ports | pod.host_ports
            launching = template is not None and not up
            out.append((launching, ExistingNode(name=name, labels=labels, taints=taints, available=allocatable - used,
                                                host_ports=ports, provisioner=template.name if template else None,
                                                allocatable=allocatable)))
        # nodes that are up and running first, then the ones still being launched
        return [node for _, node in sorted(out, key=lambda e: (e[0], e[1].name))]

    # --- solving -------------------------------------------------------------------
    def solve(self, *, on_decided: Callable[[list[PlannedNode]], bool] | None = None,
              first_chunk: int = FIRST_CHUNK_PODS) -> Results:
        """Place every pending pod or give the reason it fits nowhere.

        The queue is planned in chunks, each taking its pods evenly across the queue (take_evenly), so it holds large
        and small pods as the whole batch does and its nodes pack as the whole plan's would; later chunks never add
        pods to an earlier chunk's nodes. A pod that fits nowhere in its chunk is tried again after the last chunk's
        pods, as the whole-batch queue would try it behind the others. No chunk grows past CHUNK_PODS pods (the
        optimiser's work bounds are set for about so many), but the last, which takes the rest.

        Without `on_decided` (`karpy plan`) a batch is planned at once, unless it is optimised, holds twice
        CHUNK_PODS pods or more and no provisioner has limits (its chunks' nodes would share them): then in chunks
        of CHUNK_PODS whose optimisation is begun as each is placed and finished once all are (Packer.start), so
        that it runs in a process of its own while the next chunk is placed (when the packing's `processes`
        allow; the plan is the same either way). The last chunk's nodes are optimised in LAST_CHUNK_PARTS parts
        (deal), each apart, as nothing is left to place beside them. Karpenter's greedy plans the batch at once,
        as Karpenter does.

        With `on_decided` (the controller) the first chunk has `first_chunk` pods, then twice as many after each
        chunk that needed new nodes (a chunk that fit on existing nodes hands over nothing, so the next is as
        small). Each chunk's new nodes are optimised and handed to `on_decided` as soon as they are decided, so a
        large batch's first launch does not wait for its whole plan. `on_decided` returning False (no longer
        leading) ends the plan there: the results hold the nodes decided so far, and no pod is reported
        unschedulable."""
        errors: dict[str, Reason] = {}
        broken: dict[str, Reason] = dict(self._unregistered)
        keyed = []
        for pod in self.pending:
            if pod.key not in broken:
                try:
                    keyed.append((sort_key(pod), pod))
                except Exception as e:  # confined to the pod, as below
                    broken[pod.key] = failed(failure(e))
        errors.update(broken)
        rest = [pod for _, pod in sorted(keyed, key=lambda kp: kp[0])]
        batch = len(rest)
        # karpy plan's chunks: their optimisation overlaps the next chunk's placing, so their nodes may not share limits
        deferred = on_decided is None and self.packing.optimize and batch >= 2 * CHUNK_PODS and \
            all(t.remaining is None for t in self.templates)
        if on_decided is not None:
            size = min(max(1, first_chunk), CHUNK_PODS)
        else:
            size = CHUNK_PODS if deferred else batch
        decided: list[PlannedNode] = []
        cut_short: list[str] = []
        waiting: list[PodInfo] = []                     # pods that fit nowhere in an earlier chunk
        started: list[StartedPacking] = []              # chunks whose optimisation finishes after the last is placed

        def open_node(t: NodeTemplate) -> NewNode:
            return NewNode(t, self._hostname(t.name))

        while True:
            chunk, rest = take_evenly(rest, size)
            if rest:
                waiting += self._place_in_turn(chunk, errors, broken)
            else:
                self._place_all(chunk + waiting, errors, broken)
            # the greedy's new nodes are the incumbent: the optimiser returns them unless it finds cheaper
            packing = self.packing if decided or on_decided is None else first_chunk_packing(self.packing)
            packer = packer_for(packing)
            if deferred:
                # the last chunk too, though nothing is left to place meanwhile: the chunks still being optimised
                # are then processes alike, sharing the cores evenly
                for part in deal(self.new_nodes, 1 if rest else LAST_CHUNK_PARTS):
                    started.append(packer.start(part, topology=self.topology, options=packing, batch_pods=batch))
                planned = []
            else:
                repacked = packer.pack(self.new_nodes, topology=self.topology, options=packing, open_node=open_node)
                if repacked.cut_short is not None:
                    cut_short.append(repacked.cut_short)
                planned = [self._finalize(n) for n in repacked.nodes]
                decided += planned
            self.new_nodes = []                         # handed over: later chunks open nodes of their own
            width = len(self.resource_index)
            self._free_rooms, self._grow_rooms = Rooms(width), Rooms(width)
            if on_decided is not None and planned and not on_decided(planned):
                errors = {}
                break
            if not rest:
                break
            size = min(size * 2, CHUNK_PODS) if planned else size
        for begun in started:
            repacked = begun.finish(open_node)
            if repacked.cut_short is not None:
                cut_short.append(repacked.cut_short)
            decided += [self._finalize(n) for n in repacked.nodes]
        return Results(
            new_nodes=decided,
            existing_nodes=[n for n in self.existing if n.pods],
            unschedulable={p.key: errors[p.key] for p in sorted(self.pending, key=lambda p: p.key) if p.key in errors},
            pending=list(self.pending),
            failed_pods={key: reason.text for key, reason in broken.items()},
            failed_provisioners=dict(self.failed_provisioners),
            cut_short=cut_short,
        )

    def _place_in_turn(self, pods: list[PodInfo], errors: dict[str, Reason], broken: dict[str, Reason]) -> list[PodInfo]:
        """Place each of `pods` once, in order; returns those that fit nowhere yet (not relaxed: see solve)."""
        left = []
        for pod in pods:
            try:
                why = self._place(pod)
            except Exception as e:  # one pod's error is confined to it; the others are placed
                broken[pod.key] = errors[pod.key] = failed(failure(e))
                continue
            if why is None:
                errors.pop(pod.key, None)
            else:
                errors[pod.key] = why
                left.append(pod)
        return left

    def _place_all(self, pods: list[PodInfo], errors: dict[str, Reason], broken: dict[str, Reason]) -> None:
        """Place `pods` in queue order; a pod that fits nowhere is relaxed (or tried again) behind the others,
        until a whole pass places nothing."""
        queue = collections.deque(pods)
        failures_in_a_row = 0
        while queue:
            pod = queue.popleft()
            try:
                why = self._place(pod)
            except Exception as e:  # one pod's error is confined to it; the others are placed
                broken[pod.key] = errors[pod.key] = failed(failure(e))
                continue
            if why is None:
                errors.pop(pod.key, None)
                failures_in_a_row = 0
                continue
            errors[pod.key] = why
            relaxed = pod.relaxed()             # a new record: the pod given stays as it was
            if relaxed is not None:
                queue.append(relaxed)
                failures_in_a_row = 0
                continue
            failures_in_a_row += 1
            if failures_in_a_row > len(queue):
                break                        # a whole pass without progress: the rest stay pending
            queue.append(pod)

    def _place(self, pod: PodInfo) -> Reason | None:
        """Existing nodes first; then the planned node that takes the pod for the least extra cost
        (nothing, when it fits in what the node's cheapest option has left); then a new node from
        the heaviest provisioner that takes it."""
        kinds = placement_kinds(pod)
        stamp = self.topology.widenings(pod)
        need = self.rows.of(pod)
        for i in self._existing_rooms.candidates(need, kinds, stamp).tolist():
            why = self.existing[i].add(pod, self.topology)
            if why is None:
                self._existing_rooms.set(i, self.rows.row(self.existing[i].available))
                return None
            self._existing_rooms.reject(kinds[why.kind is Why.TOPOLOGY], stamp, i)
        found = self._grow_rooms.candidates(need, kinds, stamp)
        for key in self.topology.keys_of(pod):          # nodes in a domain the pod's topology shuts are not asked
            found = self._grow_rooms.in_domains(found, key, functools.partial(self.topology.admitted, pod, key))
        order = self._free_rooms.cheapest_growth_first(found, need, self._price) if need is not None else iter(found.tolist())
        fresh: float | None = None                     # what a new node for this pod alone would cost
        priced = 0
        for i in order:
            node = self.new_nodes[i]
            if need is not None and priced < 3 and not self._free_rooms.holds(i, need):
                priced += 1                            # the best few by estimate get an exact price
                # Nodes grow as Karpenter grows them, except into the expensive half of the catalog by a
                # jump that costs more than a node of its own (many pods on one node can otherwise pick
                # a 12 TB machine for its pod slots).
                if fresh is None and self.templates:
                    fresh = self.templates[0].cheapest_price_for(need) or float("inf")
                grown, now = node.price_with(need), node.price()
                if grown is None or (grown > node.template.median_price and grown > 2 * now
                                     and grown - now > (fresh if fresh is not None else float("inf"))):
                    continue
            why = node.add(pod, self.topology)
            if why is None:
                self._free_rooms.set(i, node.free_room())
                self._grow_rooms.set(i, node.grow_room())
                self._grow_rooms.settle(i, node.domains, self.topology.keys())
                return None
            self._grow_rooms.reject(kinds[why.kind is Why.TOPOLOGY], stamp, i)
        if not self.templates:
            return Reason(Why.NO_PROVISIONER, "no provisioner can launch nodes")
        reasons = []
        for template in self.templates:
            node = NewNode(template, self._hostname(template.name))
            try:
                why = node.add(pod, self.topology)
            except Exception:
                node.release()                         # its reservation must not outlive it
                raise
            if why is None:
                self.new_nodes.append(node)
                self._free_rooms.append(node.free_room())
                self._grow_rooms.append(node.grow_room())
                self._grow_rooms.settle(len(self.new_nodes) - 1, node.domains, self.topology.keys())
                return None
            node.release()
            reasons.append(self._explain(template, pod, why))
        return every_provisioner(reasons)

    def _hostname(self, provisioner: str) -> str:
        index = self._names[provisioner]
        self._names[provisioner] += 1
        name = self._name_node(provisioner, index)
        self.topology.add_domain(wk.HOSTNAME, name)
        return name

    def _explain(self, template: NodeTemplate, pod: PodInfo, why: Reason) -> Reason:
        """`why` in the words users read: which resource or requirement no instance type meets, and for which
        provisioner when there are several."""
        if why.kind is Why.NO_INSTANCE_TYPE:
            short = [n for n in pod.requests if n in template.resource_index]
            fits = [n for n in short if any(t.allocatable.get(n, 0) >= pod.requests[n] + template.daemon_overhead.get(n, 0)
                                             for t in template.instance_types)]
            lacking = [n for n in short if n not in fits and pod.requests[n] > 0]
            if lacking:
                amounts = Resources({n: pod.requests[n] for n in lacking}).to_manifest()
                why = why.rephrased("no instance type satisfies " + ", ".join(f"{n}={q}" for n, q in amounts.items()))
            else:
                why = why.rephrased(self._unmet_requirements(template, pod))
        return why if len(self.templates) == 1 else why.rephrased(f"provisioner {template.name}: {why.text}")

    @staticmethod
    def _unmet_requirements(template: NodeTemplate, pod: PodInfo) -> str:
        """Which requirement of the provisioner and pod no instance type meets (an impossible zone, an
        unknown instance type, an architecture none has); when each is met alone but not all together,
        the requests and every requirement, as Karpenter says it."""
        reqs = template.requirements.intersection(pod.requirements) if pod.requirements else template.requirements
        unmet = [r for key, r in reqs.items() if key in template.type_keys and not template.compatible(Requirements([r]))[0].any()]
        if unmet:
            return "no instance type satisfies " + ", ".join(str(r) for r in unmet)
        requests = ", ".join(f"{n}={q}" for n, q in pod.requests.to_manifest().items())
        return f"no instance type satisfied resources {{{requests}}} and requirements {reqs}"

    def _finalize(self, node: NewNode) -> PlannedNode:
        t = node.template
        which, costs = node.ranked_options()             # worked out as arrays: a node has hundreds of options
        if t.remaining is not None:
            budget = t.remaining + node.reserved
            fitting = np.array([all(t.instance_types[i].capacity.get(n, 0) <= left for n, left in budget.items())
                                for i in which.tolist()], dtype=bool)
            if fitting.any():
                which, costs = which[fitting], costs[fitting]
        first = int(which[0])
        chosen, cost = t.instance_types[first], float(costs[0])
        offering = cast(Offering, t.compatible(node.requirements)[2][first])   # an offer is set for every option
        # a launch takes the option of the lowest list price it can get: options that list cheaper than the chosen
        # one but cost more with these pods (a burstable type's credits) must not be offered to it
        listed = t.list_prices(node.requirements)[which]
        offered = which[listed >= listed[0]]
        kept = [t.instance_types[i] for i in offered[:MAX_INSTANCE_TYPE_OPTIONS].tolist()]
        if t.min_values and t.short_of_min_values(kept, node.requirements):
            kept = [t.instance_types[i] for i in offered.tolist()]   # as v1: never truncate below a requirement's minValues
        return PlannedNode(
            name=node.hostname, provisioner=t.name, instance_type=chosen, offering=offering,
            options=tuple(kept), requirements=node.requirements,
            labels=node_labels(node.requirements, t, chosen, offering),
            taints=tuple(t.taints + t.startup_taints), pods=tuple(node.pods), cost_per_hour=round(cost, 6),
            annotations=dict(t.annotations),
        )


def node_labels(reqs: Requirements, template: NodeTemplate, chosen: InstanceType, offering: Offering) -> dict[str, str]:
    """The labels a new node gets: every well-known label resolved, the chosen type's single-valued
    labels, the provisioner's labels, and a satisfying value for each other requirement. The owner label is
    `karpenter.sh/provisioner-name` for a Provisioner's node, `karpenter.sh/nodepool` for a NodePool's."""
    labels: dict[str, str] = {}
    for key, value in reqs.labels().items():
        if key == wk.HOSTNAME or wk.restricted_label_error(key) is not None:
            continue
        r = reqs[key]
        if r.complement or len(r.values) == 1:
            labels[key] = value
    labels.update(chosen.requirements.single_values())
    labels.update(template.labels)
    labels.update({
        wk.ZONE: offering.zone, wk.CAPACITY_TYPE: offering.capacity_type, wk.INSTANCE_TYPE: chosen.name,
        template.owner_label: template.name,
    })
    labels.setdefault(wk.ARCH, wk.ARCH_AMD64)
    labels.setdefault(wk.OS, wk.OS_LINUX)
    return dict(sorted(labels.items()))
