"""kubeclient.loop.Loop held to a share of the CPU: each pass is followed by a rest in proportion to its CPU time."""

from __future__ import annotations

import threading
import time

from karpy.kubeclient.loop import Loop


def test_a_loop_with_a_busy_share_rests_after_each_pass_in_proportion_to_its_cpu_time() -> None:
    passes: list[tuple[float, float, float]] = []            # (began, ended, CPU seconds) of each pass
    done = threading.Event()

    def reconcile() -> float | None:
        began, cpu = time.monotonic(), time.thread_time()
        while time.thread_time() - cpu < 0.02:               # 20 ms of CPU, as a pass over many objects takes
            pass
        passes.append((began, time.monotonic(), time.thread_time() - cpu))
        if len(passes) >= 4:
            done.set()
        return None

    loop = Loop("busy", reconcile, settle_seconds=0, busy_share=0.25)
    loop.start()
    try:
        while not done.is_set():                             # a stream of events: kicked all the time
            loop.kick()
            time.sleep(0.001)
    finally:
        loop.stop()
    for (_, ended, cpu), (began, _, _) in zip(passes, passes[1:]):
        assert began - ended >= cpu * 3 * 0.95               # share 1/4: three times the pass's CPU at rest

