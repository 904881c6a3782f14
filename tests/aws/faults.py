"""A loopback HTTP proxy in front of moto that plays EC2's failures on the wire.

Every request is forwarded to moto unless a rule for its action answers it: with EC2's own error XML
(throttling), with a CreateFleet answer whose errorSet reports an instance type out of capacity, or by
forwarding and then never answering (a timeout after the launch went through). The proxy counts the
actions it saw and keeps the requests, so tests can say what was sent.
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import re
import threading
import time
import urllib.parse
import uuid
from typing import Callable
from xml.sax.saxutils import escape

OVERRIDE = re.compile(r"^LaunchTemplateConfigs\.1\.Overrides\.(\d+)\.(\w+)$")
EC2_NAMESPACE = "http://ec2.amazonaws.com/doc/2016-11-15/"


class Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        target = next((v for k, v in headers.items() if k.lower() == "x-amz-target"), None)
        if target:                                        # the JSON protocol (Pricing)
            self.action, self.params = target.rsplit(".", 1)[-1], {}
        else:                                             # the EC2 query protocol
            self.params = dict(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
            self.action = self.params.get("Action", "")

    def overrides(self) -> list[dict[str, str]]:
        """CreateFleet's overrides, in the order sent."""
        found: dict[int, dict[str, str]] = collections.defaultdict(dict)
        for key, value in self.params.items():
            m = OVERRIDE.match(key)
            if m:
                found[int(m.group(1))][m.group(2)] = value
        return [found[i] for i in sorted(found)]


@dataclasses.dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "text/xml"
    delay: float = 0.0                 # seconds to wait before answering (longer than the client waits: a timeout)


Rule = Callable[[Request, Callable[[Request], Reply]], Reply | None]   # (request, forward) -> reply, or None to forward


def ec2_error(code: str, message: str, status: int = 400) -> Reply:
    """EC2's error document, as the query API sends it."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>")
    return Reply(status, body.encode())


def throttled(_: Request, __: Callable[[Request], Reply]) -> Reply:
    return ec2_error("RequestLimitExceeded", "Request limit exceeded.", 503)


def out_of_capacity(instance_type: str | None = None) -> Rule:
    """CreateFleet as EC2 answers when `instance_type` (None: the cheapest asked for) has no capacity: the other
    overrides are tried (by moto) and the errorSet names each override of that type with InsufficientInstanceCapacity."""
    def rule(request: Request, forward: Callable[[Request], Reply]) -> Reply | None:
        overrides = request.overrides()
        name = instance_type or (overrides[0].get("InstanceType") if overrides else None)
        failed = [o for o in overrides if o.get("InstanceType") == name]
        if not failed:
            return None
        kept = [o for o in overrides if o.get("InstanceType") != name]
        params = {k: v for k, v in request.params.items() if not OVERRIDE.match(k)}
        for i, o in enumerate(kept, start=1):
            params.update({f"LaunchTemplateConfigs.1.Overrides.{i}.{k}": v for k, v in o.items()})
        lifecycle = request.params.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
        template = request.params.get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName", "")
        errors = "".join(
            "<item><launchTemplateAndOverrides><launchTemplateSpecification>"
            f"<launchTemplateName>{escape(template)}</launchTemplateName><version>$Latest</version>"
            f"</launchTemplateSpecification><overrides><instanceType>{escape(o['InstanceType'])}</instanceType>"
            f"<subnetId>{escape(o.get('SubnetId', ''))}</subnetId>"
            f"<availabilityZone>{escape(o.get('AvailabilityZone', ''))}</availabilityZone></overrides>"
            f"</launchTemplateAndOverrides><lifecycle>{lifecycle}</lifecycle>"
            "<errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>We currently do not have sufficient "
            f"{escape(o['InstanceType'])} capacity in the Availability Zone you requested "
            f"({escape(o.get('AvailabilityZone', ''))}).</errorMessage></item>" for o in failed).encode()
        if not kept:
            body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_NAMESPACE}">'
                    f"<requestId>{uuid.uuid4()}</requestId><fleetId>fleet-{uuid.uuid4().hex[:17]}</fleetId>"
                    "<errorSet>").encode() + errors + b"</errorSet><fleetInstanceSet/></CreateFleetResponse>"
            return Reply(200, body)
        reply = forward(Request(request.method, request.path, dict(request.headers),
                                urllib.parse.urlencode(params).encode()))
        body = reply.body.replace(b"</CreateFleetResponse>", b"<errorSet>" + errors + b"</errorSet></CreateFleetResponse>")
        return Reply(reply.status, body)
    return rule


def answer_lost(delay: float) -> Rule:
    """Forward (so the launch happens), then keep the answer longer than the client waits."""
    def rule(request: Request, forward: Callable[[Request], Reply]) -> Reply:
        reply = forward(request)
        return dataclasses.replace(reply, delay=delay)
    return rule


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.seen: collections.Counter[str] = collections.Counter()
        self.requests: list[Request] = []
        self._rules: dict[str, list[tuple[Rule, int | None]]] = collections.defaultdict(list)
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, self.path, {k: v for k, v in self.headers.items()}, self.rfile.read(length))
                reply = proxy._answer(request)
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True       # the client gave up waiting, as intended

            do_GET = do_POST

            def log_message(self, *_: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def on(self, action: str, rule: Rule, *, times: int | None = None) -> None:
        """Answer `action` with `rule`, `times` times (None: always)."""
        with self._lock:
            self._rules[action].append((rule, times))

    def sent(self, action: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.action == action]

    def _answer(self, request: Request) -> Reply:
        with self._lock:
            self.seen[request.action] += 1
            self.requests.append(request)
            rules = self._rules.get(request.action) or []
            chosen = None
            for i, (rule, times) in enumerate(rules):
                chosen = rule
                if times is not None:
                    rules[i] = (rule, times - 1)
                    if times - 1 == 0:
                        del rules[i]
                break
        reply = chosen(request, self._forward) if chosen else None
        return reply if reply is not None else self._forward(request)

    def _forward(self, request: Request) -> Reply:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)  # type: ignore[arg-type]  # an http:// URL: it has a host
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("content-length", "host", "connection")}
            connection.request(request.method, request.path, body=request.body, headers=headers)
            response = connection.getresponse()
            return Reply(response.status, response.read(), response.getheader("Content-Type") or "text/xml")
        finally:
            connection.close()
