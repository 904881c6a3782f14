"""`karpy webhook` as a process: refuses bad flags clearly, stops on SIGTERM within 5 s."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import start_server, stop_server

pytestmark = pytest.mark.slow      # starts karpy server processes


def test_missing_certificates_are_named(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "karpy.main", "webhook", "--port", "0", "--cert-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "tls.crt not found" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stops_within_five_seconds(cert_dir: Path, tmp_path: Path, sig: signal.Signals) -> None:
    server = start_server(["webhook", "--cert-dir", str(cert_dir), "--workers", "2"], ca=cert_dir / "ca.crt",
                          log=tmp_path / "log")
    started = time.monotonic()
    server.process.send_signal(sig)
    server.process.wait(timeout=10)
    assert time.monotonic() - started < 5
    children = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True).stdout
    assert children == ""


def test_serving_certificate_is_verified_by_clients(webhook_server: object) -> None:
    import requests

    from tests.conftest import Server

    assert isinstance(webhook_server, Server)
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(webhook_server.base_url + "/healthz", verify=True, timeout=5)  # system CAs do not know ours
    assert webhook_server.get("/readyz").text == "ok"


def test_a_client_that_reconnects_resumes_its_tls_session(webhook_server: object) -> None:
    import socket
    import ssl

    from tests.conftest import Server

    assert isinstance(webhook_server, Server)
    host, port = webhook_server.base_url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=str(webhook_server.ca))

    def get_healthz(session: ssl.SSLSession | None) -> tuple[ssl.SSLSession | None, bool | None]:
        with socket.create_connection((host, int(port)), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=host, session=session) as tls:
            tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := tls.recv(4096):      # TLS 1.3 tickets arrive after the handshake, with the answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200")
            return tls.session, tls.session_reused

    session, reused = get_healthz(None)
    assert not reused
    assert get_healthz(session)[1]          # the one worker's one TLS context knows the ticket it issued


def test_a_renewed_certificate_is_served_without_a_restart(cert_dir: Path, tmp_path: Path) -> None:
    """As when the kubelet refreshes the webhook's Secret volume: the files change, the server follows."""
    import shutil
    import socket
    import ssl

    import requests
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from karpy.certs.authority import generate, write
    from tests.expectations import eventually

    served_dir = tmp_path / "tls"
    shutil.copytree(cert_dir, served_dir)
    server = start_server(["webhook", "--cert-dir", str(served_dir), "--workers", "1", "--cert-check-seconds", "0.2"],
                          ca=served_dir / "ca.crt", log=tmp_path / "log")
    host, port = server.base_url.removeprefix("https://").split(":")

    def served() -> bytes:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with socket.create_connection((host, int(port)), timeout=5) as raw, context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)

    try:
        assert served() == (cert_dir / "tls.crt").read_bytes()
        renewed = generate()
        write(renewed, served_dir)
        eventually(lambda: served() == renewed.tls_crt, timeout=20)
        # still answering, now verified by the new CA, after the workers were replaced
        assert requests.get(server.base_url + "/readyz", verify=str(served_dir / "ca.crt"), timeout=5).text == "ok"
    finally:
        assert stop_server(server) == 0
