"""What the scheduler needs to know about a pod, read once from its manifest.

`PodInfo.parse` computes effective requests (init containers, overhead),
node requirements (nodeSelector, required and preferred node affinity),
tolerations, topology spread constraints, pod (anti-)affinity terms and
host ports. Soft constraints start out required; `relaxed()` gives the pod
with one of them dropped, in Karpenter's order, when it cannot be placed.
Pure, and immutable: the scheduler never changes a pod it is given.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Sequence

from karpy.apis.labels import normalize
from karpy.apis.pods import controller_of, owned_by_daemonset, pod_requests
from karpy.apis.quantity import QuantityError
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.resources import Resources
from karpy.apis.selectors import LabelSelector

ALL_NAMESPACES: frozenset[str] = frozenset({"*"})
# what PodInfo.parse reads of a pod's metadata, besides its deletionTimestamp (and its spec and status.phase)
READ_METADATA = ("uid", "name", "generateName", "namespace", "labels", "annotations", "ownerReferences")


class PodError(ValueError):
    """A pod manifest the scheduler cannot read; the message starts with the field path."""


@dataclasses.dataclass(frozen=True)
class SpreadConstraint:
    key: str
    max_skew: int
    selector: LabelSelector
    namespace: str
    required: bool                          # DoNotSchedule (ScheduleAnyway is relaxed away)


@dataclasses.dataclass(frozen=True)
class AffinityTerm:
    key: str
    selector: LabelSelector
    namespaces: frozenset[str]              # ALL_NAMESPACES for an empty namespaceSelector
    anti: bool
    weight: int = 0                         # 0: required; else the preferred term's weight


@dataclasses.dataclass(frozen=True, eq=False)
class PodInfo:
    """One pod as the scheduling core reads it: the one record of a pod from the pending index to its bind.

    Immutable: relaxing a soft constraint (`relaxed()`) or moving the pod (`copy()`) makes a new record,
    so whoever handed pods to the scheduler finds them as they were. `raw` is a reference to the cached
    object (for Events and errors), never a copy."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    requests: Resources
    node_selector: Mapping[str, str]
    required_terms: tuple[tuple[Mapping[str, Any], ...], ...]   # OR of node selector terms; the first is in force
    preferred_terms: tuple[tuple[int, tuple[Mapping[str, Any], ...]], ...]  # heaviest first; the first is in force
    tolerations: tuple[Mapping[str, Any], ...]
    spreads: tuple[SpreadConstraint, ...]
    affinities: tuple[AffinityTerm, ...]              # required and (still in force) preferred terms
    host_ports: frozenset[tuple[str, str, int]]
    node_name: str | None
    phase: str
    deleting: bool
    owner_kind: str | None
    owner_name: str | None
    priority: int
    raw: Mapping[str, Any] = dataclasses.field(repr=False)
    relaxations: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_daemon(self) -> bool:
        return owned_by_daemonset(self.raw)

    @functools.cached_property
    def requirements(self) -> Requirements:
        """nodeSelector ∩ the node selector term in force ∩ the heaviest preference in force (read, never changed)."""
        reqs = Requirements.from_labels(self.node_selector)
        if self.preferred_terms:
            for r in _expressions(self.preferred_terms[0][1]):
                reqs.add(r)
        if self.required_terms:
            for r in _expressions(self.required_terms[0]):
                reqs.add(r)
        return reqs

    @property
    def strict_requirements(self) -> Requirements:
        """nodeSelector ∩ the first required term, without preferences (for topology node filters)."""
        reqs = Requirements.from_labels(self.node_selector)
        if self.required_terms:
            for r in _expressions(self.required_terms[0]):
                reqs.add(r)
        return reqs

    def copy(self, **changes: Any) -> PodInfo:
        """The same pod with `changes` (a new record: this one stays as it is)."""
        return dataclasses.replace(self, **changes)

    def reread(self, raw: Mapping[str, Any]) -> PodInfo | None:
        """This record for `raw`, a newer version of the same pod's object, when its spec (but its nodeName) and the
        metadata `parse` reads are unchanged (it was bound, or its status changed): a copy that refers to `raw`,
        with its node, phase and deletion read again, far cheaper than parsing it. None when `raw` must be parsed.
        Only for records `parse` made, read against the same namespaces."""
        old, meta, old_meta = self.raw, raw.get("metadata") or {}, self.raw.get("metadata") or {}
        if old is raw:
            return self
        spec, old_spec = raw.get("spec") or {}, old.get("spec") or {}
        if self.relaxations or any(old_meta.get(f) != meta.get(f) for f in READ_METADATA):
            return None
        if spec != old_spec and (spec.get("nodeName") == old_spec.get("nodeName")
                                 or {**spec, "nodeName": None} != {**old_spec, "nodeName": None}):
            return None
        return self.copy(raw=raw, node_name=spec.get("nodeName") or None, deleting=bool(meta.get("deletionTimestamp")),
                         phase=str((raw.get("status") or {}).get("phase") or "Pending"))

    def relaxed(self) -> PodInfo | None:
        """The pod with one soft constraint dropped, in Karpenter v0.16's order (what was dropped is the last of
        its `relaxations`), or None when nothing is left to drop."""
        if len(self.required_terms) > 1:
            return self._dropping(
                "removing: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]",
                required_terms=self.required_terms[1:])
        for anti, name in ((False, "podAffinity"), (True, "podAntiAffinity")):
            preferred = [t for t in self.affinities if t.weight and t.anti == anti]
            if preferred:
                heaviest = max(preferred, key=lambda t: t.weight)
                at = self.affinities.index(heaviest)
                return self._dropping(
                    f"removing: spec.affinity.{name}.preferredDuringSchedulingIgnoredDuringExecution (weight {heaviest.weight})",
                    affinities=self.affinities[:at] + self.affinities[at + 1:])
        if self.preferred_terms:
            return self._dropping(
                f"removing: spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution "
                f"(weight {self.preferred_terms[0][0]})", preferred_terms=self.preferred_terms[1:])
        for at, spread in enumerate(self.spreads):
            if not spread.required:
                return self._dropping(f"removing: spec.topologySpreadConstraints (ScheduleAnyway, {spread.key})",
                                      spreads=self.spreads[:at] + self.spreads[at + 1:])
        if not any(t.get("effect") == "PreferNoSchedule" and t.get("operator") == "Exists" and not t.get("key")
                   for t in self.tolerations):
            return self._dropping("adding: toleration for PreferNoSchedule taints",
                                  tolerations=self.tolerations + ({"operator": "Exists", "effect": "PreferNoSchedule"},))
        return None

    def _dropping(self, what: str, **changes: Any) -> PodInfo:
        return dataclasses.replace(self, relaxations=self.relaxations + (what,), **changes)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, namespace_labels: Mapping[str, Mapping[str, str]] | None = None) -> PodInfo:
        """Read a Pod manifest. Raises PodError naming the offending field."""
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
            raise PodError("metadata and spec must be mappings")
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or meta.get("generateName") or "")
        if not name:
            raise PodError("metadata.name: missing required field")
        owner = controller_of(raw) or next(iter(meta.get("ownerReferences") or []), None)
        affinity = spec.get("affinity") or {}
        node_affinity = affinity.get("nodeAffinity") or {}
        required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
        preferred = sorted(
            ((int(p.get("weight", 1)), tuple((p.get("preference") or {}).get("matchExpressions") or []))
             for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []),
            key=lambda wp: -wp[0],
        )
        pod = cls(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            requests=_requests(spec),
            node_selector={normalize(str(k)): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            required_terms=tuple(tuple(t.get("matchExpressions") or []) for t in required),
            preferred_terms=tuple(preferred),
            tolerations=tuple(dict(t) for t in spec.get("tolerations") or []),
            spreads=_spreads(spec, namespace),
            affinities=_affinities(affinity, namespace, namespace_labels),
            host_ports=_host_ports(spec),
            node_name=spec.get("nodeName") or None,
            phase=str((raw.get("status") or {}).get("phase") or "Pending"),
            deleting=bool(meta.get("deletionTimestamp")),
            owner_kind=owner.get("kind") if owner else None,
            owner_name=owner.get("name") if owner else None,
            priority=int(spec.get("priority") or 0),
            raw=raw,
        )
        try:
            _ = pod.requirements
            for term in pod.required_terms:
                _expressions(term)
        except (ValueError, KeyError, TypeError) as e:
            raise PodError(f"spec.affinity.nodeAffinity: {e}") from None
        return pod


def _expressions(expressions: Sequence[Mapping[str, Any]]) -> list[Requirement]:
    return [Requirement.of(str(e["key"]), str(e["operator"]), [str(v) for v in e.get("values") or []]) for e in expressions]


def _requests(spec: Mapping[str, Any]) -> Resources:
    try:
        return pod_requests(spec)
    except QuantityError as e:
        raise PodError(str(e)) from None


def _spreads(spec: Mapping[str, Any], namespace: str) -> tuple[SpreadConstraint, ...]:
    out = []
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        try:
            out.append(SpreadConstraint(
                key=normalize(str(c["topologyKey"])),
                max_skew=int(c.get("maxSkew", 1)),
                selector=LabelSelector.parse(c.get("labelSelector") or {}),
                namespace=namespace,
                required=c.get("whenUnsatisfiable", "DoNotSchedule") != "ScheduleAnyway",
            ))
        except (KeyError, ValueError, TypeError) as e:
            raise PodError(f"spec.topologySpreadConstraints[{i}]: {e}") from None
    return tuple(out)


def _affinities(affinity: Mapping[str, Any], namespace: str,
                namespace_labels: Mapping[str, Mapping[str, str]] | None) -> tuple[AffinityTerm, ...]:
    out = []
    for field, anti in (("podAffinity", False), ("podAntiAffinity", True)):
        block = affinity.get(field) or {}
        for i, term in enumerate(block.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            out.append(_term(term, namespace, namespace_labels, anti=anti, weight=0, path=f"spec.affinity.{field}[{i}]"))
        for i, weighted in enumerate(block.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            out.append(_term(weighted.get("podAffinityTerm") or {}, namespace, namespace_labels, anti=anti,
                             weight=max(1, int(weighted.get("weight", 1))), path=f"spec.affinity.{field}.preferred[{i}]"))
    return tuple(out)


def _term(term: Mapping[str, Any], namespace: str, namespace_labels: Mapping[str, Mapping[str, str]] | None, *,
          anti: bool, weight: int, path: str) -> AffinityTerm:
    try:
        namespaces: frozenset[str] = frozenset(term.get("namespaces") or [])
        ns_selector = term.get("namespaceSelector")
        if ns_selector is not None:
            selector = LabelSelector.parse(ns_selector)
            if not selector.match_labels and not selector.match_expressions:
                namespaces = ALL_NAMESPACES
            else:
                namespaces |= {n for n, labels in (namespace_labels or {}).items() if selector.matches(labels)}
        elif not namespaces:
            namespaces = frozenset({namespace})
        return AffinityTerm(normalize(str(term["topologyKey"])), LabelSelector.parse(term.get("labelSelector")),
                            namespaces, anti, weight)
    except (KeyError, ValueError, TypeError) as e:
        raise PodError(f"{path}: {e}") from None


def _host_ports(spec: Mapping[str, Any]) -> frozenset[tuple[str, str, int]]:
    ports = set()
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                try:
                    port = int(p["hostPort"])
                except (TypeError, ValueError):
                    raise PodError(f"spec.containers[{c.get('name')}].ports: hostPort {p['hostPort']!r} is not a port") from None
                ports.add((str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), port))
    return frozenset(ports)


def host_ports_conflict(a: frozenset[tuple[str, str, int]], b: frozenset[tuple[str, str, int]]) -> tuple[str, str, int] | None:
    """A port of `a` that `b` already holds (0.0.0.0 conflicts with every address), or None."""
    for ip, proto, port in a:
        for ip2, proto2, port2 in b:
            if port == port2 and proto == proto2 and (ip == ip2 or "0.0.0.0" in (ip, ip2)):
                return ip, proto, port
    return None


def in_namespaces(namespaces: frozenset[str], namespace: str) -> bool:
    return namespaces is ALL_NAMESPACES or "*" in namespaces or namespace in namespaces

