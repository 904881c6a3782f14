"""AdmissionReview versions: v1 and v1beta1 are answered in kind, any other is refused with 400."""

from __future__ import annotations

import pytest

from tests.builders import admission_review, provisioner
from tests.conftest import Server
from tests.expectations import expect_admitted

pytestmark = pytest.mark.slow      # starts karpy server processes

VALIDATE = "/validate-karpenter-sh-v1alpha5-provisioner"


@pytest.mark.parametrize("version", ["admission.k8s.io/v2", "admission.k8s.io/v1alpha1", "admission.k8s.io/", "v1"])
def test_unknown_review_version_is_refused_with_400(webhook_server: Server, version: str) -> None:
    review = admission_review(provisioner(name="default"))
    review["apiVersion"] = version
    response = webhook_server.post(VALIDATE, json=review)
    assert response.status_code == 400, response.text
    assert "apiVersion" in response.json()["message"]
    assert "response" not in response.json()


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_known_review_versions_are_answered_in_their_version(webhook_server: Server, version: str) -> None:
    review = admission_review(provisioner(name="default"))
    review["apiVersion"] = version
    response = webhook_server.post(VALIDATE, json=review)
    expect_admitted(response)
    assert response.json()["apiVersion"] == version
