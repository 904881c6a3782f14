"""API server outages: bounded retries, one clear line when the server goes away, one when it is back.

The official client retries through urllib3, which by default tries each
request several times and logs a warning per try; with informers relisting
and loops reconciling, an outage then floods the log while every caller
waits. Here a connection failure is retried twice, quickly, and then raised
as `ApiUnreachable` naming the server; `OutageReporter` turns the failures
of every caller in the process into one line when a server becomes
unreachable (repeated at most once per interval while it stays down) and
one when it answers again. Loops and informers back off between attempts
with `backoff_seconds` (exponential, capped, jittered) and resume by
themselves. What a loop does during an outage is the loop's business.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

from prometheus_client import Counter
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util.retry import Retry

log = logging.getLogger("kubeclient.outage")
OUTAGES_TOTAL = Counter("karpy_apiserver_outages_total", "Times an API server became unreachable", ["server"])
REPEAT_SECONDS = 60.0        # while a server stays down, say so again at most this often


class ApiUnreachable(ConnectionError):
    """The API server did not answer at all (refused, reset, timed out); nothing was decided by it."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"cannot reach the API server at {server} ({reason})")
        self.server, self.reason = server, reason


def request_retries() -> Retry:
    """urllib3's retry policy for API requests: connection failures (the request never left) are
    retried twice within about half a second; a request that may have been sent is never replayed
    (a POST could act twice); HTTP statuses are the caller's."""
    return Retry(total=2, connect=2, read=0, redirect=0, status=0, other=0, backoff_factor=0.2,
                 backoff_max=1.0, raise_on_status=False, raise_on_redirect=False)


def reason_of(error: BaseException) -> str:
    """The root cause of a connection failure in a few words ("Connection refused", "timed out")."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not e for e in chain):
        chain.append(current)
        # urllib3 keeps the cause in `reason` (MaxRetryError) or in its arguments (ProtocolError)
        inner = getattr(current, "reason", None)
        nested = [a for a in current.args if isinstance(a, BaseException)]
        current = inner if isinstance(inner, BaseException) else nested[0] if nested else \
            (current.__cause__ or current.__context__)
    for e in chain:
        if isinstance(e, OSError) and e.strerror:
            return str(e.strerror)
    for e in chain:           # a subclass of urllib3's timeout error, though most are refusals
        if isinstance(e, NewConnectionError):
            return str(e).split("] ")[-1].split(": ")[-1].strip() or "no connection"
    if any(isinstance(e, (TimeoutError, Urllib3Timeout)) for e in chain):
        return "timed out"
    return str(chain[-1]).split(": ")[-1].strip() or type(chain[-1]).__name__


def backoff_seconds(attempt: int, *, base: float = 0.5, cap: float = 30.0) -> float:
    """How long to wait before try number `attempt` (1, 2, ...) after failures: doubling from `base`,
    never past `cap`, with jitter (half to all of it) so many clients do not retry in step."""
    ceiling = min(cap, base * 2 ** min(max(attempt - 1, 0), 64))   # 2**64 passes any cap
    return random.uniform(ceiling / 2, ceiling)  # jitter, not security


class OutageReporter:
    """Which API servers are unreachable now, said once per outage (and once per interval while it lasts)."""

    def __init__(self, *, repeat_seconds: float = REPEAT_SECONDS, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.repeat_seconds = repeat_seconds
        self._monotonic = monotonic
        self._down: dict[str, tuple[float, float]] = {}   # server -> (down since, last said at)
        self._lock = threading.Lock()
        self.outages = 0                                   # outages seen by this reporter
        self.failed_requests = 0                           # requests that found a server unreachable

    def unreachable(self, server: str, reason: str) -> None:
        """A request to `server` failed at the connection level."""
        now = self._monotonic()
        with self._lock:
            self.failed_requests += 1
            since, said = self._down.get(server) or (None, 0.0)
            if since is None:
                self._down[server] = (now, now)
                self.outages += 1
            elif now - said >= self.repeat_seconds:
                self._down[server] = (since, now)
            else:
                return
        if since is None:
            OUTAGES_TOTAL.labels(server).inc()
            log.error("API server %s is unreachable (%s); retrying with backoff", server, reason)
        else:
            log.error("API server %s still unreachable after %.0fs (%s); retrying with backoff", server, now - since,
                      reason)

    def reachable(self, server: str) -> None:
        """A request to `server` got an answer (any HTTP status)."""
        if server not in self._down:          # the common case, without the lock
            return
        with self._lock:
            since, _ = self._down.pop(server, (None, None))
        if since is not None:
            log.info("API server %s is reachable again after %.1fs", server, self._monotonic() - since)

    def is_down(self, server: str) -> bool:
        return server in self._down


OUTAGES = OutageReporter()      # one per process: every client and informer of a server shares its outages
