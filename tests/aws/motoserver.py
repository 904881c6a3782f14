"""A moto server on loopback whose answers to the catalog reads are serialised once per test run.

moto's EC2 catalog (about 1,400 instance types, 6,400 zone offerings and as many spot prices) is static data, but
moto builds and serialises its XML anew on every DescribeInstanceTypes, DescribeInstanceTypeOfferings and
DescribeSpotPriceHistory: several seconds each, for every provider a test builds. The answers are the same bytes
each time, so the first is kept and replayed; every other call, and boto3's parsing of every answer, is real.
"""

from __future__ import annotations

import io
import re
import threading
import urllib.parse
from typing import Any, Callable, Iterable

import requests
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

STATIC_ACTIONS = frozenset({"DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory"})
_REGION = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/")

_answers: dict[tuple[str, bytes], tuple[str, list[tuple[str, str]], bytes]] = {}   # shared by every server of the run
_answers_lock = threading.Lock()

StartResponse = Callable[..., Any]


class _ReplayStaticReads:
    """WSGI middleware: answers a static catalog read from the first identical answer moto gave."""

    def __init__(self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        action = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]
        if action not in STATIC_ACTIONS:
            return self.app(environ, start_response)
        region = _REGION.search(environ.get("HTTP_AUTHORIZATION", ""))
        key = (region.group(1) if region else "", body)
        with _answers_lock:
            kept = _answers.get(key)
        if kept is None:
            seen: list[Any] = []
            chunks = self.app(environ, lambda status, headers, exc_info=None: seen.extend((status, headers)))
            kept = (seen[0], list(seen[1]), b"".join(chunks))
            if kept[0].startswith("200"):
                with _answers_lock:
                    _answers[key] = kept
        status, headers, payload = kept
        start_response(status, headers)
        return [payload]


class MotoServer:
    """moto's EC2, SSM, IAM, SQS, ... over real HTTP on 127.0.0.1, on a port of the system's choosing."""

    def __init__(self) -> None:
        self._server: BaseWSGIServer = make_server("127.0.0.1", 0, _ReplayStaticReads(DomainDispatcherApplication(
            create_backend_app)), threaded=True, request_handler=MotoRequestHandler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)

    def __enter__(self) -> MotoServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def reset(self) -> None:
        """moto's state is per process: start each test clean."""
        requests.post(self.url + "/moto-api/reset", timeout=10).raise_for_status()
