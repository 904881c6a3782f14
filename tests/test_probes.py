"""The probes every karpy server answers: the controller's own server and the webhook's and extender's Flask apps."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

from flask import Flask

from karpy.serving.probes import probes_blueprint, serve_probes


def test_a_flask_app_is_ready_only_once_its_check_says_so() -> None:
    synced = threading.Event()
    app = Flask(__name__)
    app.register_blueprint(probes_blueprint(ready=synced.is_set))
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 503
    synced.set()
    assert client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 200


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_controllers_probe_server_answers_readiness_and_serves_metrics_only_when_asked() -> None:
    synced = threading.Event()
    probes = serve_probes("127.0.0.1", 0, ready=synced.is_set, metrics=False)
    metrics = serve_probes("127.0.0.1", 0, ready=lambda: True, metrics=True)
    try:
        base = f"http://127.0.0.1:{probes.server_address[1]}"
        assert (status(f"{base}/healthz"), status(f"{base}/readyz"), status(f"{base}/metrics")) == (200, 503, 404)
        synced.set()
        assert status(f"{base}/readyz") == 200
        assert status(f"http://127.0.0.1:{metrics.server_address[1]}/metrics") == 200
    finally:
        for server in (probes, metrics):
            server.shutdown()
            server.server_close()
