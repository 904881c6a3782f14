"""Prometheus exposition that sees every gunicorn worker.

With PROMETHEUS_MULTIPROC_DIR set (the `karpy webhook`/`extender` commands
set it before forking workers), samples are aggregated across processes;
otherwise the process's own registry is served.
"""

from __future__ import annotations

import os

from flask import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess


def metrics_response() -> Response:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
