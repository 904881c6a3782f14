"""Probes and metrics: /healthz, /readyz and /metrics.

The controller serves them on their own ports (`serve_probes`, a small
threaded server); the webhook and the extender add them to their Flask apps
(`probes_blueprint`). Either way /healthz answers while the process runs and
/readyz once `ready()` says so.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from flask import Blueprint
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from karpy.serving.metrics import metrics_response


def probes_blueprint(ready: Callable[[], bool] = lambda: True) -> Blueprint:
    """/healthz, /readyz and /metrics (across gunicorn workers) for a Flask app."""
    bp = Blueprint("probes", __name__)
    bp.add_url_rule("/healthz", "healthz", lambda: ("ok", 200))
    bp.add_url_rule("/readyz", "readyz", lambda: ("ok", 200) if ready() else ("not ready", 503))
    bp.add_url_rule("/metrics", "metrics", metrics_response)
    return bp


def serve_probes(host: str, port: int, *, ready: Callable[[], bool], metrics: bool) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; returns the server (its port may have been picked)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(200, b"ok", "text/plain")
            elif self.path == "/readyz":
                ok = ready()
                self._reply(200 if ok else 503, b"ok" if ok else b"not ready", "text/plain")
            elif self.path == "/metrics" and metrics:
                self._reply(200, generate_latest(), CONTENT_TYPE_LATEST)
            else:
                self._reply(404, b"not found", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    return server
