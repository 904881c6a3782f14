"""What the extender decides, from facts about nodes: which nodes a pod may use, and how much it should want each.

Every constraint the extender can see is judged, as kube-scheduler's own
filters judge it: the pod's nodeSelector and required node affinity, the
node's NoSchedule/NoExecute taints and `spec.unschedulable`, and resource
fit (allocatable minus the requests of the pods bound there, when the
extender watches the cluster). karpy also knows which nodes it is about to
remove (expiry due within the horizon, emptiness within seconds, or
draining), which capacity on a launching node it promised to the pods it
launched that node for, and where consolidation means the pods it drains to
land (apis/moving_in.py): a node waiting for an owner's pods scores first for
them, so kube-scheduler carries out the plan instead of spreading them by its
own scores. A node that fails here fails with a reason kube-scheduler shows;
a pod no node is left for is a capacity gap at once. Pure: no I/O, no clock.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from typing import Any, Mapping

from karpy.apis import labels as wk
from karpy.apis import moving_in
from karpy.apis.pods import object_key, pod_requests
from karpy.apis.requirements import Requirements
from karpy.apis.resources import CPU, MEMORY, Resources, share
from karpy.apis.selectors import Taint, tolerates
from karpy.apis.timestamps import parse_time
from karpy.controller.inflight import is_leaving, launched_for
from karpy.controller.node.expiration import seconds_left

REMOVAL_HORIZON_SECONDS = 30.0               # a node due for removal this soon takes no new pods
# An empty node that gets a pod is empty no more: emptiness drops its mark on its next pass (every 5 s),
# so only its last seconds are a race; failing it for longer would launch nodes while empty ones wait.
EMPTINESS_HORIZON_SECONDS = 5.0
NEAR_EXPIRY_SECONDS = 3600.0                 # nodes expiring within this (or the last tenth of their life) score last

# failure kinds, as kube-scheduler's summary counts them ("2 node(s) are being removed by karpy")
REMOVING = "node(s) are being removed by karpy"
PROMISED = "node(s) have their free capacity promised to pods karpy launched them for"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_NONE: Mapping[str, int] = {}


@dataclasses.dataclass(frozen=True)
class Lifetimes:
    """A provisioner's TTLs (seconds, or None when unset)."""

    after_empty: float | None = None
    until_expired: float | None = None


@dataclasses.dataclass(slots=True)
class NodeFacts:          # built per node per call: a frozen dataclass would pay a setattr call per field
    name: str
    removal: str | None = None                 # why karpy is removing it (or will within the horizon)
    allocatable: Resources | None = None       # None: not known (a name only, and no cluster)
    used: Resources | None = None              # requests of the pods bound to it; None: not known
    promised: Mapping[str, Resources] = dataclasses.field(default_factory=dict)   # pod -> requests, not bound yet
    near_expiry: bool = False
    labels: Mapping[str, str] | None = None    # None: not known
    taints: tuple[Taint, ...] = ()             # the NoSchedule and NoExecute ones
    unschedulable: bool = False
    awaits: frozenset[str] = frozenset()       # owners (uids) consolidation is moving pods of to this node


@dataclasses.dataclass(frozen=True)
class PodNeeds:
    """What a pod asks of a node, read once per call."""

    key: str                                   # "namespace/name"
    requests: Resources = dataclasses.field(default_factory=Resources)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    affinity_terms: tuple[Requirements, ...] = ()   # required node affinity: any one term must hold; () = no constraint
    owner: str | None = None                   # the uid of its controller, which recreates it when it is evicted

    def selects(self, name: str, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        if not self.affinity_terms:
            return True
        with_name = {**labels, _NAME_FIELD: name}
        return any(term.allows_labels(with_name) for term in self.affinity_terms)


_NAME_FIELD = "metadata.name"         # matchFields' one key, judged as if it were a label


def needs_of(pod: Mapping[str, Any]) -> PodNeeds:
    """Raises QuantityError (a request that does not parse) or ValueError (an affinity term that does not)."""
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = []
    for term in (required or {}).get("nodeSelectorTerms") or []:
        term = term or {}
        if not term.get("matchExpressions") and not term.get("matchFields"):
            continue                   # an empty term matches no node; kube-scheduler skips it among others
        terms.append(Requirements.from_node_selector_requirements(
            [*(term.get("matchExpressions") or []), *(term.get("matchFields") or [])]))
    if required is not None and (required.get("nodeSelectorTerms") or []) and not terms:
        terms.append(Requirements.from_node_selector_requirements([{"key": _NAME_FIELD, "operator": "In", "values": []}]))
    return PodNeeds(key=object_key(pod), requests=pod_requests(spec),
                    tolerations=tuple(t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)),
                    node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
                    affinity_terms=tuple(terms), owner=moving_in.owner_of(pod))


def blocking_taints(raw: Any) -> tuple[Taint, ...]:
    """The NoSchedule and NoExecute taints of a Node's `spec.taints`."""
    return tuple(Taint.parse(t) for t in raw or [] if isinstance(t, Mapping) and t.get("effect") in _BLOCKING_EFFECTS)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeShape:
    """What a Node object says that the decisions read, computed once per version of the Node (by the watch,
    or once per distinct Node a request carries) so that a call pays only for what depends on the moment."""

    name: str
    labels: Mapping[str, str]
    allocatable: Resources | None
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ours: bool = False                        # labelled with a karpy provisioner
    provisioner: str | None = None
    deleting: bool = False
    created: dt.datetime | None = None
    empty_since: dt.datetime | None = None
    launched_for: tuple[str, ...] = ()       # the pods karpy launched it for and has not bound yet ("ns/name")
    moving_in: moving_in.MovingIn | None = None


def shape_of(node: Mapping[str, Any]) -> NodeShape:
    """Raises QuantityError when an allocatable amount does not parse."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec, status = node.get("spec") or {}, node.get("status")
    provisioner = wk.pool_of(labels)
    return NodeShape(
        name=meta.get("name", ""), labels=labels,
        allocatable=Resources.parse(status.get("allocatable")) if status else None,
        taints=blocking_taints(spec.get("taints")), unschedulable=bool(spec.get("unschedulable")),
        ours=provisioner is not None, provisioner=provisioner, deleting=is_leaving(node),
        created=parse_time(meta.get("creationTimestamp")), empty_since=parse_time(annotations.get(wk.EMPTINESS_TIMESTAMP)),
        launched_for=launched_for(node),            # an older karpy's; the NodeClaims' (view.py) replace it
        moving_in=moving_in.parse(annotations.get(wk.MOVING_IN)),
    )


def facts_of(node: Mapping[str, Any] | NodeShape, *, used: Resources | None, pending: Mapping[str, Resources],
             lifetimes: Lifetimes | None, now: dt.datetime, horizon: float = REMOVAL_HORIZON_SECONDS,
             held: Mapping[str, int] | None = None) -> NodeFacts:
    """Facts about one Node (its object, or its shape). `pending` holds the requests of unbound pods by "ns/name"
    (those karpy launched this node for count as promised); `lifetimes` are its provisioner's TTLs, if known;
    `held` counts the pods bound to it by owner (uid), against which consolidation's moves are weighed."""
    shape = node if isinstance(node, NodeShape) else shape_of(node)
    awaits = shape.moving_in.open_to(held or {}, now) if shape.moving_in is not None else frozenset()
    if not (shape.deleting or shape.ours or shape.launched_for):     # most nodes: nothing depends on the moment
        return NodeFacts(shape.name, None, shape.allocatable, used, {}, False, shape.labels, shape.taints,
                         shape.unschedulable, awaits)
    removal = None
    expires_in = None
    if shape.deleting:
        removal = "node is being deleted (cordoned and draining)"
    elif shape.ours and lifetimes is not None:
        expires_in = seconds_left(ttl=lifetimes.until_expired, created=shape.created, now=now)
        empty_left = seconds_left(ttl=lifetimes.after_empty, created=shape.empty_since, now=now)
        if expires_in is not None and expires_in <= horizon:
            removal = f"node expires in {max(expires_in, 0):.0f}s (ttlSecondsUntilExpired) and karpy removes it"
        elif empty_left is not None and empty_left <= min(horizon, EMPTINESS_HORIZON_SECONDS):
            removal = f"node is empty and karpy removes it in {max(empty_left, 0):.0f}s (ttlSecondsAfterEmpty)"
    # one lookup per key: `pending` may be the watch's live index, changing between a test and a read
    promised = {k: r for k in shape.launched_for if (r := pending.get(k)) is not None} if shape.launched_for else {}
    near_expiry = expires_in is not None and lifetimes is not None and lifetimes.until_expired is not None and \
        expires_in <= min(NEAR_EXPIRY_SECONDS, lifetimes.until_expired / 10)
    return NodeFacts(name=shape.name, removal=removal, allocatable=shape.allocatable, used=used,
                     promised=promised, near_expiry=near_expiry,
                     labels=shape.labels, taints=shape.taints, unschedulable=shape.unschedulable, awaits=awaits)


_FOR_GOOD = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
_MARGIN = dt.timedelta(milliseconds=1)         # below the rounding of seconds_left's float arithmetic


def steady_until(shape: NodeShape, facts: NodeFacts, *, lifetimes: Lifetimes | None, now: dt.datetime,
                 horizon: float = REMOVAL_HORIZON_SECONDS) -> dt.datetime:
    """Until when `facts` (what `facts_of` said of `shape` at `now`) stay its answer, as long as the shape, the
    requests bound to the node and the provisioner's TTLs stay the same: the moment the node comes within a
    removal horizon or near its expiry. `now` itself when they may change sooner: a node launched for pods
    (its promises follow the pending pods), one waiting for moved pods until a deadline, or one whose removal
    message counts down the seconds."""
    if shape.launched_for or facts.awaits or (facts.removal is not None and not shape.deleting):
        return now
    if shape.deleting or not shape.ours or lifetimes is None:
        return _FOR_GOOD
    turns: list[tuple[dt.datetime, float]] = []
    if lifetimes.until_expired is not None and shape.created is not None:
        ttl = lifetimes.until_expired
        turns.append((shape.created, ttl - horizon))
        if not facts.near_expiry:
            turns.append((shape.created, ttl - min(NEAR_EXPIRY_SECONDS, ttl / 10)))
    if lifetimes.after_empty is not None and shape.empty_since is not None:
        turns.append((shape.empty_since, lifetimes.after_empty - min(horizon, EMPTINESS_HORIZON_SECONDS)))
    until = _FOR_GOOD
    for since, seconds in turns:
        try:
            turn = since + dt.timedelta(seconds=seconds) - _MARGIN
        except OverflowError:                  # a TTL past the calendar: that turn never comes
            continue
        if turn <= now:
            return now                         # already past it: let facts_of weigh it every time
        until = min(until, turn)
    return until


def filter_nodes(pod: PodNeeds, nodes: list[NodeFacts]) -> tuple[list[str], dict[str, str], collections.Counter[str]]:
    """The nodes `pod` may use, the others with their reasons, and the count of each kind of failure."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    kinds: collections.Counter[str] = collections.Counter()
    asks = [(r, amount) for r, amount in pod.requests.items() if amount > 0]
    selective = bool(pod.node_selector or pod.affinity_terms)
    for facts in nodes:
        # most nodes: nothing but resources to weigh, judged here as `_insufficient` would, without the calls
        if not (facts.removal or facts.unschedulable or facts.taints or facts.promised
                or (selective and facts.labels is not None)):
            allocatable, used = facts.allocatable, facts.used or _NONE
            if allocatable is None or all(amount <= allocatable.get(r, 0) - used.get(r, 0) for r, amount in asks):
                passed.append(facts.name)
                continue
        reasons = _why_not(pod, facts)
        if reasons:
            failed[facts.name] = "; ".join(message for _, message in reasons)
            for kind, _ in reasons:
                kinds[kind] += 1
        else:
            passed.append(facts.name)
    return passed, failed, kinds


def _why_not(pod: PodNeeds, facts: NodeFacts) -> list[tuple[str, str]]:
    """(kind, message) for each reason `pod` cannot go to this node; [] when it can."""
    if facts.removal:
        return [(REMOVING, facts.removal)]
    if facts.labels is not None and (pod.node_selector or pod.affinity_terms) and not pod.selects(facts.name, facts.labels):
        return [(SELECTOR, "node didn't match Pod's node affinity/selector")]
    if facts.unschedulable and not tolerates(pod.tolerations, UNSCHEDULABLE_TAINT):
        return [(UNSCHEDULABLE, "node is unschedulable (cordoned)")]
    for taint in facts.taints:
        if not tolerates(pod.tolerations, taint):
            kind = f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}" if taint.value else \
                f"node(s) had untolerated taint {{{taint.key}}}"
            return [(kind, f"node has taint {taint} the pod does not tolerate")]
    short = _insufficient(pod.requests, facts)
    if short:
        return [(f"Insufficient {r}", f"Insufficient {r}") for r in short]
    if not _fits_beside_promises(pod.key, pod.requests, facts):
        others = len([k for k in facts.promised if k != pod.key])
        return [(PROMISED, f"node's free capacity is promised to {others} pod(s) karpy launched it for")]
    return []


def _insufficient(requests: Resources, facts: NodeFacts) -> list[str]:
    """The resources the pod asks more of than the node has left (allocatable minus what bound pods request)."""
    allocatable = facts.allocatable
    if allocatable is None:
        return []
    used: Mapping[str, int] = facts.used or {}
    for r, amount in requests.items():
        if amount > 0 and amount > allocatable.get(r, 0) - used.get(r, 0):     # rare: only then list them all
            return [r for r, amount in requests.items() if amount > 0 and amount > allocatable.get(r, 0) - used.get(r, 0)]
    return []


def _fits_beside_promises(pod: str, requests: Resources, facts: NodeFacts) -> bool:
    if pod in facts.promised:
        return True                     # it is one of the pods this node was launched for
    others = [r for k, r in facts.promised.items() if k != pod]
    if not others or facts.allocatable is None or facts.used is None:
        return True                     # nothing promised, or nothing known to weigh it against
    free = facts.allocatable - facts.used
    for r in others:
        free = free - r
    return requests.fits_in(free)


def gap_reason(total: int, kinds: collections.Counter[str]) -> str:
    """kube-scheduler's way of saying why no node is left: "0/3 nodes are available: 3 node(s) are ..."."""
    detail = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    return f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."


def score_nodes(pod: PodNeeds, nodes: list[NodeFacts]) -> dict[str, int]:
    """0..10 per node: 10 for the node karpy launched for this pod; then tighter packing scores higher (1..9),
    so emptier nodes drain and go; nodes near expiry (or being removed) score 0. A pod whose owner
    consolidation moves pods of to some of the nodes: 10 for those, 0 for the others, which (weighted
    above kube-scheduler's own 0..100) puts it where the plan did."""
    if pod.owner is not None and any(pod.owner in f.awaits for f in nodes):
        return {f.name: 10 if pod.owner in f.awaits else 0 for f in nodes}
    scores: dict[str, int] = {}
    cpu, memory = pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)
    for facts in nodes:
        if facts.promised and pod.key in facts.promised:
            scores[facts.name] = 10
        elif facts.removal or facts.near_expiry:
            scores[facts.name] = 0
        elif facts.promised or facts.allocatable is None or facts.used is None:
            scores[facts.name] = 1 + round(8 * _fullness_after(pod.requests, facts))
        else:                           # most nodes: `_fullness_after` with nothing promised, without the calls
            allocatable, used = facts.allocatable, facts.used
            cpu_capacity, memory_capacity = allocatable.get(CPU, 0), allocatable.get(MEMORY, 0)
            total, count = 0.0, 0
            if cpu_capacity > 0:
                total += share(used.get(CPU, 0) + cpu, cpu_capacity)
                count += 1
            if memory_capacity > 0:
                total += share(used.get(MEMORY, 0) + memory, memory_capacity)
                count += 1
            scores[facts.name] = 1 + round(8 * (total / count if count else 0.5))
    return scores


def _fullness_after(requests: Resources, facts: NodeFacts) -> float:
    """Mean share of cpu and memory in use once the pod is placed (0.5 when not known)."""
    allocatable, used = facts.allocatable, facts.used
    if allocatable is None or used is None:
        return 0.5
    total, count = 0.0, 0
    for r in (CPU, MEMORY):
        capacity = allocatable.get(r, 0)
        if capacity > 0:          # exact: amounts past float's range cannot overflow
            after = used.get(r, 0) + requests.get(r, 0) + sum(p.get(r, 0) for p in facts.promised.values())
            total += share(after, capacity)
            count += 1
    return total / count if count else 0.5
