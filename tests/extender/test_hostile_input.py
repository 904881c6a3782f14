"""Bodies kube-scheduler would never send get a 4xx with a JSON error on every path, never a 5xx."""

from __future__ import annotations

import json

import pytest
from flask.testing import FlaskClient

from karpy.extender.app import Settings, create_app
from tests.builders import node, pod

VERBS = ["/scheduler/filter", "/scheduler/prioritize", "/scheduler/bind"]
READ_ONLY = ["/capacity-gaps", "/healthz", "/metrics"]
LIMIT = 64 * 1024


@pytest.fixture
def client() -> FlaskClient:
    return create_app(Settings(max_body_bytes=LIMIT)).test_client()


def _args(nodes: list[dict[str, object]]) -> bytes:
    return json.dumps({"Pod": pod("web"), "Nodes": {"items": nodes}, "NodeNames": None}).encode()


_NAMED = json.dumps({"Pod": pod("web"), "NodeNames": ["n1"]}).encode()
_LABELLED = _args([node("n1", labels={"team": "MARK"})])

BAD_BODIES = [
    pytest.param(b"\xff\xfe\x00garbage", 400, "not valid JSON", id="binary"),
    pytest.param(b'{"Pod": "\xff"}', 400, "not UTF-8", id="latin-1-in-a-string"),
    pytest.param(_NAMED.replace(b'"n1"', b'"n\xed\xa0\x80"'), 400, "not UTF-8", id="surrogate-in-a-node-name"),
    pytest.param(_LABELLED.replace(b"MARK", b"\xc3\x28"), 400, "not UTF-8", id="bad-bytes-in-a-field-filter-skips"),
    pytest.param(b"", 400, "empty body", id="empty"),
    pytest.param(b"{not json", 400, "not valid JSON", id="not-json"),
    pytest.param(b"[" * 5_000 + b"]" * 5_000, 400, "", id="deep-nesting"),
    pytest.param(b"[" * (LIMIT + 1), 413, "over the limit", id="too-large"),
]


@pytest.mark.parametrize("path", VERBS)
@pytest.mark.parametrize(("body", "status", "words"), BAD_BODIES)
def test_bad_bodies_get_a_json_error(client: FlaskClient, path: str, body: bytes, status: int, words: str) -> None:
    response = client.post(path, data=body, content_type="application/json")
    assert response.status_code == status, response.data[:300]
    assert words in response.get_json()["message"]


@pytest.mark.parametrize("path", READ_ONLY)
def test_posting_bad_bytes_to_a_read_only_path_is_a_405_with_json(client: FlaskClient, path: str) -> None:
    response = client.post(path, data=b"\xff\xfe\x00garbage", content_type="application/json")
    assert response.status_code == 405
    assert response.get_json()["error"]


@pytest.mark.parametrize("path", VERBS)
def test_wrong_content_type_is_415_with_json(client: FlaskClient, path: str) -> None:
    response = client.post(path, data=_NAMED, content_type="text/plain")
    assert response.status_code == 415
    assert "application/json" in response.get_json()["message"]


@pytest.mark.parametrize("path", [*VERBS, *READ_ONLY, "/scheduler/%ff", "/nothing-here"])
def test_undecodable_path_or_query_never_costs_a_5xx(client: FlaskClient, path: str) -> None:
    response = client.post(path + "?x=%ff%fe", data=b"\xff", content_type="application/json")
    assert 400 <= response.status_code < 500
    assert response.get_json()["message"]


def test_bad_bytes_leave_the_next_request_answered(client: FlaskClient) -> None:
    client.post("/scheduler/filter", data=b'{"Pod": "\xff"}', content_type="application/json")
    answer = client.post("/scheduler/filter", data=_NAMED, content_type="application/json")
    assert answer.status_code == 200 and answer.get_json()["NodeNames"] == ["n1"]
