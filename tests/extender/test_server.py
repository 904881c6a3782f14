"""`karpy extender` over HTTPS without a cluster: kube-scheduler's JSON in both node modes, and hostile input."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.builders import node, pod
from tests.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.slow      # starts karpy server processes


@pytest.fixture(scope="module")
def extender(cert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("extender") / "extender.log"
    server = start_server(["extender", "--cert-dir", str(cert_dir), "--threads", "4"], ca=cert_dir / "ca.crt", log=log)
    yield server
    assert stop_server(server) == 0


def args(p: dict[str, Any], nodes: list[dict[str, Any]], *, names: bool) -> dict[str, Any]:
    if names:
        return {"Pod": p, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
    return {"Pod": p, "Nodes": {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": nodes}, "NodeNames": None}


def test_filter_answers_in_the_form_asked(extender: Server) -> None:
    nodes = [node("n1"), node("n2", provisioner="default", deleting=True)]
    full = extender.post("/scheduler/filter", json=args(pod("web"), nodes, names=False))
    assert full.status_code == 200 and full.headers["Content-Type"] == "application/json"
    body = full.json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["n1"]
    assert body["Nodes"]["items"][0] == nodes[0]                      # the Node as sent, whole
    assert body["NodeNames"] is None and body["Error"] == ""
    assert body["FailedNodes"] == {"n2": "node is being deleted (cordoned and draining)"}
    assert body["FailedAndUnresolvableNodes"] == {}

    named = extender.post("/scheduler/filter", json=args(pod("web"), nodes, names=True)).json()
    assert named["NodeNames"] == ["n1", "n2"]                         # without a cluster a name says nothing against it
    assert named["Nodes"] is None and named["FailedNodes"] == {}


def test_prioritize_scores_every_host_given_with_integers(extender: Server) -> None:
    nodes = [node("a"), node("b"), node("c", provisioner="default", deleting=True)]
    for names in (True, False):
        answer = extender.post("/scheduler/prioritize", json=args(pod("web"), nodes, names=names)).json()
        assert [h["Host"] for h in answer] == ["a", "b", "c"]
        assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in answer)
        assert answer[2]["Score"] == (5 if names else 0)        # a name alone, without a cluster, says nothing


def test_a_pod_no_node_is_left_for_is_a_capacity_gap(extender: Server) -> None:
    doomed = [node("d1", provisioner="default", deleting=True), node("d2", provisioner="default", deleting=True)]
    answer = extender.post("/scheduler/filter", json=args(pod("stranded", namespace="team-a"), doomed, names=False)).json()
    assert answer["Nodes"]["items"] == [] and set(answer["FailedNodes"]) == {"d1", "d2"}
    gaps = extender.get("/capacity-gaps").json()
    gap = next(g for g in gaps if g["pod"] == "team-a/stranded")
    assert gap["reason"] == "0/2 nodes are available: 2 node(s) are being removed by karpy."
    assert gap["since"].endswith("Z") and set(gap) == {"pod", "reason", "since"}


def test_bind_without_a_cluster_answers_an_error_not_a_failure(extender: Server) -> None:
    r = extender.post("/scheduler/bind", json={"PodName": "web", "PodNamespace": "default", "PodUID": "u1", "Node": "n1"})
    assert r.status_code == 200 and "no cluster" in r.json()["Error"]


@pytest.mark.parametrize("path, body, fragment", [
    ("/scheduler/filter", b"{not json", "not valid JSON"),
    ("/scheduler/filter", b"[]", "ExtenderArgs"),
    ("/scheduler/filter", b'{"Nodes": {"items": []}}', "Pod"),
    ("/scheduler/filter", b'{"Pod": {"metadata": {"name": "p"}}}', "Nodes or NodeNames"),
    ("/scheduler/filter", b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [7]}}', "Nodes.items[0]"),
    ("/scheduler/prioritize", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1, 2]}', "NodeNames"),
    ("/scheduler/prioritize", b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}, "NodeNames": []}', "cpu"),
    ("/scheduler/bind", b'{"PodName": "p", "PodNamespace": "default"}', "Node"),
    ("/scheduler/filter", b"[" * 100_000 + b"]" * 100_000, ""),
])
def test_malformed_requests_get_400_with_a_json_error(extender: Server, path: str, body: bytes, fragment: str) -> None:
    r = extender.post(path, data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert fragment in r.json()["message"]


def test_bodies_up_to_64_mib_are_taken_and_larger_refused(extender: Server) -> None:
    big = [node(f"n{i}", labels={"pad": "x" * 60}) for i in range(20_000)]     # ~12 MB
    r = extender.post("/scheduler/filter", json=args(pod("web"), big, names=False))
    assert r.status_code == 200 and len(r.json()["Nodes"]["items"]) == 20_000
    head = extender.raw_post("/scheduler/filter", f"Content-Length: {64 * 1024 * 1024 + 1}\r\n", "{")
    assert head.startswith("HTTP/1.1 413"), head[:200]
    assert extender.get("/healthz").status_code == 200


def test_probes_and_metrics(extender: Server) -> None:
    assert extender.get("/healthz").status_code == 200
    metrics = extender.get("/metrics").text
    assert 'karpy_extender_requests_total{outcome="ok",verb="filter"}' in metrics
    assert "karpy_extender_request_duration_seconds_bucket" in metrics


def test_full_nodes_too_small_for_the_pod_are_filtered_and_the_pod_is_a_gap_at_once(extender: Server) -> None:
    small = [node("s1", allocatable={"cpu": "1930m", "memory": "7Gi", "pods": "29"}),
             node("s2", allocatable={"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                  taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}])]
    answer = extender.post("/scheduler/filter", json=args(pod("big", namespace="team-b", cpu="3"), small, names=False)).json()
    assert answer["Nodes"]["items"] == []
    assert answer["FailedNodes"]["s1"] == "Insufficient cpu"
    assert "dedicated=batch:NoSchedule" in answer["FailedNodes"]["s2"]
    gap = next(g for g in extender.get("/capacity-gaps").json() if g["pod"] == "team-b/big")
    assert gap["reason"] == ("0/2 nodes are available: 1 Insufficient cpu, "
                             "1 node(s) had untolerated taint {dedicated: batch}.")
    fits = extender.post("/scheduler/filter", json=args(pod("small", cpu="1"), small, names=False)).json()
    assert [n["metadata"]["name"] for n in fits["Nodes"]["items"]] == ["s1"]


def test_a_node_sent_again_unchanged_and_then_changed_is_judged_by_what_it_says_now(extender: Server) -> None:
    n = node("grows", allocatable={"cpu": "1", "memory": "4Gi", "pods": "10"})
    first = extender.post("/scheduler/filter", json=args(pod("p2", cpu="2"), [n], names=False)).json()
    again = extender.post("/scheduler/filter", json=args(pod("p2", cpu="2"), [n], names=False)).json()
    assert first["FailedNodes"] == again["FailedNodes"] == {"grows": "Insufficient cpu"}
    n["status"]["allocatable"]["cpu"] = "4"
    grown = extender.post("/scheduler/filter", json=args(pod("p2", cpu="2"), [n], names=False)).json()
    assert grown["FailedNodes"] == {} and grown["Nodes"]["items"] == [n]


def test_a_body_that_is_not_valid_chunked_encoding_is_a_4xx(extender: Server) -> None:
    head = extender.raw_post("/scheduler/filter", "Transfer-Encoding: chunked\r\n", 'zz\r\n{"not": "a chunk size"}\r\n0\r\n\r\n')
    assert head.startswith("HTTP/1.1 400"), head[:200]
    assert extender.get("/healthz").status_code == 200
