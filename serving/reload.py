"""Serving certificates that change on disk are picked up: a renewed Secret, mounted as a volume, reaches the
running servers without a restart.

The kubelet swaps a Secret volume's files in one atomic rename when the Secret changes. A thread in gunicorn's
master reads the certificate and key every few seconds and, when their content differs from what was loaded,
sends the master SIGHUP: gunicorn then rebuilds its TLS context from the files (server.py) and replaces its
workers gracefully, so connections in flight finish on the old certificate. What changed is decided purely
(`fingerprint`); the thread only reads and signals.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Sequence

log = logging.getLogger("serving")
CHECK_SECONDS = 10.0       # the kubelet itself takes up to a minute or so to refresh a Secret volume


def fingerprint(paths: Sequence[str | Path]) -> str | None:
    """The digest of the files' contents together; None while one cannot be read (mid-swap, or gone)."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            digest.update(Path(path).read_bytes())
        except OSError:
            return None
        digest.update(b"\0")
    return digest.hexdigest()


class CertificateWatcher:
    """Signals this process with SIGHUP when the files' contents change; checks every `interval` seconds."""

    def __init__(self, paths: Sequence[str | Path], *, interval: float = CHECK_SECONDS) -> None:
        self.paths, self.interval = list(paths), interval
        self.loaded = fingerprint(self.paths)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="certificate-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = fingerprint(self.paths)
            if now is None or now == self.loaded:
                continue
            self.loaded = now
            log.info("Serving certificate %s changed; reloading", self.paths[0])
            os.kill(os.getpid(), signal.SIGHUP)
