"""The scheduler extender's Flask application: filter, prioritize, bind, capacity gaps, probes, metrics.

A thin HTTP adapter: bodies are read safely (size, content type, nesting) and
checked by `extender.wire`; the decisions are `extender.decisions`; what the
extender knows of the cluster is `extender.view` (absent without a cluster,
when every verb still answers in shape). Bad bodies get 400 with a JSON
error, never a 500; bind failures are `{"Error": ...}` with 200, as
kube-scheduler expects.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from typing import Any, Callable

from flask import Flask, Response, request
from prometheus_client import Counter, Histogram
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from karpy.extender.decisions import NodeFacts, NodeShape, facts_of, filter_nodes, gap_reason, score_nodes
from karpy.extender.gaps import Gaps
from karpy.extender.shapes import Shapes
from karpy.extender.view import ClusterView
from karpy.extender.wire import (
    BadArgs,
    ExtenderArgs,
    decode_args,
    decode_binding,
    encode,
    filter_result,
    host_priorities,
)
from karpy.kubeclient.raw import now_rfc3339
from karpy.serving.body import BadBody, read_body
from karpy.serving.probes import probes_blueprint

log = logging.getLogger("extender")
REQUESTS = Counter("karpy_extender_requests_total", "Extender calls answered", ["verb", "outcome"])
LATENCY = Histogram("karpy_extender_request_duration_seconds", "Time to answer an extender call", ["verb"],
                    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0))
GAPS = Counter("karpy_extender_capacity_gaps_total", "Pods the extender's filter left without a node")


@dataclasses.dataclass(frozen=True)
class Settings:
    max_body_bytes: int = 64 * 1024 * 1024   # a filter call with thousands of full Nodes is tens of MB


def _json(payload: Any, status: int = 200) -> Response:
    return Response(encode(payload), status=status, mimetype="application/json")


def facts_for(args: ExtenderArgs, *, shapes: Shapes, view: ClusterView | None,
              now: dt.datetime) -> tuple[list[str], list[NodeFacts]]:
    """The request's node names, and the facts about each: full Nodes as sent, else the watched ones."""
    nodes: list[NodeShape | str]
    if args.raw_nodes is not None:
        nodes = list(shapes.of(args.raw_nodes))
    elif view is not None:
        nodes = view.shapes(args.node_names or [])
    else:
        nodes = list(args.node_names or [])
    names = [n if isinstance(n, str) else n.name for n in nodes]
    if view is not None:
        return names, view.facts(nodes, now)
    return names, [NodeFacts(name=n) if isinstance(n, str) else facts_of(n, used=None, pending={}, lifetimes=None, now=now)
                   for n in nodes]


def endpoint(name: str, answer: Callable[[Any], Any], *, max_bytes: int) -> Callable[[], Response]:
    """A Flask view for verb `name`: reads the body (at most `max_bytes`), answers it with `answer`, counts the
    request, and turns a body or arguments that cannot be read into a 4xx naming what was wrong."""
    def view_fn() -> Response:
        started = time.perf_counter()
        try:
            result = answer(read_body(request, max_bytes=max_bytes))
        except RecursionError:
            REQUESTS.labels(name, "bad_request").inc()
            return _json({"error": "Bad Request", "message": "JSON nested too deeply"}, 400)
        except (BadBody, BadArgs) as e:
            REQUESTS.labels(name, "bad_request").inc()
            status = e.status if isinstance(e, BadBody) else 400
            return _json({"error": HTTP_STATUS_CODES[status], "message": str(e)}, status)
        REQUESTS.labels(name, "ok").inc()
        LATENCY.labels(name).observe(time.perf_counter() - started)
        return _json(result)
    view_fn.__name__ = name
    return view_fn


def create_app(settings: Settings | None = None, view: ClusterView | None = None,
               clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> Flask:
    settings = settings or Settings()
    app = Flask("karpy.extender")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    gaps = view.gaps if view is not None else Gaps()
    shapes = Shapes()

    def filter_(body: bytes) -> Any:
        args = decode_args(body)
        pod = args.needs()
        names, node_facts = facts_for(args, shapes=shapes, view=view, now=clock())
        passed, failed, kinds = filter_nodes(pod, node_facts)
        if not passed and failed:                 # karpy's knowledge left no node: a capacity gap
            reason = gap_reason(len(failed), kinds)
            GAPS.inc()
            if view is not None:
                view.report_gap(args.pod, reason)
            else:
                gaps.open(args.key, reason, now_rfc3339())
            log.info("Capacity gap for pod %s: %s", args.key, reason)
        return filter_result(args, names, passed, failed)

    def prioritize(body: bytes) -> Any:
        args = decode_args(body)
        pod = args.needs()
        names, node_facts = facts_for(args, shapes=shapes, view=view, now=clock())
        return host_priorities(names, score_nodes(pod, node_facts))

    def bind(body: bytes) -> Any:
        binding = decode_binding(body)
        if view is None:
            return {"Error": "this extender has no cluster to bind in (start it with --kubeconfig)"}
        error = view.bind(binding)
        if error:
            log.info("Could not bind pod %s/%s: %s", binding.pod_namespace, binding.pod_name, error)
        return {"Error": error}

    for verb, answer in (("filter", filter_), ("prioritize", prioritize), ("bind", bind)):
        app.add_url_rule(f"/scheduler/{verb}", verb, endpoint(verb, answer, max_bytes=settings.max_body_bytes), methods=["POST"])
    app.add_url_rule("/capacity-gaps", "capacity_gaps", lambda: _json([g.to_json() for g in gaps.items()]))
    app.register_blueprint(probes_blueprint())

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        return _json({"error": e.name, "message": e.description}, e.code or 500)

    @app.errorhandler(Exception)
    def unexpected(e: Exception) -> Response:  # the edge: log, answer, keep serving
        app.logger.exception("unexpected error answering %s", request.path)
        return _json({"error": "Internal Server Error", "message": str(e)}, 500)

    return app
