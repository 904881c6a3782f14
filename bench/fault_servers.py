"""The serving faults of bench/faults.py: slow clients and malformed requests against `karpy webhook` and
`karpy extender`, each started on 127.0.0.1 over TLS with its default settings."""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import requests

from bench.measure import free_port, wait_for
from bench.slow_clients import SlowClients

WEBHOOK_PATHS = ["/validate-karpenter-sh-v1alpha5-provisioner", "/mutate-karpenter-sh-v1alpha5-provisioner",
                 "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate", "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate"]
EXTENDER_PATHS = ["/scheduler/filter", "/scheduler/prioritize", "/scheduler/bind"]
READ_ONLY = ["/healthz", "/readyz", "/metrics", "/capacity-gaps", "/no-such-path", "/scheduler/%ff"]


def admission_review() -> dict[str, Any]:
    obj = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "bench", "kind": {"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"},
                        "operation": "CREATE", "object": obj}}


SERVERS: dict[str, tuple[str, list[str], Callable[[], Any]]] = {
    "webhook": ("webhook", WEBHOOK_PATHS, admission_review),
    "extender": ("extender", EXTENDER_PATHS, lambda: {"Pod": {"metadata": {"name": "web"}}, "NodeNames": ["n1", "n2"]}),
}


class Server:
    """`karpy webhook` or `karpy extender` on 127.0.0.1 over TLS, with its default settings."""

    def __init__(self, command: str, certs: Path, work: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base_url, self.ca = f"https://127.0.0.1:{self.port}", certs / "ca.crt"
        env = {k: v for k, v in env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "karpy.main", command, "--cert-dir", str(certs), "--host", "127.0.0.1",
             "--port", str(self.port)], stdout=open(work / f"{command}.log", "wb"), stderr=subprocess.STDOUT, env=env)
        wait_for(lambda: requests.get(self.base_url + "/healthz", verify=str(self.ca), timeout=2).status_code == 200, 30,
                 f"karpy {command}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def certificates(work: Path) -> Path:
    out = work / "certs"
    subprocess.run([sys.executable, "-m", "karpy.main", "certs", "generate", "--out-dir", str(out), "--dns-name", "localhost",
                    "--dns-name", "127.0.0.1"], check=True, capture_output=True)
    return out


def slow_clients(name: str, *, clients: int, normal: int, every: float, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"karpy-fault-slow-{name}-"))
    command, paths, body = SERVERS[name]
    server = Server(command, certificates(work), work, env)
    try:
        with SlowClients(server.base_url, server.ca, paths[0], count=clients, every=2.0):
            answered, spent = 0, []
            for _ in range(normal):
                began = time.monotonic()
                try:
                    answered += requests.post(server.base_url + paths[0], json=body(), verify=str(server.ca),
                                              timeout=2).status_code == 200
                except requests.RequestException:
                    pass
                spent.append(time.monotonic() - began)
                time.sleep(max(0.0, every - spent[-1]))
        return {"answered": answered, "requests": normal, "slowest": max(spent)}
    finally:
        server.stop()


def malformed_requests(oversize: int) -> list[tuple[str, str, bytes | None, bytes]]:
    """(label, content type, body, raw request tail) for each malformed request; a raw tail goes out as written."""
    good = b'{"Pod": {"metadata": {"name": "web"}}, "NodeNames": ["n1"]}'
    bodies = {
        "not-utf8": b'{"Pod": "\xff\xfe"}', "binary": b"\xff\xfe\x00garbage", "surrogate": good.replace(b'"n1"', b'"n\xed\xa0\x80"'),
        "not-json": b"{not json", "empty": b"", "a-list": b"[1, 2, 3]", "a-string": b'"just a string"', "empty-object": b"{}",
        "wrong-types": b'{"Pod": 5, "NodeNames": "n1", "Nodes": [1], "request": "x", "kind": 7}',
        "deep-nesting": b"[" * 5000 + b"]" * 5000,
    }
    out: list[tuple[str, str, bytes | None, bytes]] = [(label, "application/json", body, b"") for label, body in bodies.items()]
    out.append(("wrong-content-type", "text/plain", good, b""))
    out += [
        ("oversized", "", None, f"Content-Type: application/json\r\nContent-Length: {oversize}\r\n\r\n".encode() + b"[" * 4096),
        ("bad-chunk-size", "", None, b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        ("truncated-chunk", "", None, b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{}\r\n0\r\n\r\n"),
        ("chunked-not-utf8", "", None, b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n\xff\xfe\xfd\xfc\r\n0\r\n\r\n"),
        ("length-and-chunked", "", None,
         b"Content-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
        ("bad-length", "", None, b"Content-Type: application/json\r\nContent-Length: -5\r\n\r\n{}"),
    ]
    return out


RAW_TIMEOUT = 40.0                         # past the servers' default 30 s body deadline


def raw_status(server: Server, path: str, tail: bytes) -> int | None:
    """The status of a hand-framed request, or None when the server closed without answering."""
    context = ssl.create_default_context(cafile=str(server.ca))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=RAW_TIMEOUT) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode() + tail)
            answer = b""
            while b"\r\n" not in answer and (chunk := tls.recv(4096)):
                answer += chunk
    except OSError:
        return None
    match = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    return int(match.group(1)) if match else None


def malformed(name: str, *, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"karpy-fault-malformed-{name}-"))
    command, paths, _ = SERVERS[name]
    server = Server(command, certificates(work), work, env)
    classes: Counter[str] = Counter()
    failures: list[str] = []
    def send(path: str, label: str, content_type: str, body: bytes | None, tail: bytes) -> tuple[str, int | None]:
        if body is None:
            return f"{path} {label}", raw_status(server, path, tail)
        try:
            return f"{path} {label}", requests.post(server.base_url + path + "?x=%ff", data=body, verify=str(server.ca),
                                                    headers={"Content-Type": content_type}, timeout=RAW_TIMEOUT).status_code
        except requests.RequestException:
            return f"{path} {label}", None
    try:
        # side by side: a truncated body is answered only at the server's body deadline
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda a: send(*a), [(path, *m) for path in [*paths, *READ_ONLY]
                                                          for m in malformed_requests(oversize=128 * 1024 * 1024)]))
        for what, status in answers:
            kind = "none" if status is None else f"{status // 100}xx"
            classes[kind] += 1
            if kind in ("5xx", "none"):
                failures.append(f"{what}: {status}")
        alive = requests.get(server.base_url + "/healthz", verify=str(server.ca), timeout=5).status_code == 200
        return {"requests": sum(classes.values()), **{k: classes[k] for k in ("2xx", "4xx", "5xx", "none")},
                "alive": alive, "failures": failures}
    finally:
        server.stop()
