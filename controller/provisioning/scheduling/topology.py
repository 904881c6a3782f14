"""Topology: counts of matching pods per domain, for spreads and pod (anti-)affinity.

A group is one topology spread constraint or (anti-)affinity term, shared by
every pod that declares the same one. Groups count the pods their selector
matches in each domain (zone, hostname, capacity type, any label); anti-affinity
groups also count where the pods that own the term are, so a pod the term
selects keeps away from them (the inverse direction kube-scheduler enforces).
`domain_for` answers, for one pod on one node, the single domain per key the
node must take, or why none will do. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

from karpy.apis.labels import HOSTNAME
from karpy.apis.requirements import Requirements
from karpy.apis.selectors import LabelSelector
from karpy.controller.provisioning.scheduling.pods import AffinityTerm, PodInfo, SpreadConstraint, in_namespaces
from karpy.controller.provisioning.scheduling.reasons import Reason, Why

SPREAD, AFFINITY, ANTI = "spread", "affinity", "anti-affinity"


@dataclasses.dataclass(eq=False)
class Group:
    kind: str
    key: str
    selector: LabelSelector
    namespaces: frozenset[str]
    max_skew: int = 0
    node_filter: Requirements | None = None        # spreads count only nodes the spreading pod could use
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    owners: dict[str, int] = dataclasses.field(default_factory=dict)
    eligible: set[str] = dataclasses.field(default_factory=set)  # spread domains the minimum is taken over
    # how many times a domain that turned pods away may have come to take them: an affinity's first pod in a
    # domain, a spread's minimum rising, a new domain; between two such changes a node this group turns away
    # stays turned away (counts only grow)
    widened: int = 0

    def selects(self, pod: PodInfo) -> bool:
        return in_namespaces(self.namespaces, pod.namespace) and self.selector.matches(pod.labels)

    def describe(self) -> str:
        if self.kind == SPREAD:
            return f"topology spread {self.key} maxSkew={self.max_skew} ({self.selector})"
        return f"pod {self.kind} {self.key} ({self.selector})"


class Topology:
    def __init__(self, domains: Mapping[str, Iterable[str]]) -> None:
        self.domains: dict[str, set[str]] = {k: set(v) for k, v in domains.items()}
        self._groups: dict[tuple[object, ...], Group] = {}
        self._by_pod: dict[int, tuple[PodInfo, list[Group]]] = {}
        # the groups that select pods of one namespace and labels, while the groups are the same
        self._selecting: dict[tuple[str, frozenset[tuple[str, str]]], list[Group]] = {}
        self._selecting_pod: dict[int, tuple[PodInfo, list[Group]]] = {}     # the same, by pod
        self._keys: list[str] | None = None
        # per pod, what record() counted for it (group, domain, and whether as an owner): forget() takes it back
        self._counted: dict[int, tuple[PodInfo, list[tuple[Group, str, bool]]]] = {}

    # --- building -------------------------------------------------------------
    def add_domain(self, key: str, value: str) -> None:
        known = self.domains.setdefault(key, set())
        if value in known:
            return
        known.add(value)
        for g in self._groups.values():
            if g.kind == SPREAD and g.key == key and self._eligible(g, value):
                g.eligible.add(value)
            if g.key == key and key != HOSTNAME:         # a node's hostname domain is its own: no other node widens
                g.widened += 1

    def _eligible(self, g: Group, domain: str) -> bool:
        return g.node_filter is None or g.key not in g.node_filter or g.node_filter[g.key].has(domain)

    def _group(self, kind: str, key: str, selector: LabelSelector, namespaces: frozenset[str],
               max_skew: int = 0, node_filter: Requirements | None = None) -> Group:
        filter_key = str(node_filter) if node_filter is not None else None
        ident = (kind, key, selector, namespaces, max_skew, filter_key)
        group = self._groups.get(ident)
        if group is None:
            group = self._groups[ident] = Group(kind, key, selector, namespaces, max_skew, node_filter)
            if kind == SPREAD:
                group.eligible = {d for d in self.domains.get(key, ()) if self._eligible(group, d)}
            self._selecting.clear()
            self._selecting_pod.clear()
            self._keys = None
        return group

    def _groups_selecting(self, pod: PodInfo) -> list[Group]:
        held = self._selecting_pod.get(id(pod))
        if held is not None and held[0] is pod:          # the record held, so its id is not another's
            return held[1]
        ident = (pod.namespace, frozenset(pod.labels.items()))
        found = self._selecting.get(ident)
        if found is None:
            found = self._selecting[ident] = [g for g in self._groups.values() if g.selects(pod)]
        self._selecting_pod[id(pod)] = (pod, found)
        return found

    def widenings(self, pod: PodInfo) -> int:
        """How many times the groups constraining `pod` have widened (see Group.widened): while this stays the
        same, a node that turned `pod` away for its topology turns it away again. Another's anti-affinity
        selecting `pod` only ever narrows."""
        return sum(g.widened for g in self.groups_of(pod))

    def groups_of(self, pod: PodInfo) -> list[Group]:
        """The groups constraining `pod` through its own constraints in force."""
        if not pod.spreads and not pod.affinities:
            return []                                   # most pods: nothing to remember
        cached = self._by_pod.get(id(pod))
        if cached is not None and cached[0] is pod:     # the record held, so its id is not another's
            return cached[1]
        out = []
        for s in pod.spreads:
            out.append(self._spread_group(pod, s))
        for t in pod.affinities:
            out.append(self._affinity_group(t))
        self._by_pod[id(pod)] = (pod, out)
        return out

    def _spread_group(self, pod: PodInfo, s: SpreadConstraint) -> Group:
        return self._group(SPREAD, s.key, s.selector, frozenset({s.namespace}), s.max_skew, pod.strict_requirements)

    def _affinity_group(self, t: AffinityTerm) -> Group:
        return self._group(ANTI if t.anti else AFFINITY, t.key, t.selector, t.namespaces)

    def register(self, pod: PodInfo) -> None:
        """Create the groups `pod` declares, so placements are counted from now on."""
        self.groups_of(pod)

    # --- counting ---------------------------------------------------------------
    def record(self, pod: PodInfo, domains: Mapping[str, str], requirements: Requirements | None = None) -> None:
        """Count `pod`, placed on a node whose domain per key is `domains`.

        A new node's `requirements` say which domains it may still take where `domains` names none (its
        zone is chosen at launch). As Karpenter, anti-affinity counts the pod in every one of them, so no
        pod it keeps away lands where it may turn out to be; spreads and affinity count only a known domain."""
        held = self._counted.get(id(pod))            # (holding the pod keeps its id its own)
        counted = held[1] if held is not None else []
        for g in self._groups_selecting(pod):
            for domain in self._recorded_domains(g, domains, requirements):
                before = g.counts.get(domain, 0)
                lowest = self._minimum(g) if g.kind == SPREAD and domain in g.eligible else None
                g.counts[domain] = before + 1
                counted.append((g, domain, False))
                if (g.kind == AFFINITY and not before) or (before == lowest and self._minimum(g) > lowest):
                    g.widened += 1
        for t in pod.affinities:
            if t.anti and not t.weight:
                g = self._affinity_group(t)
                for domain in self._recorded_domains(g, domains, requirements):
                    g.owners[domain] = g.owners.get(domain, 0) + 1
                    counted.append((g, domain, True))
        if counted and held is None:
            self._counted[id(pod)] = (pod, counted)

    def forget(self, pod: PodInfo) -> None:
        """Take back whatever record() counted for `pod` (it is to be counted where it has moved). A group it
        leaves may now take pods it turned away: it widens."""
        held = self._counted.pop(id(pod), None)
        for g, domain, as_owner in held[1] if held is not None else []:
            tally = g.owners if as_owner else g.counts
            tally[domain] -= 1
            if not tally[domain]:
                del tally[domain]
            g.widened += 1

    def _recorded_domains(self, g: Group, domains: Mapping[str, str], requirements: Requirements | None) -> list[str]:
        domain = domains.get(g.key)
        if domain is not None:
            return [domain]
        if g.kind != ANTI or requirements is None:
            return []
        requirement = requirements.get(g.key)
        return sorted(d for d in self.domains.get(g.key, ()) if requirement is None or requirement.has(d))

    def selecting(self, pod: PodInfo) -> list[tuple[str, str]]:
        """(kind, key) of every group whose counts `pod` joins where it lands: moving it moves them."""
        return sorted({(g.kind, g.key) for g in self._groups_selecting(pod)})

    # --- deciding ---------------------------------------------------------------
    def keys(self) -> list[str]:
        """The keys other than hostname that any group reads."""
        if self._keys is None:
            self._keys = sorted({g.key for g in self._groups.values() if g.key != HOSTNAME})
        return self._keys

    def keys_of(self, pod: PodInfo) -> list[str]:
        """The keys other than hostname that `pod`'s own spreads and affinities read."""
        return sorted({g.key for g in self.groups_of(pod) if g.key != HOSTNAME})

    def admitted(self, pod: PodInfo, key: str, domains: Sequence[str]) -> set[str]:
        """The `domains` that `pod`'s own spreads and affinities over `key` let it into as the counts stand: a node
        whose `key` is another turns the pod away (and one whose `key` is one of them may, for other reasons)."""
        admitted = set(domains)
        for g in self.groups_of(pod):
            if g.key == key:
                admitted.intersection_update(self._allowed(g, pod, list(domains), owned=False))
        return admitted

    def domain_for(self, pod: PodInfo, node_requirements: Requirements, *, hostname: str | None,
                   existing_labels: Mapping[str, str] | None,
                   narrowed: dict[str, list[str]] | None = None, own: bool = True) -> tuple[dict[str, str] | None, Reason | None]:
        """The domain per topology key the node must take for `pod`, or (None, why not).

        `existing_labels` fixes every domain of an existing node; a new node has
        `hostname` as its own hostname domain and takes other domains from its
        requirements. Anti-affinity (the pod's own, or another's that selects it) does
        not choose one domain of a new node, as Karpenter: it narrows the node to every
        domain still free, given in `narrowed` (when asked for); the node's domain is
        chosen at launch. With `own` False only others' anti-affinity is asked, not the
        pod's own spreads and affinities (a pod that moves keeps the domains they chose)."""
        chosen: dict[str, str] = {}
        open_: dict[str, list[str]] = {}
        inverse = [g for g in self._groups_selecting(pod) if g.kind == ANTI and g.owners]
        for g in (self.groups_of(pod) if own else []) + inverse:
            candidates = self._candidates(g.key, chosen, node_requirements, hostname, existing_labels, open_)
            if not candidates:
                return None, Reason(Why.TOPOLOGY, f"no {g.key} domain for {g.describe()}")
            allowed = self._allowed(g, pod, candidates, owned=g in inverse)
            if not allowed:
                return None, Reason(Why.TOPOLOGY, f"{g.describe()} not satisfiable on {g.key} {', '.join(sorted(candidates)[:5])}")
            if narrowed is not None and g.kind == ANTI and len(allowed) > 1:
                open_[g.key] = allowed
            else:
                chosen[g.key] = min(allowed, key=lambda d: (g.counts.get(d, 0), d))
        if narrowed is not None:
            narrowed.update((k, v) for k, v in open_.items() if k not in chosen)
        return chosen, None

    def _candidates(self, key: str, chosen: Mapping[str, str], reqs: Requirements, hostname: str | None,
                    existing: Mapping[str, str] | None, open_: Mapping[str, list[str]]) -> list[str]:
        if key in chosen:
            return [chosen[key]]
        if key in open_:
            return open_[key]
        if existing is not None:
            return [existing[key]] if key in existing else []
        if key == HOSTNAME:
            return [hostname] if hostname else []
        requirement = reqs.get(key)
        if requirement is not None and not requirement.complement:
            return sorted(requirement.values)
        universe = self.domains.get(key, set())
        return sorted(d for d in universe if requirement is None or requirement.has(d))

    @staticmethod
    def _minimum(g: Group) -> int:
        """A spread's least count over its eligible domains."""
        if g.key == HOSTNAME:
            return 0                                    # a new node is always an empty hostname domain
        return min((g.counts.get(d, 0) for d in g.eligible), default=0)

    def _allowed(self, g: Group, pod: PodInfo, candidates: list[str], *, owned: bool) -> list[str]:
        if owned:                                       # pod is selected by someone's anti-affinity
            return [d for d in candidates if not g.owners.get(d)]
        if g.kind == ANTI:
            return [d for d in candidates if not g.counts.get(d)]
        if g.kind == AFFINITY:
            if any(g.counts.values()):
                return [d for d in candidates if g.counts.get(d)]
            return candidates if g.selects(pod) else []
        self_count = 1 if g.selects(pod) else 0
        minimum = self._minimum(g)
        return [d for d in candidates if g.counts.get(d, 0) + self_count - minimum <= g.max_skew]
