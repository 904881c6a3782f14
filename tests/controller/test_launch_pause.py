"""The launch and bind workers wait while a new batch's first chunk is planned, and never longer than the bound."""

from __future__ import annotations

import threading

import pytest

from karpy.controller.launch import launcher
from karpy.controller.launch.launcher import Pause


def waiter(pause: Pause) -> tuple[threading.Thread, threading.Event]:
    went_on = threading.Event()

    def work() -> None:
        pause.wait()
        went_on.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, went_on


def test_a_worker_goes_on_at_once_when_nothing_is_paused() -> None:
    thread, went_on = waiter(Pause())
    assert went_on.wait(5)
    thread.join(5)


def test_a_worker_waits_while_paused_and_goes_on_when_resumed() -> None:
    pause = Pause()
    pause.pause()
    thread, went_on = waiter(pause)
    assert not went_on.wait(0.2)
    pause.resume()
    assert went_on.wait(5)
    thread.join(5)


def test_a_pause_never_holds_a_worker_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "MAX_PAUSE_SECONDS", 0.3)
    pause = Pause()
    pause.pause()                                   # and never resumed
    thread, went_on = waiter(pause)
    assert went_on.wait(5)
    thread.join(5)
    later, went_on_later = waiter(pause)            # past the bound, the pause holds nobody
    assert went_on_later.wait(5)
    later.join(5)
