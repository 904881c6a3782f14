"""gunicorn's threaded worker with read deadlines, so slow clients cannot hold its threads.

gthread hands a connection to a thread once its first bytes arrive, and the
thread then reads the headers and the body with blocking reads that have no
end: twenty clients that send headers and then a byte every few seconds hold
twenty threads for as long as they like. Here every request has two
deadlines, for its headers (counted from the first read, TLS handshake
included) and for its body (counted from the end of the headers). A read
past its deadline ends the request: a client still sending headers gets
408 and the connection closes; a body cut short is seen by the application
as shorter than its Content-Length (answered 408 by `serving.body`).
Connections that send nothing wait in gthread's poller, not in a thread.
"""

from __future__ import annotations

import errno
import math
import select
import socket
import ssl
import time
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import TConn, ThreadWorker

_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
SEND_TIMEOUT_SECONDS = 30.0      # a client that stops reading its answer frees the thread after this
FOLLOW_UP_SECONDS = 0.002        # how long a thread waits for a keep-alive client's next request
FOLLOW_UP_REQUESTS = 64          # then the connection queues behind the others, however busy it is


def _next_request_ready(conn: DeadlineConn) -> bool:
    """Whether the client's next request is here (read ahead, decrypted, or on the socket) within FOLLOW_UP_SECONDS."""
    unreader = getattr(conn.parser, "unreader", None)
    if unreader is None or not hasattr(unreader, "buf"):
        return False                                          # HTTP/2: its own loop serves its streams
    if unreader.buf.getbuffer().nbytes:
        return True
    sock = conn.sock
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        readable, _, _ = select.select([sock], [], [], FOLLOW_UP_SECONDS)
    except (OSError, ValueError):
        return False
    return bool(readable)


class _DeadlineSocket:
    """The socket as the request parser sees it: each recv waits only until the connection's deadline."""

    def __init__(self, sock: socket.socket, conn: DeadlineConn) -> None:
        self._sock = sock
        self._conn = conn

    def recv(self, size: int) -> bytes:
        if self._conn.read_deadline == math.inf and self._conn.reading == "headers":
            self._conn.read_deadline = time.monotonic() + self._conn.header_seconds    # the clock starts at the first read
        left = self._conn.read_deadline - time.monotonic()
        if left <= 0:
            return self._conn.timed_out()
        self._sock.settimeout(left)
        try:
            data = self._sock.recv(size)
        except TimeoutError:
            return self._conn.timed_out()
        finally:
            self._sock.settimeout(SEND_TIMEOUT_SECONDS)
        self._conn.received = self._conn.received or bool(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class DeadlineConn(TConn):
    read_deadline = math.inf
    reading = "headers"
    header_seconds = math.inf
    received = False

    def init(self) -> None:
        fresh = not self.initialized
        super().init()
        unreader = getattr(self.parser, "unreader", None)     # HTTP/1; an HTTP/2 parser has its own stream timeouts
        if fresh and unreader is not None and hasattr(unreader, "sock"):
            unreader.sock = _DeadlineSocket(unreader.sock, self)

    def expect(self, part: str, seconds: float) -> None:
        """Start reading `part` ("headers" or "body"), which must arrive within `seconds`."""
        self.reading = part
        if part == "headers":
            self.read_deadline, self.header_seconds, self.received = math.inf, seconds, False
        else:
            self.read_deadline = time.monotonic() + seconds

    def close(self, graceful: bool = False) -> None:
        """Close without waiting on the client. gthread closes connections on its main thread, and its graceful
        close lingers up to 2 s reading what the client still sends: a slow client, which sends forever, would
        stop the worker accepting. Here the client's unread bytes already received are dropped (so the kernel
        does not answer them with a reset that could cut the response short), and nothing is waited for."""
        if graceful:
            try:
                self.sock.shutdown(socket.SHUT_WR)
                self.sock.setblocking(False)
                for _ in range(16):
                    if not self.sock.recv(4096):
                        break
            except OSError:
                pass
        util.close(self.sock)

    def timed_out(self) -> bytes:
        """What a read past the deadline returns: end of stream (after a 408 when headers were under way)."""
        if self.reading == "headers" and self.received:
            body = b'{"error": "Request Timeout", "message": "request headers not received in time"}'
            try:
                self.sock.sendall(_TIMED_OUT % (len(body), body))
            except OSError:
                pass
        self.reading = "done"
        return b""


class DeadlineThreadWorker(ThreadWorker):
    """Set `header_timeout` and `body_timeout` (seconds) on a subclass: `with_deadlines()` makes one."""

    header_timeout = 10.0
    body_timeout = 30.0

    def accept(self, listener: socket.socket) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        client_sock.setblocking(True)
        self.enqueue_req(DeadlineConn(self.cfg, client_sock, client_addr, listener.getsockname()))

    def handle(self, conn: DeadlineConn) -> Any:
        """Serve the connection's request, and the ones its client sends straight after it on this same thread.

        gthread gives a keep-alive connection back to its poller after every request, and takes it from there
        again for the next one: a pipe write, a wake-up of the main thread, two poller changes and a thread
        hand-off, more CPU than answering an admission request. A client that is sending its next request
        (the API server and kube-scheduler under load) keeps its thread for up to FOLLOW_UP_REQUESTS in a row;
        one that is not ready within FOLLOW_UP_SECONDS goes back to the poller as before."""
        for _ in range(FOLLOW_UP_REQUESTS):
            conn.expect("headers", self.header_timeout)
            result = super().handle(conn)
            if result is not True or not self.alive or not _next_request_ready(conn):
                return result
        return result

    def handle_request(self, req: Any, conn: DeadlineConn) -> Any:
        conn.expect("body", self.body_timeout)
        keepalive = super().handle_request(req, conn)
        return keepalive and conn.reading != "done"      # after a cut-short body, where the next request starts is unknown


def with_deadlines(*, header_timeout: float, body_timeout: float) -> type[DeadlineThreadWorker]:
    """A worker class whose requests must arrive within these deadlines."""
    return type("DeadlineThreadWorker", (DeadlineThreadWorker,),
                {"header_timeout": header_timeout, "body_timeout": body_timeout, "__module__": __name__})
