"""Time, injected: the real clock in the operator, a stepped one in tests."""

from __future__ import annotations

import datetime as dt
import threading
import time


class Clock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc)

    def monotonic(self) -> float:
        """Seconds on a clock that only moves forward: for deadlines a wall-clock jump must not move."""
        return time.monotonic()


class FakeClock(Clock):
    """A clock that moves only when a test steps it."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
        self._start = self._now
        self._lock = threading.Lock()

    def now(self) -> dt.datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return (self._now - self._start).total_seconds()

    def step(self, seconds: float) -> None:
        with self._lock:
            self._now += dt.timedelta(seconds=seconds)

