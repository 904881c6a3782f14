"""`--feature-gates`: Karpenter's switches for behaviour that is off by default, parsed from `Name=true,Name=false`.

Drift (v0.21-v0.31's gate: Provisioners' nodes drift and are replaced; a
NodePool's always do, as in v1), SpotToSpotConsolidation (a spot node may be
replaced by a cheaper spot node) and NodeRepair (unhealthy nodes are
replaced). Every gate is off unless named. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Final

GATES: Final = ("Drift", "SpotToSpotConsolidation", "NodeRepair")


@dataclasses.dataclass(frozen=True)
class FeatureGates:
    drift: bool = False
    spot_to_spot_consolidation: bool = False
    node_repair: bool = False


def parse_feature_gates(text: str) -> FeatureGates:
    """The gates `text` (`Drift=true,SpotToSpotConsolidation=false`) turns on; raises ValueError naming each entry
    that is not `Name=true|false` with a known name."""
    on: dict[str, bool] = {}
    problems = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip().lower()
        if name not in GATES:
            problems.append(f"{entry!r}: unknown feature gate {name!r} (known: {', '.join(GATES)})")
        elif not sep or value not in ("true", "false"):
            problems.append(f"{entry!r}: expected {name}=true or {name}=false")
        else:
            on[name] = value == "true"
    if problems:
        raise ValueError("; ".join(problems))
    return FeatureGates(drift=on.get("Drift", False),
                        spot_to_spot_consolidation=on.get("SpotToSpotConsolidation", False),
                        node_repair=on.get("NodeRepair", False))
