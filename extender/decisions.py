"""What the extender decides, from facts about nodes: which nodes a pod may use, and how much it should want each.

kube-scheduler sees only what the API says. karpy also knows which nodes it
is about to remove (expiry due within the horizon, emptiness within seconds, or draining)
and which capacity on a launching node it promised to the pods it launched
that node for. A node that fails here fails with a reason kube-scheduler
shows; a pod no node is left for is a capacity gap. Pure: no I/O, no clock.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from typing import Any, Mapping

from karpy.apis import labels as wk
from karpy.apis.resources import CPU, MEMORY, Resources, share
from karpy.controller.clock import parse_time
from karpy.controller.node.expiration import seconds_left

REMOVAL_HORIZON_SECONDS = 30.0               # a node due for removal this soon takes no new pods
# An empty node that gets a pod is empty no more: emptiness drops its mark on its next pass (every 5 s),
# so only its last seconds are a race; failing it for longer would launch nodes while empty ones wait.
EMPTINESS_HORIZON_SECONDS = 5.0
NEAR_EXPIRY_SECONDS = 3600.0                 # nodes expiring within this (or the last tenth of their life) score last

# failure kinds, as kube-scheduler's summary counts them ("2 node(s) are being removed by karpy")
REMOVING = "are being removed by karpy"
PROMISED = "have their free capacity promised to pods karpy launched them for"


@dataclasses.dataclass(frozen=True)
class Lifetimes:
    """A provisioner's TTLs (seconds, or None when unset)."""

    after_empty: float | None = None
    until_expired: float | None = None


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    name: str
    removal: str | None = None                 # why karpy is removing it (or will within the horizon)
    allocatable: Resources | None = None       # None: not known (a name only, and no cluster)
    used: Resources | None = None              # requests of the pods bound to it; None: not known
    promised: Mapping[str, Resources] = dataclasses.field(default_factory=dict)   # pod -> requests, not bound yet
    expires_in: float | None = None
    near_expiry: bool = False


def facts_of(node: Mapping[str, Any], *, used: Resources | None, pending: Mapping[str, Resources],
             lifetimes: Lifetimes | None, now: dt.datetime, horizon: float = REMOVAL_HORIZON_SECONDS) -> NodeFacts:
    """Facts about one Node object. `pending` holds the requests of unbound pods by "ns/name" (those karpy
    launched this node for count as promised); `lifetimes` are its provisioner's TTLs, if known."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    ours = wk.PROVISIONER_NAME in (meta.get("labels") or {})
    removal = None
    expires_in = None
    if meta.get("deletionTimestamp"):
        removal = "node is being deleted (cordoned and draining)"
    elif ours and lifetimes is not None:
        expires_in = seconds_left(ttl=lifetimes.until_expired, created=parse_time(meta.get("creationTimestamp")), now=now)
        empty_left = seconds_left(ttl=lifetimes.after_empty, created=parse_time(annotations.get(wk.EMPTINESS_TIMESTAMP)),
                                  now=now)
        if expires_in is not None and expires_in <= horizon:
            removal = f"node expires in {max(expires_in, 0):.0f}s (ttlSecondsUntilExpired) and karpy removes it"
        elif empty_left is not None and empty_left <= min(horizon, EMPTINESS_HORIZON_SECONDS):
            removal = f"node is empty and karpy removes it in {max(empty_left, 0):.0f}s (ttlSecondsAfterEmpty)"
    launched_for = [k.strip() for k in str(annotations.get(wk.LAUNCHED_FOR, "")).split(",") if k.strip()]
    promised = {k: pending[k] for k in launched_for if k in pending}
    allocatable = Resources.parse((node.get("status") or {}).get("allocatable")) if node.get("status") else None
    near_expiry = expires_in is not None and lifetimes is not None and lifetimes.until_expired is not None and \
        expires_in <= min(NEAR_EXPIRY_SECONDS, lifetimes.until_expired / 10)
    return NodeFacts(name=meta.get("name", ""), removal=removal, allocatable=allocatable, used=used,
                     promised=promised, expires_in=expires_in, near_expiry=near_expiry)


def filter_nodes(pod: str, requests: Resources, nodes: list[NodeFacts]) -> tuple[list[str], dict[str, str], collections.Counter[str]]:
    """The nodes `pod` ("ns/name") may use, the others with their reasons, and the count of each kind of failure."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    kinds: collections.Counter[str] = collections.Counter()
    for facts in nodes:
        if facts.removal:
            failed[facts.name], kinds[REMOVING] = facts.removal, kinds[REMOVING] + 1
        elif not _fits_beside_promises(pod, requests, facts):
            others = len([k for k in facts.promised if k != pod])
            failed[facts.name] = f"node's free capacity is promised to {others} pod(s) karpy launched it for"
            kinds[PROMISED] += 1
        else:
            passed.append(facts.name)
    return passed, failed, kinds


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
    detail = ", ".join(f"{count} node(s) {kind}" for kind, count in sorted(kinds.items()))
    return f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."


def score_nodes(pod: str, requests: Resources, nodes: list[NodeFacts]) -> dict[str, int]:
    """0..10 per node: 10 for the node karpy launched for this pod; then tighter packing scores higher (1..9),
    so emptier nodes drain and go; nodes near expiry (or being removed) score 0."""
    scores: dict[str, int] = {}
    for facts in nodes:
        if pod in facts.promised:
            scores[facts.name] = 10
        elif facts.removal or facts.near_expiry:
            scores[facts.name] = 0
        else:
            scores[facts.name] = 1 + round(8 * _fullness_after(requests, facts))
    return scores


def _fullness_after(requests: Resources, facts: NodeFacts) -> float:
    """Mean share of cpu and memory in use once the pod is placed (0.5 when not known)."""
    if facts.allocatable is None or facts.used is None:
        return 0.5
    after = facts.used + requests
    for promised in facts.promised.values():
        after = after + promised
    shares = [share(after.get(r, 0), facts.allocatable[r]) for r in (CPU, MEMORY) if facts.allocatable.get(r, 0) > 0]
    return sum(shares) / len(shares) if shares else 0.5
