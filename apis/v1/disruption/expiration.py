"""expireAfter and terminationGracePeriod: when a NodeClaim expires, and how a bounded drain ends.

Karpenter v1 expires a NodeClaim forcefully: at `creationTimestamp +
expireAfter` it is deleted, whatever budgets, PDBs or do-not-disrupt say
(`Never` turns expiry off). Deleting a NodeClaim whose spec has a
`terminationGracePeriod` fixes its termination time, `deletionTimestamp +
terminationGracePeriod` (recorded to the second in the
`karpenter.sh/nodeclaim-termination-timestamp` annotation). The drain evicts
pods through the eviction API (PDBs and do-not-disrupt respected) until a pod
would no longer get its own `terminationGracePeriodSeconds` before that time;
from `termination time - terminationGracePeriodSeconds` on, the pod is deleted
instead, past PDBs and do-not-disrupt, with its grace period cut to what is
left (at least 1 s, so it is never force-removed from etcd). A pod that names no
grace period has the API server's default, 30 s. Pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Literal, Mapping

from karpy.apis.timestamps import parse_time
from karpy.apis.v1.duration import parse_duration, parse_nillable_duration
from karpy.apis.v1.labels import NODECLAIM_TERMINATION_TIMESTAMP
from karpy.apis.v1.nodeclaim import NodeClaim

DEFAULT_POD_GRACE_SECONDS = 30


def expires_at(*, created_at: dt.datetime, expire_after: str) -> dt.datetime | None:
    """When a NodeClaim created at `created_at` expires; None for `Never`. Raises DurationError."""
    after = parse_nillable_duration(expire_after)
    return None if after is None else created_at + after


def expired(*, created_at: dt.datetime, expire_after: str, now: dt.datetime) -> bool:
    """True once `now` has reached the expiry time: the NodeClaim is to be deleted, forcefully."""
    at = expires_at(created_at=created_at, expire_after=expire_after)
    return at is not None and now >= at


def termination_time(*, deletion_timestamp: dt.datetime, termination_grace_period: str | None) -> dt.datetime | None:
    """When a NodeClaim deleted at `deletion_timestamp` must be gone, to the second as v1 records it
    (RFC 3339); None without a terminationGracePeriod (the drain waits as long as it takes)."""
    if termination_grace_period is None:
        return None
    return (deletion_timestamp + parse_duration(termination_grace_period)).replace(microsecond=0)


def pod_delete_at(pod: Mapping[str, Any], deadline: dt.datetime) -> dt.datetime:
    """The latest moment `pod` can be deleted and still get its whole terminationGracePeriodSeconds
    before `deadline` (30 s when the pod names none: the API server's default)."""
    seconds = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return deadline - dt.timedelta(seconds=int(DEFAULT_POD_GRACE_SECONDS if seconds is None else seconds))


def needs_force_delete(pod: Mapping[str, Any], *, deadline: dt.datetime | None, now: dt.datetime) -> bool:
    """True when `pod` must be deleted now past PDBs and do-not-disrupt so the node is gone by `deadline`:
    a terminating pod whose deletion would end after the deadline, or a running one past its delete-at time."""
    if deadline is None:
        return False
    deleting = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    if deleting is not None:
        return deleting > deadline
    return now > pod_delete_at(pod, deadline)


def forced_grace_period_seconds(*, deadline: dt.datetime, now: dt.datetime) -> int:
    """The grace period a forced delete gives a pod: what is left until `deadline`, whole seconds, at least 1."""
    return max(int((deadline - now).total_seconds()), 1)


@dataclasses.dataclass(frozen=True)
class PodDrainStep:
    """How the drain handles one pod now: `evict` through the eviction API (PDBs and do-not-disrupt
    apply), or `delete` with `grace_period_seconds` (they do not). `force_at`: when an evicted pod
    would be deleted instead if it is still there."""

    action: Literal["evict", "delete"]
    grace_period_seconds: int | None = None
    force_at: dt.datetime | None = None


def pod_drain_step(pod: Mapping[str, Any], *, deadline: dt.datetime | None, now: dt.datetime) -> PodDrainStep:
    """The drain's step for `pod` at `now`, given the node's termination time `deadline` (or None)."""
    if needs_force_delete(pod, deadline=deadline, now=now):
        assert deadline is not None                      # needs_force_delete is False without one
        return PodDrainStep("delete", grace_period_seconds=forced_grace_period_seconds(deadline=deadline, now=now))
    force_at = pod_delete_at(pod, deadline) if deadline is not None else None
    return PodDrainStep("evict", force_at=force_at)


def nodeclaim_expires_at(nodeclaim: NodeClaim) -> dt.datetime | None:
    """expires_at() of a NodeClaim: its creationTimestamp plus its spec.expireAfter (None: Never or not created)."""
    created = parse_time(nodeclaim.metadata.creation_timestamp)
    return None if created is None else expires_at(created_at=created, expire_after=nodeclaim.spec.expire_after)


def nodeclaim_termination_time(nodeclaim: NodeClaim) -> dt.datetime | None:
    """A deleted NodeClaim's termination time: the recorded annotation if there is one (it is set once and
    kept), else its deletionTimestamp plus spec.terminationGracePeriod; None when it has neither."""
    recorded = parse_time((nodeclaim.metadata.annotations or {}).get(NODECLAIM_TERMINATION_TIMESTAMP))
    if recorded is not None:
        return recorded
    deleted = parse_time(nodeclaim.metadata.deletion_timestamp)
    if deleted is None:
        return None
    return termination_time(deletion_timestamp=deleted, termination_grace_period=nodeclaim.spec.termination_grace_period)
