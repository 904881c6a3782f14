"""Calls run at once, each in a process of its own forked from this one.

A forked process shares this one's memory as it was at the fork (copied only where either writes), so a call
reads whatever it needs without it being sent; only its result comes back, pickled. What a call computes must
not depend on where it runs: run here or in a process of its own, it gives the same result, and a caller that
cannot fork (or whose process failed) runs it here instead.

Only for processes that run no other threads (`karpy plan`): a fork copies one thread, and a lock another
thread held stays held in the copy. Pure: no I/O but the pipes to the processes it starts, no logging.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


class ForkFailed(Exception):
    """A call's process could not start, failed or died before sending its result."""


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def run_forked(calls: Sequence[Callable[[], T]], *, processes: int) -> list[T]:
    """What `calls` return, in order, at most `processes` computing at once: of each such wave the first call here,
    the others each in a forked process (all here where this platform cannot fork). Raises ForkFailed when one of
    them does not send its result; an exception raised here is raised as it is."""
    wave = max(1, processes) if can_fork() else 1
    context = multiprocessing.get_context("fork") if wave > 1 else None
    results: list[T] = []
    for start in range(0, len(calls), wave):
        batch = calls[start:start + wave]
        started = []
        try:
            for call in batch[1:]:
                started.append(_start(context, call))
            results.append(batch[0]())
            for _, receiving in started:
                try:
                    ok, result = receiving.recv()
                except (EOFError, OSError) as e:
                    raise ForkFailed(f"a forked process died: {e}") from e
                if not ok:
                    raise ForkFailed(f"a forked process failed: {result}")
                results.append(result)
        finally:
            for process, receiving in started:
                receiving.close()
                process.terminate()                        # done already, unless this process failed first
                process.join()
    return results


def _start(context: Any, call: Callable[[], Any]) -> tuple[Any, Any]:
    """A forked process computing `call`, and the end of the pipe its result comes back on."""
    try:
        receiving, sending = context.Pipe(duplex=False)
        process = context.Process(target=_send_result, args=(call, sending), daemon=True)
        process.start()
    except OSError as e:                                   # out of processes or memory
        raise ForkFailed(f"could not fork: {e}") from e
    sending.close()
    return process, receiving


def _send_result(call: Callable[[], Any], sending: Any) -> None:
    try:
        outcome = (True, call())
    except Exception as e:  # reported to the process that asked, which raises ForkFailed
        outcome = (False, f"{type(e).__name__}: {e}")
    sending.send(outcome)
