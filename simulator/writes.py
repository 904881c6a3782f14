"""Writes that decide nothing, sent side by side over pooled connections and awaited once per pass.

The scheduler's Unschedulable marks and the kubelets' pod status updates are
one request per pod, as in a real cluster; sending them one after another
would make a burst of thousands of pods wait on round trips, not on work.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any


class Writes:
    """Status writes that do not decide anything, sent side by side and awaited once per pass."""

    def __init__(self, name: str, parallelism: int = 16) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(parallelism, thread_name_prefix=f"{name}-writes")
        self._pending: list[concurrent.futures.Future[None]] = []
        self.count = 0                          # writes submitted so far

    def submit(self, fn: Any) -> None:
        self.count += 1
        self._pending.append(self._pool.submit(fn))

    def forget_done(self) -> None:
        """Drop the writes that finished (for a caller that does not await them)."""
        self._pending = [f for f in self._pending if not f.done()]

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        concurrent.futures.wait(pending)
