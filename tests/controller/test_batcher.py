"""The batcher's window: new pods hold it open for the idle time; the same pod seen again does not."""

from __future__ import annotations

import threading
import time

from karpy.controller.provisioning.batcher import Batcher


def _keep_triggering(batcher: Batcher, keys: list[str], every: float, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        i = 0
        while not stop.is_set():
            batcher.trigger(keys[i % len(keys)])
            i += 1
            time.sleep(every)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_updates_of_pods_already_in_the_batch_do_not_hold_it_open() -> None:
    batcher, stop = Batcher(idle_seconds=0.3, max_seconds=5.0), threading.Event()
    started = time.monotonic()
    thread = _keep_triggering(batcher, ["pod-a", "pod-b"], 0.05, stop)
    try:
        assert batcher.wait(timeout=5)
        assert time.monotonic() - started < 1.5            # closed on idle, not at the 5 s maximum
    finally:
        stop.set()
        thread.join()


def test_new_pods_hold_the_batch_open_until_the_maximum() -> None:
    batcher, stop = Batcher(idle_seconds=0.3, max_seconds=1.0), threading.Event()
    started = time.monotonic()
    thread = _keep_triggering(batcher, [f"pod-{i}" for i in range(1000)], 0.05, stop)
    try:
        assert batcher.wait(timeout=5)
        assert 0.9 < time.monotonic() - started < 3.0      # every trigger was a new pod: closed at the maximum
    finally:
        stop.set()
        thread.join()


def test_a_batch_hands_over_the_uids_of_its_pods() -> None:
    batcher = Batcher(idle_seconds=0.05, max_seconds=1.0)
    for uid in ("uid-a", "uid-b", "uid-a"):
        batcher.trigger(uid)
    batch = batcher.wait(timeout=5)
    assert batch is not None and batch.uids == {"uid-a", "uid-b"} and not batch.everything
    batcher.trigger()                                      # no pod: a second look at every pod that waits
    batch = batcher.wait(timeout=5)
    assert batch is not None and batch.uids == frozenset() and batch.everything
    assert batcher.wait(timeout=0.1) is None               # nothing new: no batch
