"""Consolidation's packing state: the room each existing node has left, built once per snapshot.

Asking "would these pods fit on the other nodes?" for every candidate by
building a scheduler over the whole cluster costs ~100 ms a node at 1,000
nodes. Here the existing nodes' room is one matrix, built once from the
scheduler's own view of them (`Scheduler.existing`: allocatable minus bound
pods, labels, taints, in its order), and a pod is placed with the checks
`ExistingNode.add` makes: taints, node requirements, resources, first fit in
the scheduler's node order (or the order `prefer()` gives), largest pod first. Pods those checks do not
cover (topology spread, pod (anti-)affinity, host ports, preferences that
relax, unknown resources) are not `simple()`: the caller simulates them with
the full scheduler.

`spread()` places pods where kube-scheduler will once they are evicted and
created again: in the order they come, each on the node its default
resource score (NodeResourcesFit, LeastAllocated) ranks first, the one with
the most cpu and memory left. A plan whose pods kube-scheduler would leave
without room launches nodes for them instead of saving. Pure.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources
from karpy.apis.selectors import Taint, untolerated
from karpy.controller.provisioning.scheduling.nodes import ExistingNode, ResourceRows, covers
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import sort_key


class Packing:
    """The room left on every existing node; `fit()` tries, `move()` commits."""

    def __init__(self, existing: Sequence[ExistingNode], rows: ResourceRows) -> None:
        self.rows = rows
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self._labels: list[Mapping[str, str]] = []
        self._taints: list[Sequence[Taint]] = []
        self.free = np.zeros((max(len(existing), 1) * 2, len(rows.index)), dtype=np.int64)
        self.allocatable = np.zeros_like(self.free)              # what kube-scheduler scores room against
        self._scored = [rows.index[r] for r in ("cpu", "memory") if r in rows.index]
        self.gone = np.ones(len(self.free), dtype=bool)         # deleted, or a row not used yet
        self.rank = np.arange(len(self.free), dtype=np.int64)    # fit() fills the lowest rank first (`prefer`)
        self._kinds: dict[int, tuple[str, str]] = {}
        self._alive: list[PodInfo] = []
        self._allowed: dict[tuple[str, str], tuple[np.ndarray, list, Requirements]] = {}
        for n in existing:
            self.append(n.name, n.labels, n.taints, n.available, n.allocatable)

    def __len__(self) -> int:
        return len(self.names)

    def append(self, name: str, labels: Mapping[str, str], taints: Sequence[Taint], available: Resources,
               allocatable: Resources | None = None) -> None:
        """A node that joins the cluster (a replacement being launched): capacity for what follows."""
        i = len(self.names)
        if i == len(self.free):
            self.free = np.concatenate([self.free, np.zeros_like(self.free)])
            self.allocatable = np.concatenate([self.allocatable, np.zeros_like(self.allocatable)])
            self.gone = np.concatenate([self.gone, np.ones_like(self.gone)])
            self.rank = np.concatenate([self.rank, np.arange(len(self.rank), 2 * len(self.rank), dtype=np.int64)])
            self._allowed = {k: (np.concatenate([m, np.zeros_like(m)]), t, r) for k, (m, t, r) in self._allowed.items()}
        self.names.append(name)
        self.index[name] = i
        self._labels.append(dict(labels))
        self._taints.append(list(taints))
        self.free[i] = self.rows.row(available)
        self.allocatable[i] = self.rows.row(allocatable if allocatable is not None else available)
        self.gone[i] = False
        for mask, tolerations, reqs in self._allowed.values():
            mask[i] = not untolerated(tolerations, taints) and reqs.allows_labels(labels)

    def prefer(self, names: Sequence[str]) -> None:
        """Have `fit()` fill these nodes first, in this order, before the others in the scheduler's order:
        consolidation moves pods onto the nodes likely to stay, so they do not move twice."""
        for position, name in enumerate(names):
            if (i := self.index.get(name)) is not None:
                self.rank[i] = position - len(names)

    def remove(self, name: str) -> None:
        if (i := self.index.get(name)) is not None:
            self.gone[i] = True

    def simple(self, pod: PodInfo) -> bool:
        """True when `fit()` judges `pod` exactly as the scheduler would."""
        return not (pod.spreads or pod.affinities or pod.host_ports or pod.preferred_terms
                    or len(pod.required_terms) > 1 or self.rows.of(pod) is None)

    def _mask(self, pod: PodInfo) -> np.ndarray:
        """The nodes whose taints and labels admit `pod` (cached per requirements and tolerations)."""
        key = self._kinds.get(id(pod))
        if key is None:
            key = self._kinds[id(pod)] = (str(pod.requirements), repr(pod.tolerations))
            self._alive.append(pod)            # ids are only unique among live objects
        hit = self._allowed.get(key)
        if hit is None:
            reqs: Requirements = pod.requirements
            mask = np.zeros(len(self.free), dtype=bool)
            for i, (labels, taints) in enumerate(zip(self._labels, self._taints)):
                mask[i] = not untolerated(pod.tolerations, taints) and reqs.allows_labels(labels)
            hit = self._allowed[key] = (mask, list(pod.tolerations), reqs)
        return hit[0]

    def fit(self, pods: Iterable[PodInfo], without: Iterable[str] = ()) -> tuple[list[tuple[PodInfo, str]], list[PodInfo]]:
        """Where each of `pods` would go (largest first, each on the first node in the scheduler's
        order with room), the nodes in `without` excluded; and the pods that fit nowhere."""
        return self._place(sorted(pods, key=sort_key), without, least_allocated=False)

    def spread(self, pods: Iterable[PodInfo], without: Iterable[str] = ()) -> tuple[list[tuple[PodInfo, str]], list[PodInfo]]:
        """Where kube-scheduler would put each of `pods`, in the order given: on the node with room whose
        share of cpu and memory left after the pod is largest (the first in the scheduler's order among
        equal scores, which kube-scheduler rounds to whole points of 100); the nodes in `without`
        excluded. And the pods it would leave without room."""
        return self._place(list(pods), without, least_allocated=True)

    def _place(self, pods: list[PodInfo], without: Iterable[str], *,
               least_allocated: bool) -> tuple[list[tuple[PodInfo, str]], list[PodInfo]]:
        n = len(self.names)
        open_ = ~self.gone[:n]
        open_[[self.index[name] for name in without if name in self.index]] = False
        free = self.free[:n].copy()                     # the room as this placement uses it
        moves: list[tuple[PodInfo, str]] = []
        left: list[PodInfo] = []
        for pod in pods:
            need = self.rows.of(pod)
            assert need is not None
            cols = np.flatnonzero(need)
            ok = self._mask(pod)[:n] & open_
            ok &= covers(free[:, cols], need[cols])
            found = np.flatnonzero(ok)
            if not len(found):
                left.append(pod)
                continue
            i = int(found[self._most_left(free[found], self.allocatable[found], need)]) if least_allocated \
                else int(found[np.argmin(self.rank[found])])
            free[i] -= need
            moves.append((pod, self.names[i]))
        return moves, left

    def _most_left(self, rooms: np.ndarray, allocatable: np.ndarray, need: np.ndarray) -> int:
        """Which of the nodes with these rooms kube-scheduler's LeastAllocated score ranks first for `need`."""
        if not self._scored:
            return 0
        total = allocatable[:, self._scored]
        shares = np.where(total > 0, (rooms[:, self._scored] - need[self._scored]) / np.maximum(total, 1), 0.0)
        counted = np.maximum((total > 0).sum(axis=1), 1)
        return int(np.argmax(np.floor(100 * shares.sum(axis=1) / counted)))

    def move(self, moves: Sequence[tuple[PodInfo, str]]) -> None:
        """Commit `moves`: the pods now use their destinations' room."""
        for pod, name in moves:
            i = self.index[name]
            need = self.rows.of(pod)
            if need is not None:
                self.free[i] -= need

    def room(self, name: str) -> np.ndarray:
        return self.free[self.index[name]]

    def needs(self, pods: Sequence[PodInfo]) -> np.ndarray:
        """The resource rows of `pods` (those the packing judges), one a row."""
        rows = [need for pod in pods if (need := self.rows.of(pod)) is not None]
        return np.stack(rows) if rows else np.zeros((0, len(self.rows.index)), dtype=np.int64)

    def fits_in_any(self, needs: np.ndarray, names: Sequence[str]) -> bool:
        """True when some row of `needs` (`needs()`) fits the room of some node in `names` (resources only)."""
        at = [self.index[n] for n in names if n in self.index]
        if not at or not len(needs):
            return False
        rooms = self.free[at]
        if not (needs <= rooms.max(axis=0)).all(axis=1).any():
            return False                       # none fits even the largest room of each resource
        return bool((needs[:, None, :] <= rooms[None, :, :]).all(axis=2).any())
