"""Karpenter's greedy packing: the first fit's new nodes, as the scheduler grew them.

Karpenter v0.16 launches what its scheduler's first fit planned (largest pod first, each onto the first node
with room, a node of the cheapest type that holds its pods). The first fit lives in scheduler.py, shared by
both packers; this packer keeps its nodes as they are. Pure.
"""

from __future__ import annotations

from typing import Callable, Sequence

from karpy.controller.provisioning.scheduling.nodes import NewNode, NodeTemplate
from karpy.controller.provisioning.scheduling.packers.packer import PackingOptions, Repacked, StartedPacking
from karpy.controller.provisioning.scheduling.topology import Topology


class Greedy:
    """Keeps the first fit's nodes."""

    def pack(self, nodes: Sequence[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
             options: PackingOptions) -> Repacked:
        return Repacked(list(nodes))

    def start(self, nodes: Sequence[NewNode], *, topology: Topology, options: PackingOptions,
              batch_pods: int) -> StartedPacking:
        return StartedPacking(Repacked(list(nodes)))
