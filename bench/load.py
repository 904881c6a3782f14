"""A cheap HTTP/1.1 load generator for the serving benchmarks: the client must not eat the cores it measures.

On a 2-core machine a client built on http.client spends about as much CPU
per call as the server it measures. Here each client is a process of its own
(no GIL shared with the others) holding one keep-alive connection, sending
requests encoded once, before the clock starts, with one `sendall` each, and
reading the answer with a minimal parser (status line, Content-Length, body).
TLS clients share one session: each connection resumes it instead of paying a
full handshake. Each process reports its latencies, its errors and its own
CPU time, so a benchmark can print the client's cost beside the server's.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import socket
import ssl
import statistics
import time
from collections.abc import Sequence


def request_bytes(path: str, body: bytes, *, host: str = "127.0.0.1") -> bytes:
    """One complete POST, headers and body, ready to send as it is."""
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body


@dataclasses.dataclass
class Result:
    latencies: list[float]          # seconds, one per answered request
    errors: int
    cpu: float                      # the client processes' CPU seconds
    first_error: str = ""

    def summary(self, seconds: float) -> dict[str, float]:
        lat = sorted(self.latencies)
        if not lat:
            return {"rate": 0.0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
        cuts = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
        return {"rate": len(lat) / seconds, "p50": cuts[49] * 1000, "p99": cuts[98] * 1000, "max": lat[-1] * 1000}


class _Connection:
    def __init__(self, port: int, context: ssl.SSLContext | None, session: ssl.SSLSession | None) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = raw
        if context is not None:
            self.sock = context.wrap_socket(raw, server_hostname="localhost", session=session)
        self.buffer = b""

    def call(self, request: bytes) -> tuple[int, bytes]:
        """Send one request and read its whole answer: (status, body)."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = self.sock.recv(max(length - len(rest), 65536))
            if not chunk:
                raise ConnectionError("connection closed mid-answer")
            rest += chunk
        self.buffer = rest[length:]
        return status, rest[:length]

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed before an answer")
        self.buffer += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _client(port: int, requests: Sequence[bytes], start: float, seconds: float, ca: str | None, expect: bytes,
            out: mp.Queue[tuple[list[float], int, float, str]]) -> None:
    context = ssl.create_default_context(cafile=ca) if ca else None
    session = None
    latencies: list[float] = []
    errors, first_error = 0, ""
    conn = None
    while time.time() < start:                     # every client starts together, connected beforehand
        if conn is None:
            conn = _Connection(port, context, session)
        time.sleep(min(0.01, max(0.0, start - time.time())))
    cpu_before = time.process_time()
    deadline = time.monotonic() + seconds
    i, count = 0, len(requests)
    clock = time.perf_counter
    while time.monotonic() < deadline:
        request = requests[i % count]
        i += 1
        began = clock()
        try:
            if conn is None:
                conn = _Connection(port, context, session)
            status, body = conn.call(request)
            ok = status == 200 and expect in body
            if not ok and not first_error:
                first_error = f"HTTP {status}: {body[:200]!r}"
        except (OSError, ValueError, IndexError) as e:
            ok = False
            first_error = first_error or f"{type(e).__name__}: {e}"
            if conn is not None:
                conn.close()
            conn = None
        if ok:
            latencies.append(clock() - began)
        else:
            errors += 1
        if conn is not None and context is not None and session is None:
            session = conn.sock.session          # type: ignore[attr-defined]
    cpu = time.process_time() - cpu_before
    if conn is not None:
        conn.close()
    out.put((latencies, errors, cpu, first_error))


def run(port: int, requests: list[bytes], *, clients: int, seconds: float, ca: str | None = None,
        expect: bytes = b"") -> Result:
    """`clients` processes, each on its own keep-alive connection, cycling through `requests` for `seconds`."""
    ctx = mp.get_context("fork")
    out: mp.Queue[tuple[list[float], int, float, str]] = ctx.Queue()
    start = time.time() + 0.3 + 0.05 * clients
    procs = [ctx.Process(target=_client, args=(port, requests[k:] + requests[:k], start, seconds, ca, expect, out))
             for k in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    return Result(latencies=[x for r in results for x in r[0]], errors=sum(r[1] for r in results),
                  cpu=sum(r[2] for r in results), first_error=next((r[3] for r in results if r[3]), ""))
