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

from karpy.serving.body import BadBody, read_body
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

    Flask's request machinery (contexts, URL matching, signals) cost more than validating a Provisioner, for a
    path that does one thing. What each admission path answers is `_answer`, which the Flask routes for the
    same paths call too (they are reached only by other methods, which they refuse with 405)."""

    def __init__(self, flask_app: Callable[..., Any], routes: dict[str, admission.Handler], settings: Settings,
                 logger: logging.Logger) -> None:
        self._flask, self._routes, self._settings, self._log = flask_app, routes, settings, logger

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        handler = self._routes.get(path)
        if handler is None or environ.get("REQUEST_METHOD") != "POST":
            return self._flask(environ, start_response)
        try:
            response = _answer(path, handler, Request(environ), self._settings)
        except Exception as e:  # the edge: log, answer, keep serving
            self._log.exception("unexpected error answering %s", path)
            response = _error(500, str(e))
        return response(environ, start_response)


def _error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": HTTP_STATUS_CODES[status], "message": message}), status=status,
                    mimetype="application/json")


def _answer(path: str, handler: admission.Handler, req: Request, settings: Settings) -> Response:
    """The answer to one admission request: an AdmissionReview, or a JSON error with 400/408/413/415."""
    started = time.perf_counter()
    try:
        answer, verdict = admission.review_bytes(read_body(req, max_bytes=settings.max_body_bytes), handler)
    except RecursionError:
        BAD_REQUESTS.labels(path).inc()
        return _error(400, "JSON nested too deeply")
    except (BadBody, admission.BadReview) as e:
        BAD_REQUESTS.labels(path).inc()
        return _error(e.status if isinstance(e, BadBody) else 400, str(e))
    except ValueError as e:                             # not JSON
        BAD_REQUESTS.labels(path).inc()
        return _error(400, f"body is not valid JSON: {e}")
    REQUESTS.labels(path, "true" if verdict.allowed else "false").inc()
    LATENCY.labels(path).observe(time.perf_counter() - started)
    return Response(answer, status=200, mimetype="application/json")


def _admission_blueprint(routes: dict[str, admission.Handler], settings: Settings) -> Blueprint:
    bp = Blueprint("admission", __name__)
    for path, handler in routes.items():
        bp.add_url_rule(path, path.strip("/"), functools.partial(_answer, path, handler, request, settings),
                        methods=["POST"])
    return bp

