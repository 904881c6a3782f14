"""A NodePool node's drain, bounded by its terminationGracePeriod (Karpenter v1's termination).

The node's termination time is recorded once, on the Node, in the
`karpenter.sh/nodeclaim-termination-timestamp` annotation: its deletionTimestamp
plus the NodePool template's `terminationGracePeriod` (node repair records "now"
before deleting a node). Until then pods go through the Eviction API, PDBs and
do-not-disrupt respected; each pod whose own grace period would outlast the
termination time is deleted instead, past PDBs and do-not-disrupt, with its grace
period cut to what is left (apis/v1/disruption/expiration.py decides when). Pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Mapping, Sequence

from karpy.apis.timestamps import parse_time, rfc3339
from karpy.apis.v1.disruption.expiration import pod_drain_step, termination_time
from karpy.apis.v1.labels import NODECLAIM_TERMINATION_TIMESTAMP


def node_termination_time(node: Mapping[str, Any], termination_grace_period: str | None) -> dt.datetime | None:
    """When a deleted node must be gone: the recorded annotation if there is one (set once, kept), else its
    deletionTimestamp plus `termination_grace_period`; None when it has neither (the drain takes as long as it takes).
    Raises DurationError for a malformed grace period."""
    meta = node.get("metadata") or {}
    recorded = parse_time((meta.get("annotations") or {}).get(NODECLAIM_TERMINATION_TIMESTAMP))
    if recorded is not None:
        return recorded
    deleted = parse_time(meta.get("deletionTimestamp"))
    if deleted is None:
        return None
    return termination_time(deletion_timestamp=deleted, termination_grace_period=termination_grace_period)


def termination_annotation(node: Mapping[str, Any], deadline: dt.datetime | None) -> dict[str, str]:
    """The annotation to write so the termination time outlives a restart: empty when it is recorded or there is none."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if deadline is None or NODECLAIM_TERMINATION_TIMESTAMP in annotations:
        return {}
    return {NODECLAIM_TERMINATION_TIMESTAMP: rfc3339(deadline)}


@dataclasses.dataclass(frozen=True)
class ForcedDeletes:
    """Pods to delete now past PDBs and do-not-disrupt, each with the grace period it gets; the rest drain as usual."""

    delete: tuple[tuple[dict[str, Any], int], ...]
    rest: tuple[dict[str, Any], ...]
    next_at: dt.datetime | None = None          # when the next pod of `rest` would be forced


def forced_deletes(pods: Sequence[dict[str, Any]], *, deadline: dt.datetime | None, now: dt.datetime) -> ForcedDeletes:
    """Split the pods a drain waits for into those the termination time forces out now and the rest."""
    if deadline is None:
        return ForcedDeletes((), tuple(pods))
    delete: list[tuple[dict[str, Any], int]] = []
    rest: list[dict[str, Any]] = []
    next_at: dt.datetime | None = None
    for pod in pods:
        step = pod_drain_step(pod, deadline=deadline, now=now)
        if step.action == "delete":
            assert step.grace_period_seconds is not None
            delete.append((pod, step.grace_period_seconds))
            continue
        rest.append(pod)
        if step.force_at is not None and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            next_at = step.force_at if next_at is None else min(next_at, step.force_at)
    return ForcedDeletes(tuple(delete), tuple(rest), next_at)
