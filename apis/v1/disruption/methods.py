"""The disruption methods in Karpenter v1's order, which candidates each may take, and the spot-to-spot rule.

One pass walks the methods in order and acts on the first that finds a command:
Emptiness (delete empty consolidatable nodes, under every consolidation policy),
Drift (replace Drifted nodes), multi-node then single-node consolidation (replace
underutilized nodes with fewer or cheaper ones, only under WhenEmptyOrUnderutilized).
Each method spends its own reason's budget (budgets.py). A spot node is replaced
by a cheaper spot node only behind the SpotToSpotConsolidation feature gate and,
for a single node, only when at least 15 spot instance types are cheaper than it:
launching from the 15 cheapest then lands on one of them, so the new node is not
consolidated again at once. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal, Sequence, TypeVar

from karpy.apis.v1.duration import parse_nillable_duration
from karpy.apis.v1.nodepool import ConsolidationPolicy, DisruptionReason

MIN_SPOT_TO_SPOT_TYPES: Final = 15        # Karpenter's MinInstanceTypesForSpotToSpotConsolidation

Method = Literal["Emptiness", "Drift", "MultiNodeConsolidation", "SingleNodeConsolidation"]
METHODS: Final[tuple[Method, ...]] = ("Emptiness", "Drift", "MultiNodeConsolidation", "SingleNodeConsolidation")
METHOD_REASONS: Final[dict[Method, DisruptionReason]] = {
    "Emptiness": "Empty", "Drift": "Drifted",
    "MultiNodeConsolidation": "Underutilized", "SingleNodeConsolidation": "Underutilized",
}


@dataclasses.dataclass(frozen=True)
class Candidate:
    """What the methods' filters read of one node (a disruption Candidate in Karpenter)."""

    nodepool: str
    consolidation_policy: ConsolidationPolicy
    consolidate_after: str
    consolidatable: bool             # its NodeClaim's Consolidatable condition is True
    drifted: bool                    # its NodeClaim's Drifted condition is True
    empty: bool                      # no reschedulable pods on it


def refusal(method: Method, candidate: Candidate) -> str | None:
    """Why `method` does not take `candidate` (Karpenter's ShouldDisrupt, in its words), or None when it does."""
    if method == "Drift":
        return None if candidate.drifted else "node is not drifted"
    if parse_nillable_duration(candidate.consolidate_after) is None:
        return f'NodePool "{candidate.nodepool}" has consolidation disabled'
    if method == "Emptiness":
        if not candidate.empty:
            return "node is not empty"
    elif candidate.empty:
        return "empty nodes are left to Emptiness"
    elif candidate.consolidation_policy == "WhenEmpty":
        return (f'NodePool "{candidate.nodepool}" has consolidation policy WhenEmpty, '
                "but node is not empty")
    return None if candidate.consolidatable else "node is not consolidatable"


def first_method(candidate: Candidate) -> Method | None:
    """The first method, in v1's order, that would take `candidate`; None when none would."""
    return next((method for method in METHODS if refusal(method, candidate) is None), None)


@dataclasses.dataclass(frozen=True)
class SpotToSpotVerdict:
    """Whether a spot replacement may go ahead; `launch_options` is how many of the cheapest types to launch from."""

    allowed: bool
    why: str = ""
    launch_options: int = 0


T = TypeVar("T")


def spot_to_spot(*, feature_gate: bool, candidate_count: int, cheaper_spot_types: int,
                 min_values_types: int = 0) -> SpotToSpotVerdict:
    """v1's rule for replacing spot nodes with a spot node.

    cheaper_spot_types: spot instance types compatible with the replacement and cheaper than the candidates.
    min_values_types: how many types the requirements' minValues need (0 without minValues): the launch
    keeps at least that many of the cheapest types, else 15."""
    if not feature_gate:
        return SpotToSpotVerdict(False, "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")
    if cheaper_spot_types == 0:
        return SpotToSpotVerdict(False, "Can't replace with a cheaper node")
    if candidate_count > 1:
        return SpotToSpotVerdict(True, launch_options=cheaper_spot_types)
    if cheaper_spot_types < MIN_SPOT_TO_SPOT_TYPES:
        return SpotToSpotVerdict(False, f"SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_TYPES} cheaper instance type "
                                        f"options than the current candidate to consolidate, got {cheaper_spot_types}")
    return SpotToSpotVerdict(True, launch_options=min(cheaper_spot_types, max(MIN_SPOT_TO_SPOT_TYPES, min_values_types)))


def spot_launch_options(cheapest_first: Sequence[T], verdict: SpotToSpotVerdict) -> list[T]:
    """The instance types a permitted spot-to-spot replacement launches from: the cheapest `launch_options`."""
    return list(cheapest_first[:verdict.launch_options]) if verdict.allowed else []
