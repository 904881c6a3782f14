"""Shared fixtures: certificates, and a real `karpy webhook` (gunicorn, TLS) on loopback."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

pytest.register_assert_rewrite("tests.expectations")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [sys.executable, "-m", "karpy.main", "certs", "generate", "--out-dir", str(out),
         "--dns-name", "localhost", "--dns-name", "127.0.0.1"],
        check=True, capture_output=True,
    )
    return out


class Server:
    """A karpy server process on 127.0.0.1, reached over HTTPS verified against the test CA."""

    def __init__(self, base_url: str, ca: Path, process: subprocess.Popen[bytes]) -> None:
        self.base_url, self.ca, self.process = base_url, ca, process
        self.session = requests.Session()

    # verify= on every call: a session-level setting loses to REQUESTS_CA_BUNDLE from the environment
    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.post(self.base_url + path, timeout=10, verify=str(self.ca), **kwargs)

    def get(self, path: str) -> requests.Response:
        return self.session.get(self.base_url + path, timeout=10, verify=str(self.ca))

    def raw_post(self, path: str, headers: str, body: str, *, until: str = "") -> str:
        """A JSON POST written byte by byte (one `requests` would not send: a lying Content-Length, a broken
        chunk); the reply as text, its first read, or read on until it ends with `until`."""
        context = ssl.create_default_context(cafile=str(self.ca))
        host, port = self.base_url.removeprefix("https://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{headers}\r\n{body}".encode())
            reply = tls.recv(4096).decode(errors="replace")
            while until and not reply.rstrip().endswith(until):
                chunk = tls.recv(4096).decode(errors="replace")
                if not chunk:
                    break
                reply += chunk
        return reply


def start_server(args: list[str], *, ca: Path, log: Path) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}  # a fresh one per server
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "karpy.main", *args, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    server = Server(f"https://127.0.0.1:{port}", ca, process)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()}")
        try:
            if server.get("/healthz").status_code == 200:
                return server
        except requests.ConnectionError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not become healthy: {log.read_text()}")


def stop_process(process: subprocess.Popen[Any], timeout: float = 10) -> int | None:
    """SIGTERM, as a kubelet stops a container, then SIGKILL if it has not exited within `timeout`. Its exit code,
    or None when it had to be killed."""
    if process.poll() is not None:
        return process.returncode
    process.terminate()
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


def stop_server(server: Server) -> int:
    code = stop_process(server.process)
    if code is None:
        raise AssertionError(f"{server.process.args!r} did not stop within 10 s of SIGTERM")
    return code


@pytest.fixture(scope="session")
def webhook_server(cert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("webhook") / "webhook.log"
    server = start_server(["webhook", "--cert-dir", str(cert_dir), "--workers", "1", "--threads", "4"],
                          ca=cert_dir / "ca.crt", log=log)
    yield server
    stop_server(server)
