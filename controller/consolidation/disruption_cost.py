"""What disrupting pods costs, as Karpenter weighs it, and whether a consolidation action's saving pays for it.

Karpenter's disruption cost (`pkg/utils/disruption`): each evicted pod costs
1, moved by its `controller.kubernetes.io/pod-deletion-cost` (/2^27) and its
priority (/2^25), clamped to [-10, 10]; a node's cost is its pods' sum times
the share of its lifetime left (a node about to expire is cheap to disrupt).
An action pays when it saves at least `min_savings_per_pod` $/h per unit of
that cost, as Karpenter's consolidation savings threshold gates it. Pure;
light enough for the command line to read its default.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Iterable

from karpy.apis import labels as wk

if TYPE_CHECKING:
    from karpy.apis.v1alpha5 import Provisioner
    from karpy.controller.provisioning.scheduling.pods import PodInfo

# $/h an action must save per unit of disruption cost (one pod of default priority and deletion cost);
# docs/consolidation.md says why this default
MIN_SAVINGS_PER_POD = 0.005


def eviction_cost(pod: PodInfo) -> float:
    """Karpenter's: 1 per pod, moved by pod-deletion-cost and priority, clamped to [-10, 10]."""
    cost = 1.0
    try:
        cost += float(pod.annotations.get(wk.POD_DELETION_COST, "0")) / 2 ** 27
    except ValueError:
        pass
    cost += pod.priority / 2 ** 25
    return max(-10.0, min(10.0, cost))


def disruption_cost(pods: Iterable[PodInfo], lifetime: float = 1.0) -> float:
    """The cost of evicting `pods` from a node with `lifetime` (`lifetime_remaining`) of its life left."""
    return sum(eviction_cost(p) for p in pods) * lifetime


def lifetime_remaining(provisioner: Provisioner | None, created: dt.datetime, now: dt.datetime) -> float:
    """The share of its life a node has left (1.0 when it never expires): nearly expired nodes are cheap to disrupt."""
    ttl = provisioner.spec.ttl_seconds_until_expired if provisioner else None
    if not ttl:
        return 1.0
    return max(0.0, min(1.0, 1.0 - (now - created).total_seconds() / ttl))


def unworthy(saving: float, cost: float, *, pods: int, min_savings_per_pod: float) -> str | None:
    """Why an action saving `saving` $/h for evicting `pods` pods of disruption cost `cost` does not pay, or None."""
    needed = min_savings_per_pod * cost
    if saving >= needed - 1e-9:
        return None
    return (f"not worth its disruption: saves ${saving:.4f}/h for {pods} pod(s) moved (disruption cost {cost:g}), "
            f"less than ${needed:.4f}/h (${min_savings_per_pod:g}/h per unit of disruption cost)")
