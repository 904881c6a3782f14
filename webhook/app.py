"""The admission webhook's Flask application: four admission paths, probes, metrics.

A thin HTTP adapter: each admission request's body is read safely (size,
content type, UTF-8, read deadline), handed to `webhook.admission`, and the
answer rendered. Bad bodies get HTTP 400 (or 408/413/415) with a JSON error;
nothing here answers 500 for anything a client sends.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from typing import Any, Callable

from flask import Blueprint, Flask, Response, jsonify, request
from prometheus_client import Counter, Histogram
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Request

from karpy.serving.body import BadBody, read_wsgi_body
from karpy.serving.probes import probes_blueprint
from karpy.webhook import admission

REQUESTS = Counter("karpy_webhook_requests_total", "Admission requests answered", ["path", "allowed"])
BAD_REQUESTS = Counter("karpy_webhook_bad_requests_total", "Requests that were not AdmissionReviews", ["path"])
LATENCY = Histogram(
    "karpy_webhook_request_duration_seconds", "Time to answer an admission request", ["path"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    aws: bool = True                       # --cloud-provider aws: AWS rules and defaults
    max_body_bytes: int = 8 * 1024 * 1024  # an AdmissionReview carries at most two ~1.5 MB objects


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings()
    app = Flask("karpy.webhook")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    routes = _routes(settings)
    app.register_blueprint(_admission_blueprint(routes, settings))
    app.register_blueprint(probes_blueprint())

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> tuple[Response, int]:
        return jsonify(error=e.name, message=e.description), e.code or 500

    @app.errorhandler(Exception)
    def unexpected(e: Exception) -> tuple[Response, int]:  # the edge: log, answer, keep serving
        app.logger.exception("unexpected error answering %s", request.path)
        return jsonify(error="Internal Server Error", message=str(e)), 500

    app.wsgi_app = _AdmissionFastPath(app.wsgi_app, routes, settings, app.logger)  # type: ignore[method-assign]  # Flask's documented way to wrap its WSGI app
    return app


def _routes(settings: Settings) -> dict[str, admission.Handler]:
    return {
        "/validate-karpenter-sh-v1alpha5-provisioner": functools.partial(
            admission.validate_provisioner_request, aws=settings.aws
        ),
        "/mutate-karpenter-sh-v1alpha5-provisioner": functools.partial(
            admission.mutate_provisioner_request, aws=settings.aws
        ),
        "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate": admission.validate_awsnodetemplate_request,
        "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate": admission.mutate_awsnodetemplate_request,
    }


class _AdmissionFastPath:
    """Admission POSTs answered straight from the WSGI environ; everything else goes to the Flask app.

    Flask's request machinery (contexts, URL matching, signals) and werkzeug's request and response objects
    cost more than validating a Provisioner, for a path that does one thing. What each admission path answers
    is `_answer`, which the Flask routes for the same paths call too (they are reached only by other methods,
    which they refuse with 405). Each path's metric children are looked up once, here, not per request."""

    def __init__(self, flask_app: Callable[..., Any], routes: dict[str, admission.Handler], settings: Settings,
                 logger: logging.Logger) -> None:
        self._flask, self._routes, self._settings, self._log = flask_app, routes, settings, logger
        self._metrics = {path: _PathMetrics(path) for path in routes}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        handler = self._routes.get(path)
        if handler is None or environ.get("REQUEST_METHOD") != "POST":
            return self._flask(environ, start_response)
        try:
            status, body = _answer_bytes(handler, environ, self._settings, self._metrics[path])
        except Exception as e:  # the edge: log, answer, keep serving
            self._log.exception("unexpected error answering %s", path)
            status, body = 500, _error_bytes(500, str(e))
        start_response(_STATUS_LINES[status], [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]


_STATUS_LINES = {code: f"{code} {HTTP_STATUS_CODES[code]}" for code in (200, 400, 408, 413, 415, 500)}


class _PathMetrics:
    def __init__(self, path: str) -> None:
        self.allowed, self.denied = REQUESTS.labels(path, "true"), REQUESTS.labels(path, "false")
        self.bad, self.latency = BAD_REQUESTS.labels(path), LATENCY.labels(path)


def _error_bytes(status: int, message: str) -> bytes:
    return json.dumps({"error": HTTP_STATUS_CODES[status], "message": message}).encode()


def _answer_bytes(handler: admission.Handler, environ: dict[str, Any], settings: Settings,
                  metrics: _PathMetrics) -> tuple[int, bytes]:
    """The status and body answering one admission request: an AdmissionReview, or a JSON error (400/408/413/415)."""
    started = time.perf_counter()
    try:
        answer, verdict = admission.review_bytes(read_wsgi_body(environ, max_bytes=settings.max_body_bytes), handler)
    except RecursionError:
        metrics.bad.inc()
        return 400, _error_bytes(400, "JSON nested too deeply")
    except (BadBody, admission.BadReview) as e:
        metrics.bad.inc()
        status = e.status if isinstance(e, BadBody) else 400
        return status, _error_bytes(status, str(e))
    except ValueError as e:                             # not JSON
        metrics.bad.inc()
        return 400, _error_bytes(400, f"body is not valid JSON: {e}")
    (metrics.allowed if verdict.allowed else metrics.denied).inc()
    metrics.latency.observe(time.perf_counter() - started)
    return 200, answer


def _answer(path: str, handler: admission.Handler, req: Request, settings: Settings) -> Response:
    """What the Flask route for an admission path answers (the same as the fast path)."""
    status, body = _answer_bytes(handler, req.environ, settings, _PathMetrics(path))
    return Response(body, status=status, mimetype="application/json")


def _admission_blueprint(routes: dict[str, admission.Handler], settings: Settings) -> Blueprint:
    bp = Blueprint("admission", __name__)
    for path, handler in routes.items():
        bp.add_url_rule(path, path.strip("/"), functools.partial(_answer, path, handler, request, settings),
                        methods=["POST"])
    return bp

