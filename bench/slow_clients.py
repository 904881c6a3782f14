"""Clients that send a request's headers and then its body a byte at a time, to hold a server's connections."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path


class SlowClients:
    """`count` connections, each announcing `Content-Length: 100000` and then sending one byte every `every` seconds.

    `closed_after[i]` is how long connection i lasted until the server answered or closed it (None: still open);
    `answers[i]` is what the server sent on it."""

    def __init__(self, base_url: str, ca: Path | None, path: str, *, count: int = 20, every: float = 2.0) -> None:
        self.host, port = base_url.split("://", 1)[1].split(":")
        self.port, self.tls = int(port), base_url.startswith("https")
        self.ca, self.path, self.count, self.every = ca, path, count, every
        self.closed_after: list[float | None] = [None] * count
        self.answers: list[bytes] = [b""] * count
        self.answered_after: list[float | None] = [None] * count
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._hold, args=(i,), daemon=True) for i in range(count)]

    def __enter__(self) -> SlowClients:
        for t in self._threads:
            t.start()
        time.sleep(0.5)                              # all of them connected and past their headers
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _connect(self) -> socket.socket:
        raw = socket.create_connection((self.host, self.port), timeout=5)
        if not self.tls:
            return raw
        context = ssl.create_default_context(cafile=str(self.ca))
        return context.wrap_socket(raw, server_hostname=self.host)

    def _hold(self, i: int) -> None:
        started = time.monotonic()
        try:
            with self._connect() as sock:
                sock.sendall(f"POST {self.path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: 100000\r\n\r\n".encode())
                sock.settimeout(self.every)
                while not self._stop.is_set():
                    try:
                        data = sock.recv(4096)
                    except TimeoutError:
                        sock.sendall(b" ")             # one more byte of the body
                        continue
                    self.answers[i] += data
                    if data and self.answered_after[i] is None:
                        self.answered_after[i] = time.monotonic() - started
                    if not data:
                        break
        except OSError:
            pass                                       # reset or broken pipe: the server let go of it
        if not self._stop.is_set():
            self.closed_after[i] = time.monotonic() - started
