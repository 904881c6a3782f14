"""The local cluster's HTTP API server: Kubernetes REST paths onto `simulator.api`.

Serves discovery, OpenAPI v3, version and health, and for every resource
get, list (label and field selectors, limit/continue, Tables for kubectl),
watch (from a resourceVersion, bookmarks, 410 when too old), create, update,
the three patch types, delete and deletecollection, and the status, binding,
eviction and scale subresources. Errors are Kubernetes `Status` objects;
nothing a client sends makes it answer 500.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from karpy.simulator import openapi, tables
from karpy.simulator.api import API
from karpy.simulator.patch import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from karpy.simulator.query import both, field_selector, indexed_equality, label_selector
from karpy.simulator.resources import Registry, ResourceType
from karpy.simulator.store import BadRequest, Gone, MethodNotAllowed, NotFound, Store, StoreError, encode

log = logging.getLogger("simulator.apiserver")
MAX_BODY_BYTES = 16 * 1024 * 1024
WATCH_TIMEOUT_SECONDS = 1800
_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?(?:/(?P<plural>[^/]+))?(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?/?$"
)


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, **({"details": details} if details else {}), "code": code}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # the listen backlog: a burst of clients connecting at once (a controller opening its connection pool while
    # the kubelets and scheduler do theirs) waits in the kernel instead of being refused at socketserver's 5
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], store: Store, registry: Registry) -> None:
        super().__init__(address, Handler)
        self.store, self.registry = store, registry
        self.api = API(store, registry)
        self.stopping = threading.Event()
        self.requests = RequestCounter()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"  # type: ignore[str-bytes-safe]  # AF_INET: the host is a str


class RequestCounter:
    """Requests served, by client (User-Agent), verb and resource: `apiserver_request_total` on /metrics,
    so a benchmark can say how many requests the autoscaler made."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}

    def count(self, user_agent: str, method: str, raw_path: str) -> None:
        path, _, query = raw_path.partition("?")
        m = _PATH.match(path)
        resource = (m["plural"] or "") if m else ""
        if m and m["sub"]:
            resource += "/" + m["sub"]
        verb = {"GET": "GET", "HEAD": "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE"}.get(method, method)
        if verb == "GET" and "watch=true" in query:
            verb = "WATCH"
        elif verb == "GET" and m and m["name"] is None:
            verb = "LIST"
        key = (user_agent.split(" ")[0], verb, resource)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def exposition(self) -> str:
        with self._lock:
            counts = sorted(self._counts.items())
        lines = ["# HELP apiserver_request_total Requests served, by client (User-Agent), verb and resource.",
                 "# TYPE apiserver_request_total counter"]
        for (client, verb, resource), n in counts:
            client = client.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'apiserver_request_total{{client="{client}",verb="{verb}",resource="{resource}"}} {n}')
        return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle and delayed ACKs add 40 ms to each reply
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def parse_request(self) -> bool:
        # a stopped server answers nothing more, not even on connections kept alive from before it stopped
        if self.server.stopping.is_set():
            self.close_connection = True
            return False
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:  # BaseHTTPRequestHandler's name
        log.debug("%s %s", self.address_string(), format % args)

    # --- plumbing ----------------------------------------------------------------------------
    def _send(self, code: int, body: Any, content_type: str = "application/json", headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else encode(body)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, e: StoreError) -> None:
        details = dict(e.details)
        self._send(e.status, status(e.status, e.reason, str(e), details or None))

    def _read_body(self) -> None:
        """Read the whole body before anything can fail, so the connection stays in step."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        self._raw = b""
        self._oversized = length > MAX_BODY_BYTES
        remaining = length
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 1 << 20))
            if not chunk:
                break
            if not self._oversized:
                self._raw += chunk
            remaining -= len(chunk)

    def _body(self) -> Any:
        if self._oversized:
            raise BadRequest(f"request body is larger than {MAX_BODY_BYTES} bytes")
        raw = self._raw
        if not raw:
            return None
        content_type = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        try:
            if content_type in ("application/yaml", APPLY_PATCH):
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError, RecursionError) as e:
            raise BadRequest(f"the request body is not valid {content_type}: {e}") from None

    def _dispatch(self) -> None:
        self.server.requests.count(self.headers.get("User-Agent") or "", self.command, self.path)
        try:
            self._read_body()
            self._route()
        except StoreError as e:
            self._error(e)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # the edge: a bug must not kill the server or hang the client
            log.exception("error serving %s %s", self.command, self.path)
            self._send(500, status(500, "InternalError", f"internal error: {e}"))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch

    # --- routing -----------------------------------------------------------------------------
    def _route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path
        reg = self.server.registry
        if self.command in ("GET", "HEAD"):
            fixed = self._fixed(path, reg)
            if fixed is not None:
                content_type = "application/octet-stream" if path == "/openapi/v2" else (
                    "text/plain" if isinstance(fixed, bytes) else "application/json")
                self._send(200, fixed, content_type)
                return
        m = _PATH.match(path)
        if m is None:
            raise NotFound(f"the server could not find the requested resource ({path})")
        group = m["group"] or ""
        version = m["core"] or m["version"]
        namespace, plural, name, sub = m["namespace"], m["plural"], m["name"], m["sub"]
        if plural is None:
            if namespace is not None and m["core"]:       # /api/v1/namespaces/{name}
                namespaces = reg.get("", "v1", "namespaces")
                assert namespaces is not None
                self._resource(namespaces, None, "", namespace, None, query)
                return
            doc = reg.resource_list(group, version)
            if doc is None:
                raise NotFound(f"the server could not find the requested resource ({path})")
            self._send(200, doc)
            return
        if m["core"] and plural == "bindings" and namespace and name is None and self.command == "POST":
            body = self._body() or {}
            self.server.api.bind(namespace, str((body.get("metadata") or {}).get("name", "")), body)
            self._send(201, status(201, "", "", None) | {"status": "Success"})
            return
        t = reg.get(group, version, plural)
        if t is None and m["core"] and namespace and plural in ("status", "finalize") and name is None:
            t, name, sub, namespace = reg.get("", "v1", "namespaces"), namespace, plural, None
        if t is None:
            raise NotFound(f"the server could not find the requested resource ({path})")
        ns = (namespace or "") if t.namespaced else ""
        self._resource(t, namespace if t.namespaced else None, ns, name, sub, query)

    def _fixed(self, path: str, reg: Registry) -> Any:
        if path in ("/healthz", "/readyz", "/livez"):
            return b"ok"
        if path == "/metrics":
            return self.server.requests.exposition().encode()
        if path == "/version":
            return openapi.VERSION
        if path == "/api":
            host, port = self.server.server_address[:2]
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"{host}:{port}"}]}  # type: ignore[str-bytes-safe]  # AF_INET
        if path == "/apis":
            return reg.api_groups()
        if path == "/openapi/v3":
            return openapi.index(reg)
        if path == "/openapi/v2":
            return openapi.v2_document()
        if path.startswith("/openapi/v3/"):
            doc = openapi.document(reg, path[len("/openapi/v3/"):])
            if doc is None:
                raise NotFound(f"the server could not find the requested resource ({path})")
            return doc
        if re.fullmatch(r"/apis/[^/]+", path):
            return self._api_group(reg, path.split("/")[2])
        return None

    @staticmethod
    def _api_group(reg: Registry, group: str) -> dict[str, Any]:
        versions = reg.group_versions().get(group)
        if not versions:
            raise NotFound(f"the server could not find the requested resource (/apis/{group})")
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}

    def _resource(self, t: ResourceType, list_namespace: str | None, ns: str, name: str | None, sub: str | None,
                  query: dict[str, str]) -> None:
        api = self.server.api
        dry_run = query.get("dryRun") == "All"
        strict = query.get("fieldValidation") == "Strict"
        if sub is not None and sub not in t.subresources:
            raise NotFound(f'the server could not find the requested resource ({t.plural}/{sub})')
        method = self.command
        if name is None:
            if method in ("GET", "HEAD"):
                if query.get("watch") in ("true", "1"):
                    self._watch(t, list_namespace, query)
                else:
                    self._list(t, list_namespace, query)
            elif method == "POST":
                self._send(201, api.create(t, ns, self._body() or {}, dry_run=dry_run, strict=strict))
            elif method == "DELETE":
                items, _ = api.list(t, list_namespace, self._predicate(query))
                for item in items:
                    try:
                        api.delete(t, item["metadata"].get("namespace", ""), item["metadata"]["name"], dry_run=dry_run)
                    except NotFound:
                        pass
                self._send(200, {"kind": f"{t.kind}List", "apiVersion": t.group_version, "metadata": {}, "items": items})
            else:
                raise MethodNotAllowed(f"the server does not allow this method on the requested resource ({method})")
            return
        if sub == "binding" and method == "POST":
            api.bind(ns, name, self._body() or {})
            self._send(201, status(201, "", "", None) | {"status": "Success"})
        elif sub == "eviction" and method == "POST":
            api.evict(ns, name, self._body() or {})
            self._send(201, status(201, "", "", None) | {"status": "Success"})
        elif sub == "scale":
            if method == "GET":
                self._send(200, api.scale(t, ns, name))
            elif method == "PUT":
                body = self._body() or {}
                self._send(200, api.set_scale(t, ns, name, (body.get("spec") or {}).get("replicas")))
            elif method == "PATCH":
                body = self._body() or {}
                replicas = (body.get("spec") or {}).get("replicas") if isinstance(body, dict) else None
                self._send(200, api.set_scale(t, ns, name, replicas))
            else:
                raise MethodNotAllowed(f"{method} is not allowed on scale")
        elif method in ("GET", "HEAD"):
            self._send_object(t, api.get(t, ns, name), query)
        elif method == "PUT":
            self._send(200, api.update(t, ns, name, self._body() or {}, subresource=sub, dry_run=dry_run, strict=strict))
        elif method == "PATCH":
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH):
                self._send(415, status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                       f"accepted media types include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}"))
                return
            self._send(200, api.patch(t, ns, name, self._body(), content_type, subresource=sub, dry_run=dry_run, strict=strict))
        elif method == "DELETE":
            options = self._body() or {}
            if "gracePeriodSeconds" in query:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            if "propagationPolicy" in query:
                options["propagationPolicy"] = query["propagationPolicy"]
            obj, gone = api.delete(t, ns, name, options=options if isinstance(options, dict) else {}, dry_run=dry_run)
            self._send(200 if gone or not obj["metadata"].get("deletionTimestamp") else 202, obj)
        else:
            raise MethodNotAllowed(f"the server does not allow this method on the requested resource ({method})")

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    def _send_object(self, t: ResourceType, obj: dict[str, Any], query: dict[str, str]) -> None:
        if self._wants_table():
            self._send(200, tables.table(t, [obj], obj["metadata"].get("resourceVersion", ""),
                                         include_object=query.get("includeObject", "Metadata")))
        else:
            self._send(200, obj)

    @staticmethod
    def _predicate(query: dict[str, str]) -> Any:
        return both(label_selector(query.get("labelSelector")), field_selector(query.get("fieldSelector")))

    def _list(self, t: ResourceType, namespace: str | None, query: dict[str, str]) -> None:
        items, rv = self.server.api.list(t, namespace, self._predicate(query), shared=True,
                                         field=indexed_equality(query.get("fieldSelector"), t.key))
        token = query.get("continue")
        if token:
            try:
                after = json.loads(base64.urlsafe_b64decode(token.encode()))
            except ValueError:
                raise BadRequest("invalid continue token") from None
            items = [i for i in items if [i["metadata"].get("namespace", ""), i["metadata"]["name"]] > after]
        next_token = None
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            items = items[:limit]
            last = items[-1]["metadata"]
            next_token = base64.urlsafe_b64encode(json.dumps([last.get("namespace", ""), last["name"]]).encode()).decode()
        if self._wants_table():
            self._send(200, tables.table(t, items, rv, include_object=query.get("includeObject", "Metadata"),
                                         continue_token=next_token))
            return
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if next_token:
            meta["continue"] = next_token
            meta["remainingItemCount"] = 0
        self._send(200, {"kind": f"{t.kind}List", "apiVersion": t.group_version, "metadata": meta, "items": items})

    def _watch(self, t: ResourceType, namespace: str | None, query: dict[str, str]) -> None:
        predicate = self._predicate(query)
        rv_text = query.get("resourceVersion") or ""
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or WATCH_TIMEOUT_SECONDS)
        if rv_text and not rv_text.isdigit():
            raise BadRequest(f"invalid resourceVersion {rv_text!r}")
        initial: list[dict[str, Any]] = []
        since: int | None
        if rv_text in ("", "0"):
            initial, since = self.server.api.list(t, namespace, predicate, shared=True,
                                                  field=indexed_equality(query.get("fieldSelector"), t.key))
        else:
            since = int(rv_text)
        wants_table = self._wants_table()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        out: list[bytes] = []           # chunks written together: a burst of events costs one send, not one each

        def emit(kind: str, obj: dict[str, Any], encoded: bytes | None = None) -> None:
            if wants_table and kind != "BOOKMARK" and kind != "ERROR":
                obj, encoded = tables.table(t, [obj], obj["metadata"].get("resourceVersion", ""),
                                            include_object=query.get("includeObject", "Metadata")), None
            data = b'{"type":"' + kind.encode() + b'","object":' + (encoded if encoded is not None else encode(obj)) + b"}\n"
            out.append(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            if len(out) >= 256:
                flush()

        def flush() -> None:
            if out:
                self.wfile.write(b"".join(out))
                self.wfile.flush()
                out.clear()

        try:
            for obj in initial:
                emit("ADDED", obj)
            flush()
            last_rv = since
            try:
                for batch in self.server.store.watch(t.key, since, stop=self.server.stopping, timeout=timeout):
                    if not batch and bookmarks and last_rv is not None:
                        emit("BOOKMARK", {"kind": t.kind, "apiVersion": t.group_version,
                                          "metadata": {"resourceVersion": str(last_rv)}})
                    for event in batch:
                        last_rv = event.resource_version
                        meta = event.object.get("metadata") or {}
                        if namespace is not None and meta.get("namespace") != namespace:
                            continue
                        if predicate is not None and not predicate(event.object):
                            continue
                        emit(event.type, event.object, event.encoded)
                    flush()
            except Gone as e:
                emit("ERROR", status(410, "Expired", str(e)))
            flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True
