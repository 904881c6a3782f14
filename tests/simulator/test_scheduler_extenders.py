"""The local cluster's scheduler calls extenders as kube-scheduler does, with kube-scheduler's JSON."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.builders import pod
from tests.expectations import eventually
from tests.simulator.conftest import start

pytestmark = pytest.mark.slow      # starts the local cluster


class Recorder(ThreadingHTTPServer):
    """A loopback extender that keeps only system-1, scores it 10, and records what it was sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/scheduler"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        verb = self.path.rsplit("/", 1)[-1]
        self.server.calls.append((verb, body))
        if verb == "filter":
            if body.get("NodeNames") is not None:
                answer: Any = {"NodeNames": [n for n in body["NodeNames"] if n == "system-1"],
                               "FailedNodes": {n: "karpy is removing this node" for n in body["NodeNames"] if n != "system-1"}}
            else:
                items = [n for n in body["Nodes"]["items"] if n["metadata"]["name"] == "system-1"]
                answer = {"Nodes": {"items": items}, "FailedNodes": {}}
        elif verb == "prioritize":
            names = body.get("NodeNames") or [n["metadata"]["name"] for n in body["Nodes"]["items"]]
            answer = [{"Host": n, "Score": 10} for n in names]
        else:
            answer = {"Error": "binding is the scheduler's job in this test"}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def extender() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("cache_capable", [True, False], ids=["node-names", "full-nodes"])
def test_extender_filters_and_prioritizes(tmp_path: Path, extender: Recorder, cache_capable: bool) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "extenders": [{"urlPrefix": extender.url, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1,
                       "nodeCacheCapable": cache_capable, "httpTimeout": "5s", "ignorable": True}]}))
    cluster, kube = start(tmp_path, system_nodes=2, scheduler_config=str(config))
    try:
        kube.core.create_namespaced_pod("default", pod("guided", cpu="100m"))
        eventually(lambda: kube.core.read_namespaced_pod("guided", "default").spec.node_name == "system-1")
        verbs = [v for v, _ in extender.calls]
        assert verbs[:2] == ["filter", "prioritize"]
        args = extender.calls[0][1]
        assert args["Pod"]["metadata"]["name"] == "guided"
        if cache_capable:
            assert sorted(args["NodeNames"]) == ["system-0", "system-1"] and "Nodes" not in args
        else:
            assert sorted(n["metadata"]["name"] for n in args["Nodes"]["items"]) == ["system-0", "system-1"]
    finally:
        kube.api_client.close()
        cluster.stop()


def test_an_ignorable_extender_that_is_down_does_not_stop_scheduling(tmp_path: Path) -> None:
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump({"extenders": [{"urlPrefix": "http://127.0.0.1:9/scheduler", "filterVerb": "filter",
                                                     "httpTimeout": "1s", "ignorable": True}]}))
    cluster, kube = start(tmp_path, system_nodes=1, scheduler_config=str(config))
    try:
        kube.core.create_namespaced_pod("default", pod("free"))
        eventually(lambda: kube.core.read_namespaced_pod("free", "default").spec.node_name == "system-0")
    finally:
        kube.api_client.close()
        cluster.stop()
