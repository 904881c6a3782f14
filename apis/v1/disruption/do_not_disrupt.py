"""`karpenter.sh/do-not-disrupt`: what on a node or its pods holds it, and until when.

Karpenter v1's rules: a node annotated `do-not-disrupt: "true"` is never a
candidate for any voluntary disruption. An active pod (not Succeeded or Failed,
not terminating) annotated `"true"` holds its node indefinitely; annotated with
a positive Go duration ("30m") it holds its node until `status.startTime` plus
that duration, and indefinitely while it has no start time; any other value is
ignored (v1 emits an Event and treats it as absent). v1alpha5's names keep
working: a pod's `karpenter.sh/do-not-evict: "true"` holds as do-not-disrupt
does, a node's `karpenter.sh/do-not-consolidate: "true"` holds it from
consolidation (Empty, Underutilized) but not from drift. Forceful paths
(expiry, a terminationGracePeriod running out) pass over all of these. Pure.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Mapping

from karpy.apis.labels import DO_NOT_CONSOLIDATE, DO_NOT_EVICT
from karpy.apis.timestamps import parse_time
from karpy.apis.v1.disruption.hold import Hold
from karpy.apis.v1.duration import DurationError, parse_duration
from karpy.apis.v1.labels import DO_NOT_DISRUPT
from karpy.apis.v1.nodepool import DisruptionReason

_CONSOLIDATION_REASONS: frozenset[str] = frozenset({"Empty", "Underutilized"})


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pod_active(pod: Mapping[str, Any]) -> bool:
    """Karpenter's IsActive: not Succeeded or Failed, and not terminating."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not _meta(pod).get("deletionTimestamp")


def do_not_disrupt_duration(value: str) -> dt.timedelta:
    """A pod's do-not-disrupt duration; raises DurationError unless it is a positive Go duration."""
    try:
        duration = parse_duration(value)
    except DurationError as e:
        raise DurationError(f'failed to parse "{value}" as a duration: {e}') from None
    if duration <= dt.timedelta(0):
        raise DurationError(f'duration "{value}" must be positive')
    return duration


def invalid_do_not_disrupt(pod: Mapping[str, Any]) -> str | None:
    """The Event message for a pod whose do-not-disrupt value is neither "true" nor a positive duration
    (v1 warns and ignores the annotation), or None."""
    value = (_meta(pod).get("annotations") or {}).get(DO_NOT_DISRUPT)
    if value is None or value == "true":
        return None
    try:
        do_not_disrupt_duration(value)
    except DurationError as e:
        return f"Invalid {DO_NOT_DISRUPT} annotation: {e}, ignoring annotation"
    return None


def pod_hold(pod: Mapping[str, Any], now: dt.datetime) -> Hold | None:
    """What in `pod`'s annotations holds its node at `now`, or None."""
    if not pod_active(pod):
        return None
    annotations = _meta(pod).get("annotations") or {}
    name = f"{_meta(pod).get('namespace', 'default')}/{_meta(pod).get('name')}"
    if annotations.get(DO_NOT_EVICT) == "true":
        return Hold(f'pod {name} has "{DO_NOT_EVICT}" annotation')
    value = annotations.get(DO_NOT_DISRUPT)
    if value is None:
        return None
    if value == "true":
        return Hold(f'pod {name} has "{DO_NOT_DISRUPT}" annotation')
    try:
        duration = do_not_disrupt_duration(value)
    except DurationError:
        return None                               # an unreadable value is ignored, as v1 does
    started = parse_time((pod.get("status") or {}).get("startTime"))
    if started is None:
        return Hold(f'pod {name} has "{DO_NOT_DISRUPT}: {value}" annotation and has not started')
    until = started + duration
    return Hold(f'pod {name} has "{DO_NOT_DISRUPT}: {value}" annotation', until) if now < until else None


def node_hold(annotations: Mapping[str, str] | None, reason: DisruptionReason) -> Hold | None:
    """What in a node's (or NodeClaim's) annotations holds it from disruption for `reason`, or None."""
    annotations = annotations or {}
    if annotations.get(DO_NOT_DISRUPT) == "true":
        return Hold(f'disruption is blocked through the "{DO_NOT_DISRUPT}" annotation')
    if reason in _CONSOLIDATION_REASONS and annotations.get(DO_NOT_CONSOLIDATE) == "true":
        return Hold(f'consolidation is blocked through the "{DO_NOT_CONSOLIDATE}" annotation')
    return None


def disruption_hold(*, node_annotations: Mapping[str, str] | None, pods: Iterable[Mapping[str, Any]],
                    reason: DisruptionReason, now: dt.datetime) -> Hold | None:
    """The first thing holding a node from disruption for `reason` at `now`: its own annotations, then its pods'.

    Of several pods holding it for a while, the one that holds longest is named,
    so `until` is when the node is next free of them."""
    held = node_hold(node_annotations, reason)
    if held is not None:
        return held
    latest: Hold | None = None
    for pod in pods:
        hold = pod_hold(pod, now)
        if hold is None:
            continue
        if hold.until is None:
            return hold
        if latest is None or (latest.until is not None and hold.until > latest.until):
            latest = hold
    return latest
