"""gunicorn, embedded with explicit settings.

`serve()` runs a Flask app factory under gunicorn's master/worker model
with the settings below and nothing from a `./gunicorn.conf.py` or
GUNICORN_CMD_ARGS, so what runs is what the flags say. gthread workers keep
TLS connections alive between requests (the API server reuses them), which
matters more under admission load than the worker count.
"""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Any, Callable

from flask import Flask
from gunicorn.app.base import BaseApplication

GRACEFUL_TIMEOUT_SECONDS = 3  # inside the 5 s every karpy server has to stop


def gunicorn_settings(
    *, sock: socket.socket, certfile: str | None, keyfile: str | None, workers: int, threads: int, preload: bool = True
) -> dict[str, Any]:
    """The complete gunicorn configuration karpy's servers run with."""
    settings: dict[str, Any] = {
        "bind": [f"fd://{sock.fileno()}"],
        "workers": workers,
        "worker_class": "gthread",
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
        settings.update(certfile=certfile, keyfile=keyfile)
    return settings


class _Embedded(BaseApplication):  # type: ignore[misc]
    def __init__(self, app_factory: Callable[[], Flask], settings: dict[str, Any]) -> None:
        self._factory = app_factory
        self._settings = settings
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._settings.items():
            if key in self.cfg.settings:  # settings newer than the installed gunicorn are skipped
                self.cfg.set(key, value)

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
    """Point prometheus_client at a fresh multiprocess directory; call before importing apps."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="karpy-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def serve(
    app_factory: Callable[[], Flask], *, sock: socket.socket, certfile: str | None = None,
    keyfile: str | None = None, workers: int = 2, threads: int = 8, preload: bool = True,
) -> None:
    """Serve until SIGTERM/SIGINT; returns after gunicorn's graceful stop."""
    settings = gunicorn_settings(sock=sock, certfile=certfile, keyfile=keyfile, workers=workers, threads=threads,
                                 preload=preload)
    _Embedded(app_factory, settings).run()
