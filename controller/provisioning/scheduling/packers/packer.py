"""The packer interface: what turns the first fit's new nodes into the nodes a plan launches.

The scheduler (scheduler.py) places pending pods first fit, in Karpenter's order, growing new nodes as they
fill; a packer then decides the new nodes the plan keeps. Two implement it: `Greedy` keeps the first fit's
nodes as they are (Karpenter's packing), `Optimiser` (optimiser.py) packs the loose pods again at least cost.
Pure: no I/O, no logging.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Protocol, Sequence

from karpy.controller.provisioning.scheduling.nodes import NewNode, NodeTemplate
from karpy.controller.provisioning.scheduling.topology import Topology


@dataclasses.dataclass(frozen=True)
class PackingOptions:
    """How new nodes are packed. `optimize`: by the optimiser, else as Karpenter packs (the first fit as it is).
    `node_cost_per_hour` is what the operator says every node costs besides its instance, volumes and address
    (cost.py adds it to each node's cost)."""

    optimize: bool = True
    node_cost_per_hour: float = 0.0
    # wall-clock safety cap on the whole optimisation (None: none, so a plan depends on its input alone); past it
    # the best plan found so far stands, so a burst never waits on the optimiser (the controller sets one,
    # `karpy plan` does not)
    max_seconds: float | None = None
    # how many processes the optimiser may make its plans in at once, this one included (forked.py): a large
    # batch's chunks (Packer.start), a mid-sized batch's fills (optimiser.py); its plan is the same whichever number.
    # None (the controller, whose other threads a fork would not copy): all in this process, a batch's fills one
    # after the other under the safety cap, its new nodes named as they open
    processes: int | None = None


@dataclasses.dataclass(frozen=True)
class Repacked:
    """What a packer chose, and, when the safety cap (`max_seconds`) cut its search short, what was left undone."""

    nodes: list[NewNode]
    cut_short: str | None = None


class StartedPacking:
    """A packing begun by `Packer.start`: `finish(open_node)` gives what it chose, naming its new nodes then."""

    def __init__(self, done: Repacked | Callable[[Callable[[NodeTemplate], NewNode]], Repacked]) -> None:
        self._done = done

    def finish(self, open_node: Callable[[NodeTemplate], NewNode]) -> Repacked:
        return self._done if isinstance(self._done, Repacked) else self._done(open_node)


class Packer(Protocol):
    def pack(self, nodes: Sequence[NewNode], *, topology: Topology, open_node: Callable[[NodeTemplate], NewNode],
             options: PackingOptions) -> Repacked:
        """The new nodes for the pods on `nodes` (the first fit's), never costing more than `nodes`.

        `open_node(template)` makes an empty new node (naming it). The nodes passed in are left as they are (the
        nodes returned are copies or new, or `nodes` themselves); the templates' remaining limits end up matching
        whichever set is returned."""
        ...

    def start(self, nodes: Sequence[NewNode], *, topology: Topology, options: PackingOptions,
              batch_pods: int) -> StartedPacking:
        """pack() of `nodes`, one chunk of a batch of `batch_pods` pods, begun now from the state as it is now
        and finished later (StartedPacking.finish), when the caller has gone on to place the next chunk: so it may
        be worked out meanwhile in a process of its own. The caller changes none of `nodes` before finishing, and
        their templates have no limits."""
        ...
