"""The local cluster's disruption controller and eviction API, judged with its own code.

Written from Kubernetes' documented rules (Specifying a Disruption Budget; API-initiated
Eviction), not from karpy's `apis.disruption`, so that a misreading in the product is not
mirrored by the cluster it is tested against:

- A pod is healthy when it is not being deleted and its Ready condition is True.
- Expected pods: with an integer minAvailable, the pods the budget selects; otherwise what
  their controllers want (spec.replicas / parallelism), one count per controller, and a pod
  with no known controller counts itself. Percentages are rounded up.
- An eviction ignores budgets for a pod being deleted or whose phase is Pending, Succeeded
  or Failed. A Running pod that is not Ready may go while the budget is healthy
  (currentHealthy >= desiredHealthy > 0) under `unhealthyPodEvictionPolicy: IfHealthyBudget`
  (the default), or always under `AlwaysAllow`. Any other pod needs disruptionsAllowed >= 1.
- A pod selected by more than one budget cannot be evicted (the API server answers 500).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from karpy.apis.conditions import ready
from karpy.simulator.fit import selector_matches

Obj = Mapping[str, Any]

_BUDGET_FREE_PHASES = frozenset({"Pending", "Succeeded", "Failed"})


@dataclass(frozen=True)
class BudgetStatus:
    current_healthy: int
    desired_healthy: int
    expected_pods: int

    @property
    def disruptions_allowed(self) -> int:
        return max(0, self.current_healthy - self.desired_healthy)

    def as_status(self) -> dict[str, int]:
        return {"currentHealthy": self.current_healthy, "desiredHealthy": self.desired_healthy,
                "expectedPods": self.expected_pods, "disruptionsAllowed": self.disruptions_allowed}


@dataclass(frozen=True)
class Verdict:
    """Whether an eviction may go; when not, the HTTP status and the message the API server gives."""
    allowed: bool
    code: int = 201
    message: str = ""
    budget: str | None = None


def is_healthy(pod: Obj) -> bool:
    return not bool((pod.get("metadata") or {}).get("deletionTimestamp")) and ready(pod)


def selects(pdb: Obj, pod: Obj) -> bool:
    meta = pod.get("metadata") or {}
    if meta.get("namespace", "default") != (pdb.get("metadata") or {}).get("namespace", "default"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    return selector_matches(selector, meta.get("labels") or {})


def _scaled_up(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def _controller_uid(pod: Obj) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("controller")), None)


def budget_status(pdb: Obj, pods: Iterable[Obj], replicas: Mapping[str, int]) -> BudgetStatus:
    """The disruption controller's status of `pdb` over the namespace's `pods`; `replicas` is
    what each workload controller wants, by its uid."""
    matching = [p for p in pods if selects(pdb, p)]
    spec = pdb.get("spec") or {}
    min_available = spec.get("minAvailable")
    if spec.get("maxUnavailable") is None and isinstance(min_available, int):
        expected = len(matching)
    else:
        controllers = {uid for p in matching if (uid := _controller_uid(p)) is not None and uid in replicas}
        expected = sum(replicas[uid] for uid in controllers) + sum(
            1 for p in matching if _controller_uid(p) not in controllers)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled_up(spec["maxUnavailable"], expected))
    elif min_available is not None:
        desired = _scaled_up(min_available, expected)
    else:
        desired = expected
    return BudgetStatus(sum(map(is_healthy, matching)), desired, expected)


def eviction_verdict(pod: Obj, pdbs: Iterable[Obj], pods: Iterable[Obj], replicas: Mapping[str, int]) -> Verdict:
    """The eviction API's answer for `pod` given its namespace's budgets and pods."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in _BUDGET_FREE_PHASES:
        return Verdict(True)
    budgets = [pdb for pdb in pdbs if selects(pdb, pod)]
    if not budgets:
        return Verdict(True)
    if len(budgets) > 1:
        return Verdict(False, 500, "This pod has more than one PodDisruptionBudget, which the eviction "
                                   "subresource does not support.")
    pdb = budgets[0]
    name = str((pdb.get("metadata") or {}).get("name"))
    counts = budget_status(pdb, pods, replicas)
    if not ready(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        if policy == "AlwaysAllow" or 0 < counts.desired_healthy <= counts.current_healthy:
            return Verdict(True)
    if counts.disruptions_allowed >= 1:
        return Verdict(True)
    return Verdict(False, 429, f"The disruption budget {name} needs {counts.desired_healthy} healthy pods "
                               f"and has {counts.current_healthy} currently", budget=name)
