"""The shapes of the Nodes kube-scheduler sends in full, remembered by their bytes.

Without nodeCacheCapable, every filter and prioritize call carries every
candidate Node (about 4 KB each), and kube-scheduler sends the same bytes
again until a Node changes. Reading a Node and parsing its allocatable
amounts costs far more than hashing its bytes, so each distinct Node is read
once; a call pays for the Nodes that changed since the last one.
"""

from __future__ import annotations

import threading
from typing import Sequence

import msgspec

from karpy.apis.quantity import QuantityError
from karpy.extender.decisions import NodeShape, shape_of
from karpy.extender.wire import BadArgs, decode_node

MAX_REMEMBERED = 20_000     # distinct Node versions kept; the oldest is forgotten first


class Shapes:
    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self._limit = limit
        self._by_bytes: dict[tuple[int, int], NodeShape] = {}    # (length, hash of the bytes) -> shape
        self._lock = threading.Lock()

    def of(self, raw_nodes: Sequence[msgspec.Raw]) -> list[NodeShape]:
        """The shape of each Node, in order; BadArgs naming the first one that is not a Node."""
        shapes = []
        for i, raw in enumerate(raw_nodes):
            data = bytes(raw)
            key = (len(data), hash(data))
            shape = self._by_bytes.get(key)
            if shape is None:
                shape = self._read(data, i)
                with self._lock:
                    while len(self._by_bytes) >= self._limit:
                        self._by_bytes.pop(next(iter(self._by_bytes)))
                    self._by_bytes[key] = shape
            shapes.append(shape)
        return shapes

    @staticmethod
    def _read(data: bytes, index: int) -> NodeShape:
        node = decode_node(data, index)
        try:
            return shape_of(node)
        except QuantityError as e:
            raise BadArgs(f"Nodes.items[{index}].status.allocatable.{e}") from None
