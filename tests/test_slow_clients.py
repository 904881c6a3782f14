"""Slow clients cannot starve `karpy webhook` or `karpy extender`, and lose their connections at the read deadlines."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

from bench.slow_clients import SlowClients
from tests.builders import admission_review, provisioner
from tests.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.slow      # starts karpy server processes

BODY_TIMEOUT = 5.0
HEADER_TIMEOUT = 3.0
SERVERS: dict[str, tuple[list[str], str, Callable[[], Any]]] = {
    "webhook": (["webhook", "--workers", "2"], "/validate-karpenter-sh-v1alpha5-provisioner",
                lambda: admission_review(provisioner())),
    "extender": (["extender"], "/scheduler/filter",
                 lambda: {"Pod": {"metadata": {"name": "web"}}, "NodeNames": ["n1", "n2"]}),
}


@pytest.fixture(params=list(SERVERS))
def server(request: pytest.FixtureRequest, cert_dir: Path, tmp_path: Path) -> Iterator[tuple[Server, str, Callable[[], Any]]]:
    command, path, body = SERVERS[request.param]
    started = start_server([*command, "--cert-dir", str(cert_dir), "--header-timeout", str(HEADER_TIMEOUT),
                            "--body-timeout", str(BODY_TIMEOUT)], ca=cert_dir / "ca.crt", log=tmp_path / "log")
    yield started, path, body
    stop_server(started)


def test_normal_requests_are_answered_while_twenty_slow_clients_hold_connections(
        server: tuple[Server, str, Callable[[], Any]]) -> None:
    running, path, body = server
    with SlowClients(running.base_url, running.ca, path, count=20, every=2.0) as slow:
        answered = 0
        for _ in range(10):
            try:
                answered += requests.post(running.base_url + path, json=body(), verify=str(running.ca),
                                          timeout=2).status_code == 200
            except requests.RequestException:
                pass
            time.sleep(0.2)
        assert answered >= 9, f"{answered} of 10 normal requests answered"
        deadline = time.monotonic() + BODY_TIMEOUT + 5
        while any(c is None for c in slow.closed_after) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert all(c is not None and c < BODY_TIMEOUT + 3 for c in slow.closed_after), slow.closed_after
    assert all(a.startswith(b"HTTP/1.1 408") for a in slow.answers), {a[:40] for a in slow.answers}


def test_headers_sent_too_slowly_get_408_and_a_closed_connection(server: tuple[Server, str, Callable[[], Any]]) -> None:
    running, path, _ = server
    host, port = running.base_url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(running.ca))
    started = time.monotonic()
    answer = b""
    with socket.create_connection((host, int(port)), timeout=HEADER_TIMEOUT + 5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(f"POST {path} HTTP/1.1\r\n".encode())
        try:
            for _ in range(int(HEADER_TIMEOUT * 4)):
                tls.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.5)
                tls.setblocking(False)
                try:
                    answer += tls.recv(4096)
                except ssl.SSLWantReadError:
                    pass
                finally:
                    tls.setblocking(True)
                if answer:
                    break
            tls.settimeout(2)
            while chunk := tls.recv(4096):
                answer += chunk
        except OSError:
            pass
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert time.monotonic() - started < HEADER_TIMEOUT + 2


def test_a_client_sending_back_to_back_requests_does_not_keep_the_only_thread_from_others(
        cert_dir: Path, tmp_path: Path) -> None:
    """A keep-alive connection whose next request is already there is served on the same thread, but only for a
    bounded run of requests: a new client still gets its answer while it keeps sending."""
    running = start_server(["webhook", "--workers", "1", "--threads", "1", "--cert-dir", str(cert_dir)],
                           ca=cert_dir / "ca.crt", log=tmp_path / "log")
    path, body = SERVERS["webhook"][1], SERVERS["webhook"][2]()
    stop, statuses = threading.Event(), []

    def busy() -> None:
        with requests.Session() as session:
            while not stop.is_set():
                statuses.append(session.post(running.base_url + path, json=body, verify=str(running.ca),
                                             timeout=5).status_code)

    sender = threading.Thread(target=busy)
    try:
        sender.start()
        while len(statuses) < 20:
            time.sleep(0.05)
        started, served_before = time.monotonic(), len(statuses)
        answer = requests.post(running.base_url + path, json=body, verify=str(running.ca), timeout=5)
        waited = time.monotonic() - started
        while len(statuses) <= served_before and time.monotonic() - started < 5:
            time.sleep(0.05)                   # and the busy client is still served, taking turns with the new one
        served_meanwhile = len(statuses) - served_before
    finally:
        stop.set()
        sender.join(timeout=10)
        stop_server(running)
    assert answer.status_code == 200 and waited < 2.0, waited
    assert set(statuses) == {200} and served_meanwhile > 0
