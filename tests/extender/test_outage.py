"""The extender with its API server gone: every verb still answers in shape, never 5xx."""

from __future__ import annotations

import pytest

from karpy.extender.app import create_app
from karpy.extender.view import ClusterView
from karpy.kubeclient.outage import OutageReporter
from karpy.kubeclient.raw import RawClient, api_client
from karpy.simulator.cluster import LocalCluster
from tests.builders import node, pod

pytestmark = pytest.mark.slow      # starts the local cluster


def test_filter_reports_the_gap_and_bind_an_error_while_the_api_server_is_down() -> None:
    cluster = LocalCluster(system_nodes=0, controllers=False)
    cluster.start()
    client = RawClient(api_client(host=cluster.url), outages=OutageReporter())
    view = ClusterView(client).start(timeout=2)     # no CRDs here: the provisioners informer never lists
    try:
        cluster.stop()
        app = create_app(view=view).test_client()
        removed = node("n1", provisioner="default", deleting=True)
        args = {"Pod": pod("web"), "Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [removed]},
                "NodeNames": None}
        answer = app.post("/scheduler/filter", json=args)
        assert answer.status_code == 200
        assert answer.get_json()["FailedNodes"] == {"n1": "node is being deleted (cordoned and draining)"}
        assert "default/web" in {g["pod"] for g in app.get("/capacity-gaps").get_json()}
        bound = app.post("/scheduler/bind", json={"PodName": "web", "PodNamespace": "default", "PodUID": "u", "Node": "n1"})
        assert bound.status_code == 200 and "cannot reach the API server at " + cluster.url in bound.get_json()["Error"]
    finally:
        view.stop()
        client.api_client.close()
