"""Feature gates: behaviour Karpenter ships switched off until asked for, as `--feature-gates Name=true,Name=false`.

One parser and one frozen record of every gate karpy knows; a controller reads its own field. Karpenter's
gates and their defaults: `Drift` (v0.21–v0.31, for Provisioners), `SpotToSpotConsolidation` and
`NodeRepair` (v1), all off. Pure.
"""

from __future__ import annotations

import dataclasses

# the flag's spelling of each gate -> the FeatureGates field that holds it
GATES = {"Drift": "drift", "SpotToSpotConsolidation": "spot_to_spot_consolidation", "NodeRepair": "node_repair"}


@dataclasses.dataclass(frozen=True)
class FeatureGates:
    drift: bool = False
    spot_to_spot_consolidation: bool = False
    node_repair: bool = False


def parse_feature_gates(text: str) -> FeatureGates:
    """`Name=true,Name=false` (the flag's value; empty: every gate at its default) as FeatureGates.
    Raises ValueError naming the entry that is not `Name=true|false` or names no known gate."""
    values: dict[str, bool] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, value = (part.strip() for part in entry.partition("="))
        if not sep or value.lower() not in ("true", "false"):
            raise ValueError(f"{entry!r} is not Name=true or Name=false")
        if name not in GATES:
            raise ValueError(f"unknown feature gate {name!r} (known: {', '.join(GATES)})")
        values[GATES[name]] = value.lower() == "true"
    return FeatureGates(**values)
