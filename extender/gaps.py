"""Open capacity gaps: pods no node is left for, with why and since when. A gap closes when its pod is bound."""

from __future__ import annotations

import dataclasses
import threading


@dataclasses.dataclass(frozen=True)
class Gap:
    pod: str        # "namespace/name"
    reason: str
    since: str      # RFC 3339

    def to_json(self) -> dict[str, str]:
        return {"pod": self.pod, "reason": self.reason, "since": self.since}


class Gaps:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Gap] = {}

    def open(self, pod: str, reason: str, since: str) -> bool:
        """Record a gap (a newer reason replaces the old one; `since` stays); True when it is new."""
        with self._lock:
            known = self._open.get(pod)
            self._open[pod] = Gap(pod, reason, known.since if known else since)
            return known is None

    def close(self, pod: str) -> None:
        with self._lock:
            self._open.pop(pod, None)

    def items(self) -> list[Gap]:
        with self._lock:
            return sorted(self._open.values(), key=lambda g: (g.since, g.pod))
