"""PodDisruptionBudgets: how many of their pods may be disrupted now, and whether an eviction may go.

`allowed_disruptions` follows the disruption controller: healthy pods (Running
and Ready, not terminating) against minAvailable or maxUnavailable, as
integers or percentages of the expected pods (percentages rounded up, as
Kubernetes rounds them). Pure; the local cluster's API and consolidation both use it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

from karpy.apis.conditions import ready
from karpy.apis.selectors import LabelSelector


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if meta.get("namespace", "default") != (pdb.get("metadata") or {}).get("namespace", "default"):
        return False
    raw = (pdb.get("spec") or {}).get("selector")
    if raw is None:
        return False
    return LabelSelector.parse(raw).matches(meta.get("labels") or {})


def healthy(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return ready(pod)


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def _controller_uid(pod: Mapping[str, Any]) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("controller")), None)


def status_of(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]],
              replicas: Mapping[str, int] | None = None,
              is_healthy: Callable[[Mapping[str, Any]], bool] = healthy) -> dict[str, int]:
    """currentHealthy, desiredHealthy, expectedPods and disruptionsAllowed for `pdb` over `pods`.

    Expected pods are what the pods' controllers want (`replicas` by controller uid), as the
    disruption controller counts them, so a pod evicted and not yet replaced still counts;
    a pod without a known controller counts itself."""
    matching = [p for p in pods if selects(pdb, p)]
    owners = {uid for p in matching if (uid := _controller_uid(p)) is not None and uid in (replicas or {})}
    expected = sum((replicas or {})[uid] for uid in owners) + sum(
        1 for p in matching if _controller_uid(p) not in owners)
    current = sum(1 for p in matching if is_healthy(p))
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = expected                                # no policy: nothing may go
    return {"currentHealthy": current, "desiredHealthy": desired, "expectedPods": expected,
            "disruptionsAllowed": max(0, current - desired)}


def eviction_blocker(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]],
                     pods: Iterable[Mapping[str, Any]], replicas: Mapping[str, int] | None = None) -> str | None:
    """The name of a PDB that forbids evicting `pod` now, or None. An unhealthy pod may always go."""
    everyone = list(pods)
    for pdb in pdbs:
        if not selects(pdb, pod):
            continue
        if not healthy(pod):
            continue                                      # evicting it costs the budget nothing
        if status_of(pdb, everyone, replicas)["disruptionsAllowed"] < 1:
            return str((pdb.get("metadata") or {}).get("name"))
    return None
