"""Packers: what turns the first fit's new nodes into the nodes a plan launches (packer.py says how).

`packer_for(options)` is the one the options ask for: the optimiser (optimiser.py, with column generation over
packing patterns in patterns.py) by default, Karpenter's greedy (greedy.py) when `optimize` is off.
"""

from __future__ import annotations

from karpy.controller.provisioning.scheduling.packers.greedy import Greedy
from karpy.controller.provisioning.scheduling.packers.optimiser import Optimiser
from karpy.controller.provisioning.scheduling.packers.packer import Packer, PackingOptions, Repacked, StartedPacking

__all__ = ["Greedy", "Optimiser", "Packer", "PackingOptions", "Repacked", "StartedPacking", "packer_for"]


def packer_for(options: PackingOptions) -> Packer:
    """The optimiser, or Karpenter's greedy when `options.optimize` is off."""
    return Optimiser() if options.optimize else Greedy()
