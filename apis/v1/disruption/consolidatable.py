"""consolidateAfter: whether a NodeClaim is Consolidatable now, and when it next will be.

As Karpenter v1's NodeClaim disruption controller sets the `Consolidatable`
condition: never while the NodePool says `consolidateAfter: Never` or the
NodeClaim is not initialized; otherwise once `consolidateAfter` has passed
since the last pod was scheduled to or removed from the node
(`status.lastPodEventTime`, or the time it was initialized when no pod event
was seen). The consolidation policy then picks which of the consolidatable
nodes a method may take (methods.py). Pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Literal

from karpy.apis.timestamps import parse_time, rfc3339
from karpy.apis.v1.duration import parse_nillable_duration
from karpy.apis.v1.labels import CONDITION_CONSOLIDATABLE, CONDITION_INITIALIZED
from karpy.apis.v1.nodeclaim import Condition, NodeClaim
from karpy.apis.v1.nodepool import NodePool


@dataclasses.dataclass(frozen=True)
class Consolidatability:
    """The Consolidatable condition a NodeClaim should carry now.

    consolidatable: set the condition True; otherwise clear it.
    at: when the node becomes consolidatable if nothing changes (None: not while the spec stays as it is).
    why: a sentence for logs and `karpy explain node` when it is not consolidatable."""

    consolidatable: bool
    at: dt.datetime | None = None
    why: str = ""

    def requeue_after_seconds(self, now: dt.datetime) -> float | None:
        """Seconds until another look is worth it, or None."""
        return None if self.consolidatable or self.at is None else max((self.at - now).total_seconds(), 0.0)


def consolidatability(*, consolidate_after: str, initialized_at: dt.datetime | None,
                      last_pod_event_time: dt.datetime | None, now: dt.datetime) -> Consolidatability:
    """Whether the NodeClaim is consolidatable at `now`.

    consolidate_after: the NodePool's `spec.disruption.consolidateAfter` (a Go duration or `Never`).
    initialized_at: when its Initialized condition turned True; None while it is not initialized.
    last_pod_event_time: its `status.lastPodEventTime`, if any. Raises DurationError for a bad duration."""
    after = parse_nillable_duration(consolidate_after)
    if after is None:
        return Consolidatability(False, why="consolidation is disabled (consolidateAfter: Never)")
    if initialized_at is None:
        return Consolidatability(False, why="nodeclaim isn't initialized")
    since = last_pod_event_time or initialized_at
    at = since + after
    if after > dt.timedelta(0) and now - since < after:
        return Consolidatability(False, at=at, why=f"consolidateAfter {consolidate_after} not yet elapsed since "
                                                   f"the last pod event at {rfc3339(since)}")
    return Consolidatability(True, at=at)


def _condition(nodeclaim: NodeClaim, kind: str) -> Condition | None:
    conditions = nodeclaim.status.conditions if nodeclaim.status else None
    return next((c for c in conditions or [] if c.type == kind), None)


def nodeclaim_consolidatability(nodeclaim: NodeClaim, nodepool: NodePool, now: dt.datetime, *,
                                pod_event: dt.datetime | None = None) -> Consolidatability:
    """consolidatability() read off the objects: the NodePool's consolidateAfter, the NodeClaim's
    Initialized condition (True, and since when) and its lastPodEventTime, or `pod_event` (the latest pod
    event its node's pods show) when that is later."""
    initialized = _condition(nodeclaim, CONDITION_INITIALIZED)
    initialized_at = parse_time(initialized.last_transition_time) if initialized and initialized.status == "True" else None
    recorded = parse_time(nodeclaim.status.last_pod_event_time) if nodeclaim.status else None
    last_event = max((t for t in (recorded, pod_event) if t is not None), default=None)
    return consolidatability(consolidate_after=nodepool.spec.disruption.consolidate_after,
                             initialized_at=initialized_at, last_pod_event_time=last_event, now=now)


def condition_change(nodeclaim: NodeClaim, verdict: Consolidatability) -> Literal["set", "clear"] | None:
    """What to do to the NodeClaim's Consolidatable condition: set it True, clear it, or nothing (already right)."""
    current = _condition(nodeclaim, CONDITION_CONSOLIDATABLE)
    if verdict.consolidatable:
        return None if current is not None and current.status == "True" else "set"
    return None if current is None else "clear"
