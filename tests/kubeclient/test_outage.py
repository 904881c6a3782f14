"""API server outages: one clear line naming the server, bounded retries with backoff, and informers
that resume by themselves when the server is back."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError

from karpy.kubeclient.informer import Informer
from karpy.kubeclient.outage import ApiUnreachable, OutageReporter, backoff_seconds, reason_of
from karpy.kubeclient.raw import RawClient, api_client, path_of
from karpy.simulator.cluster import LocalCluster
from karpy.simulator.kubeconfig import write_kubeconfig
from tests.expectations import eventually

pytestmark = pytest.mark.slow      # starts the local cluster


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_explain_exits_nonzero_at_once_with_one_line_naming_the_unreachable_server(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(str(kubeconfig), url)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "karpy.main", "explain", "node", "ip-10-0-0-1", "--kubeconfig",
                             str(kubeconfig), "--catalog", "fake-400"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 30
    assert result.returncode != 0
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert url in lines[0] and "Traceback" not in lines[0]


def test_a_request_to_a_closed_port_fails_fast_as_unreachable_and_is_counted_once() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    reporter = OutageReporter()
    client = RawClient(api_client(host=url), outages=reporter)
    started = time.monotonic()
    for _ in range(3):
        with pytest.raises(ApiUnreachable) as caught:
            client.get(path_of("v1", "nodes"))
        assert caught.value.server == url
    assert time.monotonic() - started < 10                    # bounded retries, not urllib3's defaults
    assert (reporter.outages, reporter.failed_requests) == (1, 3)
    client.api_client.close()


@pytest.mark.parametrize(("error", "reason"), [
    pytest.param(MaxRetryError(None, "/api", NewConnectionError(None, "Failed to establish a new connection: [Errno 111] "  # type: ignore[arg-type]  # no pool: only the message matters
                                                             "Connection refused")), "Connection refused", id="refused"),
    pytest.param(ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer")),
                 "Connection reset by peer", id="reset-mid-request"),
    pytest.param(MaxRetryError(None, "/api", ReadTimeoutError(None, "/api", "Read timed out.")), "timed out",  # type: ignore[arg-type]  # no pool
                 id="read-timeout"),
])
def test_the_reason_for_an_unreachable_server_is_a_few_words(error: BaseException, reason: str) -> None:
    assert reason_of(error) == reason


def test_outage_is_said_once_then_once_per_interval_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    reporter = OutageReporter(repeat_seconds=60, monotonic=lambda: now[0])
    caplog.set_level(logging.INFO, logger="kubeclient.outage")
    for second in range(0, 150, 2):                           # a request every 2 s for 150 s
        now[0] = float(second)
        reporter.unreachable("https://api:6443", "Connection refused")
    assert [r.levelno for r in caplog.records] == [logging.ERROR] * 3    # at 0 s, 60 s, 120 s
    reporter.reachable("https://api:6443")
    reporter.reachable("https://api:6443")
    assert [r.levelno for r in caplog.records][3:] == [logging.INFO]
    assert not reporter.is_down("https://api:6443") and reporter.outages == 1


@given(st.integers(min_value=1, max_value=10_000), st.floats(min_value=0.01, max_value=5),
       st.floats(min_value=5, max_value=120))
def test_backoff_is_bounded_jittered_and_grows_to_its_cap(attempt: int, base: float, cap: float) -> None:
    delay = backoff_seconds(attempt, base=base, cap=cap)
    ceiling = min(cap, base * 2 ** min(attempt - 1, 64))
    assert ceiling / 2 <= delay <= ceiling <= cap


def test_informer_resumes_when_the_api_server_comes_back_and_the_outage_is_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    first = LocalCluster(system_nodes=0, controllers=False)
    first.start()
    port = first.server.server_address[1]
    reporter = OutageReporter()
    client = RawClient(api_client(host=first.url), outages=reporter)
    seen: list[str] = []
    informer = Informer(client, "v1", "namespaces")
    informer.handlers.append(lambda kind, obj: seen.append(obj["metadata"]["name"]))
    informer.start()
    second: LocalCluster | None = None
    try:
        assert informer.synced.wait(10)
        caplog.set_level(logging.INFO, logger="kubeclient.outage")
        first.stop()
        eventually(lambda: reporter.failed_requests >= 3, timeout=20)   # several relists failed meanwhile
        second = LocalCluster(port=port, system_nodes=0, controllers=False)   # back, on the same address
        second.start()
        client.create(path_of("v1", "namespaces"), {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "after-the-outage"}})
        eventually(lambda: "after-the-outage" in seen, timeout=20)
        assert reporter.outages == 1 and not reporter.is_down(first.url)
        outage_lines = [r for r in caplog.records if r.name == "kubeclient.outage"]
        assert [r.levelno for r in outage_lines] == [logging.ERROR, logging.INFO]   # went away; came back
    finally:
        informer.stop()
        client.api_client.close()
        if second is not None:
            second.stop()
        else:
            first.stop()


def test_a_loop_backs_off_while_the_server_is_unreachable_and_resumes_when_it_answers(
        caplog: pytest.LogCaptureFixture) -> None:
    from karpy.kubeclient.loop import Loop

    calls: list[float] = []
    down = [True]

    def reconcile() -> float | None:
        calls.append(time.monotonic())
        if down[0]:
            raise ApiUnreachable("http://127.0.0.1:1", "Connection refused")
        return None

    caplog.set_level(logging.INFO, logger="kubeclient.loop")
    loop = Loop("test", reconcile, resync_seconds=0.05)
    loop.start()
    try:
        time.sleep(4)
        # doubling pauses from 1 s (jittered to half or more): at most 5 tries in 4 s, not one per resync
        assert 2 <= len(calls) <= 5
        failed = len(calls)
        down[0] = False
        # after the pause already begun, passes succeed and run again at every resync
        eventually(lambda: len(calls) >= failed + 3, timeout=30)
    finally:
        loop.stop()
    assert not [r for r in caplog.records if r.name == "kubeclient.loop"]      # no traceback per failed pass
