"""gunicorn, embedded with explicit settings.

`serve()` runs a Flask app factory under gunicorn's master/worker model
with the settings below and nothing from a `./gunicorn.conf.py` or
GUNICORN_CMD_ARGS, so what runs is what the flags say.

The worker is gthread with read deadlines (`serving.worker`): connections
stay alive between requests (the API server and kube-scheduler reuse them),
idle ones wait in the worker's poller, and a client that sends its request
slowly loses it at the header or body deadline instead of holding a thread.
Threads are many (32 by default) because a thread waiting on a socket costs
little and each one a slow client holds is one fewer for everyone else; the
work itself is CPU-bound, so the process count, not the thread count, is what
uses the cores. One TLS context, built before the workers fork (gunicorn
builds one per connection), lets clients resume their TLS sessions with any
worker instead of paying a full handshake on every new connection.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
import tempfile
from typing import Any, Callable

from flask import Flask
from gunicorn import sock as gunicorn_sock
from gunicorn.app.base import BaseApplication

from karpy.serving.reload import CHECK_SECONDS, CertificateWatcher
from karpy.serving.worker import with_deadlines

GRACEFUL_TIMEOUT_SECONDS = 3  # inside the 5 s every karpy server has to stop
HEADER_TIMEOUT_SECONDS = 10.0
BODY_TIMEOUT_SECONDS = 30.0
_CONTEXTS: dict[tuple[str, str], ssl.SSLContext] = {}


def _one_tls_context(config: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """gunicorn's TLS context, built once (in the master, before the workers fork): session tickets and the session
    cache live in it."""
    key = (config.certfile, config.keyfile)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = default_factory()
    return _CONTEXTS[key]


def gunicorn_settings(
    *, sock: socket.socket, certfile: str | None, keyfile: str | None, workers: int, threads: int, preload: bool = True,
    header_timeout: float = HEADER_TIMEOUT_SECONDS, body_timeout: float = BODY_TIMEOUT_SECONDS,
    cert_check_seconds: float = CHECK_SECONDS,
) -> dict[str, Any]:
    """The complete gunicorn configuration karpy's servers run with."""
    settings: dict[str, Any] = {
        "bind": [f"fd://{sock.fileno()}"],
        "workers": workers,
        "worker_class": with_deadlines(header_timeout=header_timeout, body_timeout=body_timeout),
        "threads": threads,
        "keepalive": 30,                  # the API server keeps admission connections open
        "timeout": 30,                    # a worker silent this long is restarted
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "backlog": 1024,
        "accesslog": None,                # one line per admission would drown the logs
        "errorlog": "-",
        "loglevel": "info",
        "limit_request_line": 8190,
        "limit_request_fields": 100,
        "preload_app": preload,           # build the app once and fork; False: each worker builds its own (threads, watches)
        "control_socket_disable": True,   # gunicorn >= 24: no shared ~/.gunicorn socket between servers
        "worker_tmp_dir": worker_tmp_dir(),  # heartbeat files: RAM where there is some, never the (read-only) image
    }
    if certfile and keyfile:
        watcher = CertificateWatcher([certfile, keyfile], interval=cert_check_seconds)
        settings.update(certfile=certfile, keyfile=keyfile, ssl_context=_one_tls_context,
                        when_ready=lambda _arbiter: watcher.start())    # in the master, once it serves
    return settings


class _Embedded(BaseApplication):
    def __init__(self, app_factory: Callable[[], Flask], settings: dict[str, Any]) -> None:
        self._factory = app_factory
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._settings.items():
            if key in self.cfg.settings:  # settings newer than the installed gunicorn are skipped
                self.cfg.set(key, value)
        if self.cfg.is_ssl:
            # Built here, in the master, so every worker forks with the same context and so the same session-ticket
            # keys: a client resumes its TLS session whichever worker its next connection lands on. Built anew on
            # each (re)load: a SIGHUP still picks up a renewed certificate.
            _CONTEXTS.clear()
            gunicorn_sock.ssl_context(self.cfg)

    def load(self) -> Flask:
        return self._factory()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0 picks a free one), inheritable by workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def worker_tmp_dir() -> str:
    """/dev/shm when writable (heartbeats stay off disk), else the temporary directory ($TMPDIR, /tmp)."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def prepare_metrics_dir() -> str:
    """Point prometheus_client at a fresh multiprocess directory; call before anything imports
    prometheus_client (it picks its value store once, at import): workers' metrics would vanish."""
    if "prometheus_client" in sys.modules and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        raise RuntimeError("prometheus_client was imported before its multiprocess directory was set")
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="karpy-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def serve(
    app_factory: Callable[[], Flask], *, sock: socket.socket, certfile: str | None = None,
    keyfile: str | None = None, workers: int = 2, threads: int = 32, preload: bool = True,
    header_timeout: float = HEADER_TIMEOUT_SECONDS, body_timeout: float = BODY_TIMEOUT_SECONDS,
    cert_check_seconds: float = CHECK_SECONDS,
) -> None:
    """Serve until SIGTERM/SIGINT; returns after gunicorn's graceful stop. A certificate or key that changes on
    disk is served within `cert_check_seconds` (serving/reload.py)."""
    settings = gunicorn_settings(sock=sock, certfile=certfile, keyfile=keyfile, workers=workers, threads=threads,
                                 preload=preload, header_timeout=header_timeout, body_timeout=body_timeout,
                                 cert_check_seconds=cert_check_seconds)
    _Embedded(app_factory, settings).run()
