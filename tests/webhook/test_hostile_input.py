"""Bodies that are not AdmissionReviews get a 4xx with a JSON error, never a 5xx or a hang."""

from __future__ import annotations

import json

import pytest
from flask.testing import FlaskClient

from karpy.webhook.app import Settings, create_app
from tests.builders import admission_review, provisioner
from tests.conftest import Server
from tests.expectations import expect_json_error

VALIDATE = "/validate-karpenter-sh-v1alpha5-provisioner"
PATHS = [
    "/validate-karpenter-sh-v1alpha5-provisioner",
    "/mutate-karpenter-sh-v1alpha5-provisioner",
    "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate",
    "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate",
]


@pytest.fixture
def client() -> FlaskClient:
    return create_app(Settings(max_body_bytes=64 * 1024)).test_client()


BAD_BODIES = [
    pytest.param(b"not json", 400, "not valid JSON", id="not-json"),
    pytest.param(b"", 400, "empty body", id="empty"),
    pytest.param(b"[1, 2, 3]", 400, "JSON object", id="a-list"),
    pytest.param(b'"just a string"', 400, "JSON object", id="a-string"),
    pytest.param(b"{}", 400, "AdmissionReview", id="empty-object"),
    pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 400, "request",
                 id="missing-request"),
    pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"object": {}}}).encode(),
                 400, "uid", id="missing-uid"),
    pytest.param(json.dumps({"apiVersion": "v1", "kind": "Pod", "request": {"uid": "x"}}).encode(), 400, "Pod", id="wrong-kind"),
    pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"}).encode(),
                 400, "request", id="request-not-object"),
    pytest.param(b"[" * 50_000 + b"]" * 50_000, 413, "over the limit", id="too-large"),
    pytest.param(b"[" * 5_000 + b"]" * 5_000, 400, "nested too deeply", id="deep-nesting"),
    pytest.param(b'{"a": ' * 3000 + b"1" + b"}" * 3000, 400, "nested too deeply", id="deep-object-nesting"),
    pytest.param(b"\xff\xfe\x00garbage", 400, "not valid JSON", id="binary"),
    pytest.param(json.dumps(admission_review(provisioner())).encode().replace(b'"uid": "', b'"uid": "\xc3\x28'), 400, "not UTF-8",
                 id="bad-bytes-in-a-string"),
]


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/no-such-path"])
def test_bad_bytes_on_other_paths_get_a_4xx_with_json(client: FlaskClient, path: str) -> None:
    response = client.post(path + "?x=%ff", data=b"\xff\xfe\x00garbage", content_type="application/json")
    assert 400 <= response.status_code < 500
    assert response.get_json()["message"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("body", "status", "words"), BAD_BODIES)
def test_bad_bodies_get_a_json_error(client: FlaskClient, path: str, body: bytes, status: int, words: str) -> None:
    response = client.post(path, data=body, content_type="application/json")
    assert response.status_code == status, response.data[:200]
    assert words in response.get_json()["message"]


def test_wrong_content_type_is_refused(client: FlaskClient) -> None:
    response = client.post(VALIDATE, data=json.dumps(admission_review(provisioner())), content_type="text/plain")
    assert response.status_code == 415
    assert "application/json" in response.get_json()["message"]


def test_object_that_is_not_a_mapping_is_a_bad_review(client: FlaskClient) -> None:
    review = admission_review(provisioner())
    review["request"]["object"] = ["not", "an", "object"]
    response = client.post(VALIDATE, json=review)
    assert response.status_code == 400
    assert "request.object" in response.get_json()["message"]


def test_deeply_nested_object_inside_a_review_is_handled(client: FlaskClient) -> None:
    nested: object = 1
    for _ in range(600):
        nested = {"a": nested}
    obj = provisioner(name="default")
    obj["metadata"]["annotations"] = {"x": "y"}
    obj["metadata"]["deep"] = nested
    response = client.post(VALIDATE, json=admission_review(obj))
    assert response.status_code in (200, 400)


def test_get_on_an_admission_path_is_a_405_with_json(client: FlaskClient) -> None:
    response = client.get(VALIDATE)
    assert response.status_code == 405
    assert response.get_json()["error"]


def test_unknown_path_is_a_404_with_json(client: FlaskClient) -> None:
    assert client.post("/validate-something-else", json={}).status_code == 404


@pytest.mark.slow      # talks to a karpy webhook process
def test_hostile_bodies_over_tls_leave_the_server_serving(webhook_server: Server) -> None:
    expect_json_error(webhook_server.post(VALIDATE, data=b"{", headers={"Content-Type": "application/json"}))
    expect_json_error(webhook_server.post(VALIDATE, data=b"[" * 100_000, headers={"Content-Type": "application/json"}))
    assert webhook_server.get("/healthz").status_code == 200
    assert webhook_server.post(VALIDATE, json=admission_review(provisioner())).json()["response"]["allowed"] is True


@pytest.mark.slow      # talks to a karpy webhook process
def test_oversized_body_is_refused_before_it_is_sent(webhook_server: Server) -> None:
    """A 9 MiB Content-Length is answered 413 at once: the server does not wait for the body."""
    head = webhook_server.raw_post(VALIDATE, f"Content-Length: {9 * 1024 * 1024}\r\n", '{"pad": "', until="}")
    assert head.startswith("HTTP/1.1 413"), head[:200]
    assert "over the limit" in head
    assert webhook_server.get("/healthz").status_code == 200


@pytest.mark.slow      # talks to a karpy webhook process
def test_metrics_count_requests_and_denials(webhook_server: Server) -> None:
    webhook_server.post(VALIDATE, json=admission_review(provisioner(ttlSecondsAfterEmpty=-1)))
    text = webhook_server.get("/metrics").text
    assert 'karpy_webhook_requests_total{allowed="false",path="/validate-karpenter-sh-v1alpha5-provisioner"}' in text
    assert "karpy_webhook_request_duration_seconds_bucket" in text
    assert "karpy_webhook_bad_requests_total" in text


@pytest.mark.slow      # talks to a karpy webhook process
def test_a_body_that_is_not_valid_chunked_encoding_is_a_400(webhook_server: Server) -> None:
    head = webhook_server.raw_post(VALIDATE, "Transfer-Encoding: chunked\r\n", 'zz\r\n{"not": "a chunk size"}\r\n0\r\n\r\n')
    assert head.startswith("HTTP/1.1 400"), head[:200]
    assert webhook_server.get("/healthz").status_code == 200
