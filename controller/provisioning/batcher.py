"""The batcher: pending pods arrive in bursts, so provisioning waits for a quiet moment.

`trigger(pod)` on every provisionable pod; `wait()` returns once `idle`
seconds pass without a new pod, or `maximum` seconds after the first,
whichever is sooner (Karpenter's batch idle and max durations, 1 s and 10 s
by default). A pod already in the open batch does not hold it open again:
kube-scheduler's repeated status updates and the extender's gap reports of
the same pods would otherwise keep the idle window from ever closing.
"""

from __future__ import annotations

import threading
import time


class Batcher:
    def __init__(self, *, idle_seconds: float = 1.0, max_seconds: float = 10.0) -> None:
        self.idle, self.maximum = idle_seconds, max_seconds
        self._cond = threading.Condition()
        self._first: float | None = None
        self._last: float | None = None
        self._keys: set[str] = set()            # the pods in the open batch
        self._stopped = False

    def trigger(self, key: str | None = None) -> None:
        """A pod (`key`, its uid) waits for capacity; without a key, anything that should start a batch."""
        with self._cond:
            if key is not None:
                if key in self._keys:
                    return
                self._keys.add(key)
            now = time.monotonic()
            if self._first is None:
                self._first = now
            self._last = now
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a batch is ready (True) or `timeout`/stop with nothing pending (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._first is None:
                if self._stopped:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            while not self._stopped:
                now = time.monotonic()
                assert self._first is not None and self._last is not None
                ready_at = min(self._last + self.idle, self._first + self.maximum)
                if now >= ready_at:
                    break
                self._cond.wait(ready_at - now)
            self._first = self._last = None
            self._keys = set()
            return not self._stopped
