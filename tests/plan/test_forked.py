"""Calls run in forked processes: their results in order, the same as run here, and a failure reported."""

from __future__ import annotations

import functools
import os
import signal
from typing import Callable

import pytest

from karpy.controller.provisioning.scheduling import forked


def where(k: int) -> tuple[int, int]:
    return k, os.getpid()


def fails() -> None:
    raise ValueError("no")


def calls(*each: Callable[[], object]) -> list[Callable[[], object]]:
    return list(each)


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_results_come_back_in_order_the_first_of_each_wave_computed_here(processes: int) -> None:
    each: list[Callable[[], tuple[int, int]]] = [functools.partial(where, k) for k in range(5)]
    results = forked.run_forked(each, processes=processes)
    assert [k for k, _ in results] == [0, 1, 2, 3, 4]
    here = [k for k, pid in results if pid == os.getpid()]
    assert here == list(range(0, 5, processes))          # one per wave here, the others elsewhere


def test_a_call_that_fails_in_its_own_process_is_reported_and_one_that_fails_here_raises_as_it_is() -> None:
    with pytest.raises(forked.ForkFailed, match="ValueError: no"):
        forked.run_forked(calls(functools.partial(where, 0), fails), processes=2)
    with pytest.raises(ValueError, match="no"):
        forked.run_forked(calls(fails, functools.partial(where, 1)), processes=2)


def test_a_process_that_dies_before_sending_is_reported() -> None:
    with pytest.raises(forked.ForkFailed, match="died"):
        forked.run_forked(calls(functools.partial(where, 0), functools.partial(os._exit, 3)), processes=2)


def test_a_started_call_runs_in_a_process_of_its_own_on_the_state_at_its_start() -> None:
    state = {"k": 1}
    elsewhere = forked.start(lambda: (state["k"], os.getpid()), fork=True)
    here = forked.start(lambda: (state["k"], os.getpid()), fork=False)
    state["k"] = 2                                       # changed after the start: neither sees it
    assert elsewhere.result()[0] == 1 and elsewhere.result()[1] != os.getpid()
    assert here.result() == (1, os.getpid())


def test_a_started_call_whose_process_fails_or_dies_is_computed_here_when_its_result_is_asked() -> None:
    failing = forked.start(fails, fork=True)
    with pytest.raises(ValueError, match="no"):          # computed again here, raising as it does
        failing.result()
    state = {"dies": True}
    dying = forked.start(lambda: os._exit(3) if state["dies"] else os.getpid(), fork=True)
    state["dies"] = False
    assert dying.result() == os.getpid()


def test_a_call_started_only_forked_is_never_computed_here() -> None:
    here = os.getpid()
    with pytest.raises(forked.ForkFailed, match="ValueError: no"):
        forked.start(fails, fork=True, only_forked=True).result()
    with pytest.raises(forked.ForkFailed, match="died"):
        forked.start(lambda: os._exit(3) if os.getpid() != here else None, fork=True, only_forked=True).result()
    with pytest.raises(forked.ForkFailed, match="not to be forked"):
        forked.start(os.getpid, fork=False, only_forked=True).result()
    assert forked.start(os.getpid, fork=True, only_forked=True).result() != here


def test_a_forked_process_runs_at_its_callers_priority_leaves_interrupts_to_it_and_ends_quietly_when_terminated() -> None:
    pid, on_interrupt, on_terminate, niceness = forked.start(
        lambda: (os.getpid(), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), os.nice(0)),
        fork=True).result()
    assert pid != os.getpid()
    assert on_interrupt == signal.SIG_IGN and on_terminate == signal.SIG_DFL
    assert niceness == os.nice(0)
