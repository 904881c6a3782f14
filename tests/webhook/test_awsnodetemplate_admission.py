"""AWSNodeTemplate validation and defaulting, through `karpy webhook` over TLS."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import admission_review, awsnodetemplate
from tests.conftest import Server
from tests.expectations import expect_admitted, expect_denied

pytestmark = pytest.mark.slow      # starts karpy server processes

VALIDATE = "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate"
MUTATE = "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate"


ACCEPTED = [
    pytest.param({}, id="selectors-only"),
    pytest.param({"amiFamily": "Custom", "amiSelector": {"karpenter.sh/discovery": "demo"}, "userData": "#!/bin/bash\necho hi",
                  "instanceProfile": "KarpenterNodeInstanceProfile", "tags": {"team": "a"}, "context": "cr-123",
                  "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2},
                  "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3",
                                                                              "iops": 3000, "throughput": 125}}]},
                 id="every-field"),
    pytest.param({"securityGroupSelector": None, "launchTemplate": "my-template"}, id="launch-template"),
    pytest.param({"amiFamily": "Ubuntu"}, id="ubuntu"),
]


@pytest.mark.parametrize("spec", ACCEPTED)
def test_accepts_valid_templates(webhook_server: Server, spec: dict[str, Any]) -> None:
    review = admission_review(awsnodetemplate(name="default", **spec))
    expect_admitted(webhook_server.post(VALIDATE, json=review), uid=review["request"]["uid"])
    answer = expect_admitted(webhook_server.post(MUTATE, json=review))
    assert "patch" not in answer  # v0.16 has no AWSNodeTemplate defaults


REJECTED = [
    pytest.param({"subnetSelector": None}, ["spec.subnetSelector"], id="no-subnet-selector"),
    pytest.param({"securityGroupSelector": None}, ["spec.securityGroupSelector"], id="no-security-group-selector"),
    pytest.param({"launchTemplate": "lt", "userData": "x"}, ["spec.userData", "spec.securityGroupSelector"], id="user-data-with-launch-template"),
    pytest.param({"securityGroupSelector": None, "launchTemplate": "lt", "amiSelector": {"a": "b"}}, ["spec.amiSelector"],
                 id="ami-selector-with-launch-template"),
    pytest.param({"amiSelector": {"a": ""}}, ["spec.amiSelector[a]"], id="ami-selector-empty-value"),
    pytest.param({"amiFamily": "Custom"}, ["spec.amiSelector"], id="custom-without-ami-selector"),
    pytest.param({"amiFamily": "Windows2019"}, ["spec.amiFamily"], id="unknown-ami-family"),
    pytest.param({"metadataOptions": {"httpTokens": "sometimes"}}, ["spec.metadataOptions.httpTokens"], id="metadata-options"),
    pytest.param({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "512Mi"}}]},
                 ["spec.blockDeviceMappings[0].ebs.volumeSize"], id="volume-too-small"),
    pytest.param({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20 gigs"}}]},
                 ["spec.blockDeviceMappings[0].ebs.volumeSize"], id="volume-size-not-quantity"),
    pytest.param({"subnetSelectors": {"a": "b"}}, ["spec.subnetSelectors"], id="unknown-field"),
    pytest.param({"tags": ["a"]}, ["spec.tags"], id="tags-wrong-type"),
]


@pytest.mark.parametrize(("spec", "paths"), REJECTED)
def test_denies_invalid_templates_naming_each_field(webhook_server: Server, spec: dict[str, Any], paths: list[str]) -> None:
    expect_denied(webhook_server.post(VALIDATE, json=admission_review(awsnodetemplate(name="default", **spec))), *paths)


def test_mutate_denies_templates_that_do_not_decode(webhook_server: Server) -> None:
    obj = awsnodetemplate(name="default", bogus=True)
    expect_denied(webhook_server.post(MUTATE, json=admission_review(obj)), "spec.bogus")
