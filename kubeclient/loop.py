"""A reconcile loop: runs `reconcile()` soon after something changed, and now and then anyway.

Changes are coalesced: a burst of watch events costs one pass, not one per
event. `reconcile()` returns seconds until it wants another look (or None).
A failing pass is retried after a pause that grows with each failure in a
row (kubeclient/outage.py's backoff), so an API outage costs a few tries a
minute, and the loop resumes by itself when the server is back.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from karpy.kubeclient.outage import ApiUnreachable, backoff_seconds

log = logging.getLogger("kubeclient.loop")


class Loop:
    def __init__(self, name: str, reconcile: Callable[[], float | None], *, settle_seconds: float = 0.02,
                 resync_seconds: float = 5.0, busy_share: float | None = None) -> None:
        """`busy_share`: at most this share of the time spent in passes. A pass that took T seconds of CPU (its
        own thread's, not what it waited on) is followed by a rest of T * (1 / busy_share - 1), at most a second,
        so a pass over thousands of objects kicked by each of a stream of events does not take all the CPU of
        the process it shares."""
        self.name = name
        self._busy_share = busy_share
        self._reconcile = reconcile
        self.gate: Callable[[], bool] = lambda: True     # reconcile only while this says so (leadership)
        self._settle = settle_seconds
        self._resync = resync_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def kick(self, *_: object) -> None:
        """Something changed: reconcile soon (usable as an informer handler)."""
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:    # an operator built but never started stops too
            self._thread.join(timeout=5)

    def _run(self) -> None:
        wait = 0.0
        failures = 0                           # in a row: the pause after each grows, up to its cap
        while not self._stop.is_set():
            self._wake.wait(timeout=wait if wait > 0 else self._resync)
            if self._stop.is_set():
                return
            self._wake.clear()
            time.sleep(self._settle)           # let the rest of a burst arrive
            if not self.gate():
                wait = self._resync
                continue
            began = time.thread_time()
            try:
                again = self._reconcile()
                failures = 0
            except ApiUnreachable:             # said once by the outage reporter, not once per pass
                failures += 1
                again = backoff_seconds(failures, base=1.0, cap=30.0)
            except Exception:                  # the loop's edge: log, back off, go on
                log.exception("%s: reconcile failed", self.name)
                failures += 1
                again = backoff_seconds(failures, base=1.0, cap=30.0)
            wait = self._resync if again is None else max(again, 0.01)
            if self._busy_share:
                rest = min((time.thread_time() - began) * (1 / self._busy_share - 1), 1.0)
                if self._stop.wait(rest):
                    return
