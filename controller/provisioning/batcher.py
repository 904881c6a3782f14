"""The batcher: pending pods arrive in bursts, so provisioning waits for a quiet moment.

`trigger(pod)` on every provisionable pod; `wait()` returns once `idle`
seconds pass without a new pod, or `maximum` seconds after the first,
whichever is sooner (Karpenter's batch idle and max durations, 1 s and 10 s
by default). A pod already in the open batch does not hold it open again:
kube-scheduler's repeated status updates and the extender's gap reports of
the same pods would otherwise keep the idle window from ever closing.
`wait()` hands over the batch: the uids of its pods, which the provisioner
takes from the pending index, or "every pending pod" when something other
than a pod opened it (the periodic second look, a retry).
"""

from __future__ import annotations

import dataclasses
import threading
import time


@dataclasses.dataclass(frozen=True)
class Batch:
    uids: frozenset[str]                    # the pods that arrived in the window
    everything: bool = False                # plan every pod that waits, not only these


class Batcher:
    def __init__(self, *, idle_seconds: float = 1.0, max_seconds: float = 10.0) -> None:
        self.idle, self.maximum = idle_seconds, max_seconds
        self._cond = threading.Condition()
        self._first: float | None = None
        self._last: float | None = None
        self._keys: set[str] = set()            # the pods in the open batch
        self._everything = False
        self._stopped = False

    def trigger(self, key: str | None = None) -> None:
        """A pod (`key`, its uid) waits for capacity; without a key, anything that should start a batch."""
        with self._cond:
            if key is None:
                self._everything = True
            else:
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

    def wait(self, timeout: float | None = None) -> Batch | None:
        """Block until a batch is ready and return it; None after `timeout` or stop with nothing pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._first is None:
                if self._stopped:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            while not self._stopped:
                now = time.monotonic()
                assert self._first is not None and self._last is not None
                ready_at = min(self._last + self.idle, self._first + self.maximum)
                if now >= ready_at:
                    break
                self._cond.wait(ready_at - now)
            batch = Batch(frozenset(self._keys), self._everything)
            self._first = self._last = None
            self._keys, self._everything = set(), False
            return None if self._stopped else batch
