"""A reconcile loop: runs `reconcile()` soon after something changed, and now and then anyway.

Changes are coalesced: a burst of watch events costs one pass, not one per
event. `reconcile()` returns seconds until it wants another look (or None).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger("kubeclient.loop")


class Loop:
    def __init__(self, name: str, reconcile: Callable[[], float | None], *, settle_seconds: float = 0.02,
                 resync_seconds: float = 5.0) -> None:
        self.name = name
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
        self._thread.join(timeout=5)

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.is_set():
            self._wake.wait(timeout=wait if wait > 0 else self._resync)
            if self._stop.is_set():
                return
            self._wake.clear()
            time.sleep(self._settle)           # let the rest of a burst arrive
            if not self.gate():
                wait = self._resync
                continue
            try:
                again = self._reconcile()
            except Exception:                  # the loop's edge: log, back off, go on
                log.exception("%s: reconcile failed", self.name)
                again = 1.0
            wait = self._resync if again is None else max(again, 0.01)
