"""The admission webhook's Flask application: four admission paths, probes, metrics.

A thin HTTP adapter: each view reads the body safely (size, content type,
nesting), hands it to `webhook.admission`, and renders the answer. Bad
bodies get HTTP 400 (or 413/415) with a JSON error; nothing here answers 500
for anything a client sends.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

from flask import Blueprint, Flask, Response, jsonify, request
from prometheus_client import Counter, Histogram
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from karpy.webhook import admission
from karpy.serving.body import BadBody, read_body
from karpy.serving.metrics import metrics_response

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
    app.register_blueprint(_admission_blueprint(settings))
    app.register_blueprint(_probes_blueprint())

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> tuple[Response, int]:
        return jsonify(error=e.name, message=e.description), e.code or 500

    @app.errorhandler(Exception)
    def unexpected(e: Exception) -> tuple[Response, int]:  # the edge: log, answer, keep serving
        app.logger.exception("unexpected error answering %s", request.path)
        return jsonify(error="Internal Server Error", message=str(e)), 500

    return app


def _admission_blueprint(settings: Settings) -> Blueprint:
    bp = Blueprint("admission", __name__)
    routes: dict[str, admission.Handler] = {
        "/validate-karpenter-sh-v1alpha5-provisioner": functools.partial(
            admission.validate_provisioner_request, aws=settings.aws
        ),
        "/mutate-karpenter-sh-v1alpha5-provisioner": functools.partial(
            admission.mutate_provisioner_request, aws=settings.aws
        ),
        "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate": admission.validate_awsnodetemplate_request,
        "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate": admission.mutate_awsnodetemplate_request,
    }
    for path, handler in routes.items():
        bp.add_url_rule(path, path.strip("/"), _admission_view(path, handler, settings), methods=["POST"])
    return bp


def _admission_view(path: str, handler: admission.Handler, settings: Settings) -> Callable[[], Any]:
    def view() -> Response | tuple[Response, int]:
        started = time.perf_counter()
        try:
            answer, verdict = admission.review_bytes(read_body(request, max_bytes=settings.max_body_bytes), handler)
        except RecursionError:
            BAD_REQUESTS.labels(path).inc()
            return jsonify(error="Bad Request", message="JSON nested too deeply"), 400
        except (BadBody, admission.BadReview) as e:
            BAD_REQUESTS.labels(path).inc()
            status = e.status if isinstance(e, BadBody) else 400
            return jsonify(error=HTTP_STATUS_CODES[status], message=str(e)), status
        except ValueError as e:                             # not JSON
            BAD_REQUESTS.labels(path).inc()
            return jsonify(error="Bad Request", message=f"body is not valid JSON: {e}"), 400
        REQUESTS.labels(path, str(verdict.allowed).lower()).inc()
        LATENCY.labels(path).observe(time.perf_counter() - started)
        return Response(answer, status=200, mimetype="application/json")

    return view


def _probes_blueprint() -> Blueprint:
    bp = Blueprint("probes", __name__)
    bp.add_url_rule("/healthz", "healthz", lambda: ("ok", 200))
    bp.add_url_rule("/readyz", "readyz", lambda: ("ok", 200))
    bp.add_url_rule("/metrics", "metrics", metrics_response)
    return bp
