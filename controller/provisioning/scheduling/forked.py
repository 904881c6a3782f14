"""Calls shared out among this process and others forked from it, so that they run at once (run_forked), or
started in a process of their own while this one goes on (start).

A forked process shares this one's memory as it was at the fork (copied only where either writes), so a call
reads whatever it needs without it being sent; only its result comes back, pickled. What a call computes must
not depend on where it runs nor on the calls run before it: run here or in a process of its own, it gives the
same result, and a caller that cannot fork (or whose process failed) runs it here instead.

Only for processes that run no other threads (`karpy plan`): a fork copies one thread, and a lock another
thread held stays held in the copy. Pure: no I/O but the pipes to the processes it starts, no logging.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any, Callable, Generic, Sequence, TypeVar

T = TypeVar("T")


# A forked process runs at its caller's priority. A lower one (nice 10) made `karpy plan` of 20,000 pods no faster
# alone (as long, over 6 alternating runs) and starved its chunks beside other busy processes: 20.8 s against
# 14.6 s with one CPU-bound process running alongside.


class ForkFailed(Exception):
    """A call's process could not start, failed or died before sending its result."""


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def run_forked(calls: Sequence[Callable[[], T]], *, processes: int) -> list[T]:
    """What `calls` return, in order. They are dealt in turn to `processes` processes (all to this one where this
    platform cannot fork): this one computes the first and every processes-th after it, each other one, forked, its
    share, one call after another. Raises ForkFailed when a process does not send its results; an exception raised
    here is raised as it is."""
    count = min(max(1, processes) if can_fork() else 1, len(calls))
    if count <= 1:
        return [call() for call in calls]
    context = multiprocessing.get_context("fork")
    shares: list[list[T]] = [[] for _ in range(count)]
    started = []
    try:
        for k in range(1, count):
            started.append(_start(context, calls[k::count]))
        shares[0] = [call() for call in calls[::count]]
        for k, running in enumerate(started, start=1):
            shares[k] = _receive(running)
    finally:
        for running in started:
            _end(running)                                  # done already, unless this process failed first
    return [shares[k % count][k // count] for k in range(len(calls))]


class Started(Generic[T]):
    """A call started by `start`: running in a forked process, or already computed here."""

    def __init__(self, call: Callable[[], T], *, fork: bool, only_forked: bool = False) -> None:
        self._call = call
        self._only_forked = only_forked
        self._running: tuple[Any, Any] | None = None
        self._done: tuple[T] | None = None
        self._failure: ForkFailed | None = None          # why a call started only_forked has no result
        if fork and can_fork():
            try:
                self._running = _start(multiprocessing.get_context("fork"), [call])
                return
            except ForkFailed as e:
                self._failure = e
        else:
            self._failure = ForkFailed("this platform cannot fork" if fork else "not to be forked")
        if not only_forked:
            self._done = (call(),)

    def result(self) -> T:
        """What the call returned. A process that failed or died has it computed here, now: from this process's
        state as it is now, not as it was at the start (the caller says whether that may differ); or, started
        `only_forked`, raises ForkFailed."""
        if self._done is None:
            if self._running is not None:
                running, self._running = self._running, None
                try:
                    self._done = (_receive(running)[0],)
                except ForkFailed as e:
                    self._failure = e
                finally:
                    _end(running)
            if self._done is None:
                if self._only_forked:
                    assert self._failure is not None
                    raise self._failure
                self._done = (self._call(),)
        return self._done[0]


def start(call: Callable[[], T], *, fork: bool, only_forked: bool = False) -> Started[T]:
    """`call` started now: in a forked process of its own, which works on this process's state as it is now, when
    `fork` and this platform can (this process goes on meanwhile); else computed here at once, so that either way it
    works on the state as it is now. `.result()` waits for what it returns. `only_forked`: never computed here (a
    call that must not run in this process, or not twice): where it could not fork, or its process failed,
    `.result()` raises ForkFailed."""
    return Started(call, fork=fork, only_forked=only_forked)


def _start(context: Any, calls: Sequence[Callable[[], Any]]) -> tuple[Any, Any]:
    """A forked process computing `calls` one after another, and the end of the pipe their results come back on."""
    try:
        receiving, sending = context.Pipe(duplex=False)
        process = context.Process(target=_send_results, args=(calls, sending), daemon=True)
        process.start()
    except OSError as e:                                   # out of processes or memory
        raise ForkFailed(f"could not fork: {e}") from e
    sending.close()
    return process, receiving


def _receive(running: tuple[Any, Any]) -> list[Any]:
    """What the process of `running` (from _start) sent: its calls' results; ForkFailed when it failed or died."""
    _, receiving = running
    try:
        ok, result = receiving.recv()
    except (EOFError, OSError) as e:
        raise ForkFailed(f"a forked process died: {e}") from e
    if not ok:
        raise ForkFailed(f"a forked process failed: {result}")
    return list(result)


def _end(running: tuple[Any, Any]) -> None:
    """End the process of `running` (from _start), done or not, and close its pipe."""
    process, receiving = running
    receiving.close()
    process.terminate()
    process.join()


def _send_results(calls: Sequence[Callable[[], Any]], sending: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)     # ended when done (or when the caller fails): quietly
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # ^C reaches the whole process group: the caller's to handle
    outcome: tuple[bool, object]
    try:
        outcome = (True, [call() for call in calls])
    except Exception as e:  # reported to the process that asked, which raises ForkFailed
        outcome = (False, f"{type(e).__name__}: {e}")
    sending.send(outcome)
