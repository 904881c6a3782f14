"""Does a pod fit a node? kube-scheduler's filter plugins, written from their documented semantics.

The local cluster plays kube-scheduler, so it judges fit with its own reading
of Kubernetes (not the autoscaler's scheduling code, which it is there to
check): NodeName, NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit, NodePorts, PodTopologySpread and InterPodAffinity, each
answering with kube-scheduler's reason text. A node whose Ready condition is
not True carries the `node.kubernetes.io/not-ready:NoSchedule` taint, as the
node lifecycle controller would have put it there.

`PodFacts` is a pod parsed once (pods of one ReplicaSet share it); `NodeState`
is a node with what is already placed on it. Pure: no I/O.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from typing import Any, Iterable, Mapping, Sequence

from karpy.apis.quantity import Quantity, QuantityError

Obj = Mapping[str, Any]
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")

NODE_NAME = "node(s) didn't match the requested node name"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
PORTS = "node(s) didn't have free ports for the requested pod ports"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@functools.lru_cache(maxsize=65536)
def _milli(text: str | int) -> int:
    return Quantity.parse(text).milli


def amounts(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """A resource list in thousandths (`{"cpu": "500m"}` -> `{"cpu": 500}`); raises QuantityError."""
    return {name: _milli(value if isinstance(value, (str, int)) else str(value)) for name, value in (raw or {}).items()}


def pod_requests(spec: Obj) -> dict[str, int]:
    """What NodeResourcesFit charges a pod: per resource, the larger of the containers' sum and the largest
    init container, plus the pod overhead."""
    total: dict[str, int] = collections.Counter()
    for c in spec.get("containers") or []:
        total.update(amounts((c.get("resources") or {}).get("requests")))
    for c in spec.get("initContainers") or []:
        for name, value in amounts((c.get("resources") or {}).get("requests")).items():
            total[name] = max(total.get(name, 0), value)
    total.update(amounts(spec.get("overhead")))
    return {k: v for k, v in total.items() if v}


# --- label selectors ------------------------------------------------------------------------------
def _expression_matches(expression: Obj, labels: Mapping[str, str]) -> bool:
    key, op, values = expression.get("key", ""), expression.get("operator", ""), expression.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):                      # node selector only: integers on both sides
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, IndexError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions ANDed. A null selector matches nothing,
    an empty one everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def node_selector_term_matches(term: Obj, node_name: str, labels: Mapping[str, str]) -> bool:
    """A NodeSelectorTerm: its matchExpressions (labels) and matchFields (metadata.name) ANDed; an empty
    term matches nothing."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    for f in fields:
        if f.get("key") != "metadata.name" or f.get("operator") not in ("In", "NotIn"):
            return False
        if not _expression_matches({**f, "key": "metadata.name"}, {"metadata.name": node_name}):
            return False
    return all(_expression_matches(e, labels) for e in expressions)


# --- taints ---------------------------------------------------------------------------------------
def tolerates(toleration: Obj, taint: Obj) -> bool:
    """A toleration matches a taint: same effect (or none given), and key and value by its operator;
    an empty key with Exists matches every taint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return op == "Exists"
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(tolerations: Sequence[Obj], taints: Iterable[Obj]) -> Obj | None:
    """The first NoSchedule/NoExecute taint no toleration matches."""
    for taint in taints:
        if taint.get("effect") in SCHEDULING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


# --- the pod, parsed once ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)       # compared by identity: the pods of a class share their terms
class AffinityTerm:
    selector: Obj | None
    namespaces: frozenset[str] | None          # None: every namespace (an empty namespaceSelector)
    topology_key: str

    @classmethod
    def parse(cls, term: Obj, own_namespace: str) -> AffinityTerm:
        names = set(term.get("namespaces") or [])
        namespace_selector = term.get("namespaceSelector")
        if namespace_selector is not None and not namespace_selector.get("matchLabels") and not namespace_selector.get("matchExpressions"):
            return cls(term.get("labelSelector"), None, term.get("topologyKey", ""))
        return cls(term.get("labelSelector"), frozenset(names or {own_namespace}), term.get("topologyKey", ""))

    def matches(self, pod: PodFacts) -> bool:
        return (self.namespaces is None or pod.namespace in self.namespaces) and selector_matches(self.selector, pod.labels)


@dataclasses.dataclass(frozen=True)
class Spread:
    max_skew: int
    topology_key: str
    selector: Obj | None
    min_domains: int


def _required(affinity: Obj, kind: str) -> list[Obj]:
    return list((affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or [])


@dataclasses.dataclass(frozen=True)
class PodFacts:
    """What the filters read of one pod."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    node_name: str
    requests: Mapping[str, int]
    ports: frozenset[tuple[str, str, int]]                  # (protocol, hostIP, hostPort)
    tolerations: tuple[Obj, ...]
    node_selector: Mapping[str, str]
    node_terms: tuple[Obj, ...] | None                      # None: no required node affinity
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    spread: tuple[Spread, ...]
    terminating: bool = False

    @classmethod
    def of(cls, pod: Obj) -> PodFacts:
        """Raises QuantityError when a request does not parse."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        namespace = meta.get("namespace") or "default"
        affinity = spec.get("affinity") or {}
        required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        ports = frozenset((p.get("protocol") or "TCP", p.get("hostIP") or "0.0.0.0", int(p["hostPort"]))
                          for c in spec.get("containers") or [] for p in c.get("ports") or [] if p.get("hostPort"))
        spread = tuple(Spread(int(c.get("maxSkew", 1)), c.get("topologyKey", ""), c.get("labelSelector"), int(c.get("minDomains") or 1))
                       for c in spec.get("topologySpreadConstraints") or []
                       if (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule")
        return cls(
            name=meta.get("name", ""), namespace=namespace, labels=dict(meta.get("labels") or {}), node_name=spec.get("nodeName") or "",
            requests=pod_requests(spec), ports=ports, tolerations=tuple(spec.get("tolerations") or ()),
            node_selector=dict(spec.get("nodeSelector") or {}),
            node_terms=None if required is None else tuple(required.get("nodeSelectorTerms") or ()),
            affinity=tuple(AffinityTerm.parse(t, namespace) for t in _required(affinity, "podAffinity")),
            anti_affinity=tuple(AffinityTerm.parse(t, namespace) for t in _required(affinity, "podAntiAffinity")),
            spread=spread, terminating=bool(meta.get("deletionTimestamp")))


def equivalence_key(pod: Obj) -> str:
    """Everything about a pending pod that decides where it fits: pods with the same key fit the same
    nodes, so one evaluation answers for all of them."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return json.dumps([spec.get(k) for k in ("containers", "initContainers", "overhead", "nodeSelector", "affinity", "tolerations",
                                             "topologySpreadConstraints", "priority", "nodeName")]
                      + [meta.get("labels"), meta.get("namespace")], sort_keys=True, separators=(",", ":"))


# --- the node, with what is placed on it -----------------------------------------------------------------
@dataclasses.dataclass
class NodeState:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Obj, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    requested: dict[str, int] = dataclasses.field(default_factory=dict)
    pods: list[PodFacts] = dataclasses.field(default_factory=list)
    ports: set[tuple[str, str, int]] = dataclasses.field(default_factory=set)

    @classmethod
    def of(cls, node: Obj) -> NodeState:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        taints = tuple(spec.get("taints") or ())
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if not ready and not any(t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == "NoSchedule" for t in taints):
            taints += (NOT_READY_TAINT,)
        try:
            allocatable = amounts(status.get("allocatable"))
        except QuantityError:
            allocatable = {}
        return cls(meta.get("name", ""), dict(meta.get("labels") or {}), taints, bool(spec.get("unschedulable")), allocatable)

    def add(self, pod: PodFacts) -> None:
        for name, value in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) + value
        self.pods.append(pod)
        self.ports |= pod.ports


def _ports_conflict(want: frozenset[tuple[str, str, int]], used: set[tuple[str, str, int]]) -> bool:
    """Same protocol and port, and the same host IP or either one the wildcard."""
    return any(p == q and port == used_port and (ip == used_ip or "0.0.0.0" in (ip, used_ip))
               for p, ip, port in want for q, used_ip, used_port in used)


# --- the filters ------------------------------------------------------------------------------------
def static_reasons(pod: PodFacts, node: NodeState) -> list[str]:
    """NodeName, NodeUnschedulable, TaintToleration and NodeAffinity: what depends on the node alone."""
    if pod.node_name and pod.node_name != node.name:
        return [NODE_NAME]
    if node.unschedulable and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations):
        return [UNSCHEDULABLE]
    taint = untolerated_taint(list(pod.tolerations), node.taints)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"]
    if not node_affinity_matches(pod, node):
        return [AFFINITY]
    return []


def node_affinity_matches(pod: PodFacts, node: NodeState) -> bool:
    """nodeSelector AND (any of the required nodeSelectorTerms)."""
    return selects_node(pod.node_selector, pod.node_terms, node)


def selects_node(node_selector: Mapping[str, str], node_terms: Iterable[Obj] | None, node: NodeState) -> bool:
    """A pod's nodeSelector (every label equal) AND its required nodeSelectorTerms (any one of them; None: no
    required node affinity)."""
    if any(node.labels.get(k) != v for k, v in node_selector.items()):
        return False
    return node_terms is None or any(node_selector_term_matches(t, node.name, node.labels) for t in node_terms)


def resource_reasons(pod: PodFacts, node: NodeState) -> list[str]:
    """NodeResourcesFit (every shortfall is a reason, as kube-scheduler lists them) and NodePorts."""
    out = []
    if len(node.pods) + 1 > node.allocatable.get("pods", 0) // 1000:
        out.append(TOO_MANY_PODS)
    for name, value in pod.requests.items():
        if name == "pods":
            continue
        if value > node.allocatable.get(name, 0) - node.requested.get(name, 0):
            out.append(f"Insufficient {name}")
    if pod.ports and _ports_conflict(pod.ports, node.ports):
        out.append(PORTS)
    return out


# --- the DaemonSet controller --------------------------------------------------------------------------
# What the DaemonSet controller adds to every daemon pod (AddOrUpdateDaemonPodTolerations): it survives a node
# going not-ready or unreachable, and the node-condition taints (TaintNodesByCondition) never keep it off.
DAEMON_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION: Obj = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}


def daemon_pod_tolerations(spec: Obj) -> list[dict[str, Any]]:
    """A daemon pod's tolerations: its template's, then each default the template does not already have
    (a template's own toleration with the same key, operator and effect stands in for the default)."""
    own = [dict(t) for t in spec.get("tolerations") or []]
    defaults = [*DAEMON_TOLERATIONS, *((HOST_NETWORK_TOLERATION,) if spec.get("hostNetwork") else ())]
    have = {(t.get("key"), t.get("operator") or "Equal", t.get("effect")) for t in own}
    return own + [dict(t) for t in defaults if (t["key"], t["operator"], t["effect"]) not in have]


@dataclasses.dataclass(frozen=True)
class DaemonPlacement:
    should_run: bool            # a daemon pod belongs on the node: create one when it has none
    should_continue: bool       # a daemon pod already there may stay


def daemon_placement(spec: Obj, node: NodeState) -> DaemonPlacement:
    """The DaemonSet controller's NodeShouldRunDaemonPod for a pod template's spec: the node name and the node
    affinity/selector must match, or the node gets no daemon pod and loses the one it has. A taint the daemon pod
    does not tolerate (the defaults included) keeps a new one off, but only a NoExecute one evicts a running one.
    Unlike kube-scheduler, it never looks at resources, ports or spec.unschedulable."""
    if spec.get("nodeName") and spec["nodeName"] != node.name:
        return DaemonPlacement(False, False)
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = None if required is None else tuple(required.get("nodeSelectorTerms") or ())
    if not selects_node(spec.get("nodeSelector") or {}, terms, node):
        return DaemonPlacement(False, False)
    tolerations = daemon_pod_tolerations(spec)
    if untolerated_taint(tolerations, node.taints) is None:
        return DaemonPlacement(True, True)
    evicting = untolerated_taint(tolerations, (t for t in node.taints if t.get("effect") == "NoExecute"))
    return DaemonPlacement(False, evicting is None)


class Cluster:
    """The nodes of one scheduling pass and the pods placed on them, for the filters that look across nodes.
    What those filters count is kept up to date as pods are placed, so a pass does not recount per node."""

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self._version = 0                                                  # bumped by every placement
        self._anti: list[tuple[NodeState, AffinityTerm]] = []             # placed pods' required anti-affinity terms
        self._domains: dict[AffinityTerm, set[str]] = {}
        self._spread: dict[tuple[int, int], tuple[int, dict[str, int]]] = {}

    def place(self, node_name: str, pod: PodFacts) -> None:
        node = self.nodes.get(node_name)
        if node is None:
            return
        node.add(pod)
        self._version += 1
        self._anti += [(node, t) for t in pod.anti_affinity]
        for term, domains in self._domains.items():
            if term.topology_key in node.labels and term.matches(pod):
                domains.add(node.labels[term.topology_key])

    def _placed(self) -> Iterable[tuple[NodeState, PodFacts]]:
        return ((n, p) for n in self.nodes.values() for p in n.pods)

    def _domains_with(self, term: AffinityTerm) -> set[str]:
        """Topology values (of `term.topology_key`) of nodes running a pod `term` matches."""
        if term not in self._domains:
            self._domains[term] = {n.labels[term.topology_key] for n, p in self._placed()
                                   if term.topology_key in n.labels and term.matches(p)}
        return self._domains[term]

    def inter_pod_reasons(self, pod: PodFacts, node: NodeState) -> list[str]:
        """InterPodAffinity: the pod's required affinity and anti-affinity, and existing pods' anti-affinity
        towards it (symmetry)."""
        if pod.affinity:
            domains = [self._domains_with(t) for t in pod.affinity]
            first_of_its_kind = not any(domains) and all(t.matches(pod) for t in pod.affinity)
            if not first_of_its_kind and not all(t.topology_key in node.labels and node.labels[t.topology_key] in d
                                                  for t, d in zip(pod.affinity, domains)):
                return [POD_AFFINITY]
        for term in pod.anti_affinity:
            if term.topology_key in node.labels and node.labels[term.topology_key] in self._domains_with(term):
                return [POD_ANTI_AFFINITY]
        for other_node, term in self._anti:
            key = term.topology_key
            if key in node.labels and other_node.labels.get(key) == node.labels[key] and term.matches(pod):
                return [EXISTING_ANTI_AFFINITY]
        return []

    def _spread_counts(self, pod: PodFacts, index: int) -> dict[str, int]:
        """Matching pods per eligible domain for constraint `index` of `pod`, counted once per placement."""
        cached = self._spread.get((id(pod), index))
        if cached is not None and cached[0] == self._version:
            return cached[1]
        c = pod.spread[index]
        counts: dict[str, int] = {}
        for n in self.nodes.values():
            if all(s.topology_key in n.labels for s in pod.spread) and node_affinity_matches(pod, n):
                counts.setdefault(n.labels[c.topology_key], 0)
        for n, p in self._placed():
            if c.topology_key in n.labels and not p.terminating and p.namespace == pod.namespace \
                    and selector_matches(c.selector, p.labels):
                domain = n.labels[c.topology_key]
                if domain in counts:
                    counts[domain] += 1
        self._spread[(id(pod), index)] = (self._version, counts)
        return counts

    def spread_reasons(self, pod: PodFacts, node: NodeState) -> list[str]:
        """PodTopologySpread, DoNotSchedule constraints: the node needs the topology label, and placing the pod
        there keeps (count in its domain + 1) - (fewest in any eligible domain) within maxSkew. Eligible domains
        are those of nodes the pod's node affinity allows; with fewer than minDomains of them the fewest is 0."""
        for c in pod.spread:
            if c.topology_key not in node.labels:
                return [SPREAD_LABEL]
        for i, c in enumerate(pod.spread):
            counts = self._spread_counts(pod, i)
            fewest = min(counts.values(), default=0) if len(counts) >= c.min_domains else 0
            self_match = 1 if selector_matches(c.selector, pod.labels) else 0
            if counts.get(node.labels[c.topology_key], 0) + self_match - fewest > c.max_skew:
                return [SPREAD]
        return []

    def reasons(self, pod: PodFacts, node: NodeState, *, static: list[str] | None = None) -> list[str]:
        """Why `pod` does not fit `node` (empty: it fits), running the filters in kube-scheduler's order and
        stopping at the first that fails. `static` is `static_reasons(pod, node)` when already known."""
        return (static if static is not None else static_reasons(pod, node)) or resource_reasons(pod, node) \
            or self.spread_reasons(pod, node) or self.inter_pod_reasons(pod, node)


def unschedulable_message(total: int, reasons: collections.Counter[str]) -> str:
    """kube-scheduler's FailedScheduling message: `0/3 nodes are available: 1 Insufficient cpu, 2 node(s) ...`."""
    if not reasons:
        return f"0/{total} nodes are available."
    parts = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda kv: kv[0]))
    return f"0/{total} nodes are available: {parts}."
