"""Where consolidation means the pods it moves to land: the annotation it writes on each receiving node.

A drained pod comes back as a new pod of the same owner (a ReplicaSet, a
StatefulSet, a Job) with a new name, so the plan is told by owner: for each
owner's uid, how many of its pods the node should hold once the moves are
done, and until when that holds. karpy's scheduler extender scores such a
node first for that owner's pods while it holds fewer. Past the deadline the
annotation means nothing, so a plan abandoned by a crash steers nothing for
long. Pure.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
from typing import Any, Iterable, Mapping

from karpy.apis.pods import controller_of, object_key
from karpy.apis.timestamps import parse_time, rfc3339


@dataclasses.dataclass(frozen=True)
class MovingIn:
    owners: Mapping[str, int]        # owner uid -> pods of it the node should hold
    until: dt.datetime

    def encode(self) -> str:
        return json.dumps({"until": rfc3339(self.until), "owners": dict(sorted(self.owners.items()))},
                          separators=(",", ":"))

    def open_to(self, counts: Mapping[str, int], now: dt.datetime) -> frozenset[str]:
        """The owners whose pods the node still waits for, given how many of each it holds (`counts`)."""
        if now >= self.until:
            return frozenset()
        return frozenset(owner for owner, total in self.owners.items() if counts.get(owner, 0) < total)


def parse(text: Any) -> MovingIn | None:
    """The annotation's value, or None when it is absent or not one (a hand edit steers nothing)."""
    if not text or not isinstance(text, str):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("owners"), dict):
        return None
    until = parse_time(doc.get("until")) if isinstance(doc.get("until"), str) else None
    owners = {str(k): v for k, v in doc["owners"].items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}
    if until is None or not owners:
        return None
    return MovingIn(owners, until)


def owner_of(pod: Mapping[str, Any]) -> str | None:
    """The uid of the owner that recreates the pod once it is evicted; None for a pod nothing recreates."""
    ref = controller_of(pod)
    uid = ref.get("uid") if ref is not None else None
    return str(uid) if uid else None


def merged(before: MovingIn | None, held: Mapping[str, int], moving: Mapping[str, int], *,
           now: dt.datetime, until: dt.datetime) -> MovingIn:
    """The annotation once `moving` more pods (by owner) are sent to a node that holds `held` now and
    already waited for `before` (kept while it lasts: another action's pods may still be on their way)."""
    owners: dict[str, int] = {}
    waiting = before.owners if before is not None and now < before.until else {}
    for owner in set(waiting) | set(moving):
        owners[owner] = max(waiting.get(owner, 0), held.get(owner, 0)) + moving.get(owner, 0)
    return MovingIn(owners, max(until, before.until) if waiting and before is not None else until)


def by_owner(moves: Iterable[tuple[str, str]], pods: Iterable[Mapping[str, Any]], *,
             renamed: Mapping[str, str] | None = None) -> dict[str, collections.Counter[str]]:
    """For each receiving node (a planned replacement under the name it was launched as), how many pods of
    each owner `moves` ("ns/name", node) send there. Pods nothing recreates are not counted."""
    owners = {object_key(p): owner_of(p) for p in pods}
    moving: dict[str, collections.Counter[str]] = {}
    for pod, to in moves:
        if (owner := owners.get(pod)) is not None:
            moving.setdefault((renamed or {}).get(to, to), collections.Counter())[owner] += 1
    return moving
