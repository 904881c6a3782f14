"""Karpenter v0.16.3's validation suites, case by case, through `karpy webhook` over TLS.

Ported from pkg/apis/provisioning/v1alpha5/suite_test.go (every `It`), the
"Validation" context of pkg/cloudprovider/aws/suite_test.go and
pkg/apis/awsnodetemplate/v1alpha1/suite_test.go; an `It` that loops over
several objects is one case per object. Also knative's ValidateObjectMetadata
(which both resources call) and the `aws-ids` formats of v0.16.3's selectors.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from tests.builders import admission_review, awsnodetemplate, provisioner
from tests.conftest import Server
from tests.expectations import expect_admitted, expect_denied

pytestmark = pytest.mark.slow      # starts karpy server processes

VALIDATE_PROVISIONER = "/validate-karpenter-sh-v1alpha5-provisioner"
VALIDATE_TEMPLATE = "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate"
ZONE = "topology.kubernetes.io/zone"
PROVIDER = {"subnetSelector": {"karpenter.sh/discovery": "demo"},
            "securityGroupSelector": {"karpenter.sh/discovery": "demo"}}


def _req(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": values} if values is not None else {})}


def _provider(**fields: Any) -> dict[str, Any]:
    return {"provider": {**PROVIDER, **fields}}


def _bdm(**ebs: Any) -> dict[str, Any]:
    return _provider(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": ebs}])


# --- pkg/apis/provisioning/v1alpha5/suite_test.go ----------------------------------------------
V1ALPHA5_ALLOWED = [
    pytest.param({"ttlSecondsUntilExpired": None}, id="missing-expiry-ttl"),
    pytest.param({"ttlSecondsAfterEmpty": None}, id="missing-empty-ttl"),
    pytest.param({"ttlSecondsAfterEmpty": 30}, id="valid-empty-ttl"),
    pytest.param({"ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": False}}, id="consolidation-off-with-ttl"),
    pytest.param({"consolidation": {"enabled": True}}, id="consolidation-on-without-ttl"),
    pytest.param({"limits": {}}, id="limits-undefined"),
    pytest.param({"limits": {"resources": {}}}, id="limits-empty"),
    pytest.param({"labels": {"foo": "silly-name"}}, id="labels-unrecognized"),
    pytest.param({"labels": {"kops.k8s.io/instancegroup": "karpenter-nodes", "kops.k8s.io/gpu": "1"}}, id="labels-kops"),
    *[pytest.param({"labels": {domain: "test-value"}}, id=f"labels-exception-{domain}")
      for domain in sorted(wk.LABEL_DOMAIN_EXCEPTIONS)],
    pytest.param({"taints": [{"key": "a", "value": "b", "effect": "NoSchedule"}, {"key": "c", "value": "d", "effect": "NoExecute"},
                             {"key": "e", "value": "f", "effect": "PreferNoSchedule"}, {"key": "key-only", "effect": "NoExecute"}]},
                 id="taints-valid"),
    pytest.param({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]}, id="taints-same-key"),
    pytest.param({"requirements": [_req(ZONE, "In", ["test"]), _req(ZONE, "Gt", ["1"]), _req(ZONE, "Lt", ["1"]),
                                   _req(ZONE, "NotIn"), _req(ZONE, "Exists")]}, id="requirements-supported-ops"),
    *[pytest.param({"requirements": [_req(f"{domain}/test", "In", ["test"])]}, id=f"requirements-exception-{domain}")
      for domain in sorted(wk.LABEL_DOMAIN_EXCEPTIONS)],
    *[pytest.param({"requirements": [_req(label, "In", ["test"])]}, id=f"requirements-well-known-{label}")
      for label in sorted(wk.well_known_labels(aws=True) - {wk.PROVISIONER_NAME})],
    pytest.param({"requirements": [_req(ZONE, "In", ["test", "foo"]), _req(ZONE, "NotIn", ["test", "bar"])]},
                 id="requirements-overlap-leaves-values"),
    pytest.param({"requirements": []}, id="requirements-empty"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "5%", "nodefs.available": "10%",
                                                            "nodefs.inodesFree": "15%", "imagefs.available": "5%",
                                                            "imagefs.inodesFree": "5%", "pid.available": "5%"}}},
                 id="eviction-hard-valid-keys"),
]

V1ALPHA5_DENIED = [
    pytest.param({"ttlSecondsUntilExpired": -1}, "spec.ttlSecondsUntilExpired", id="negative-expiry-ttl"),
    pytest.param({"ttlSecondsAfterEmpty": -1}, "spec.ttlSecondsAfterEmpty", id="negative-empty-ttl"),
    pytest.param({"ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": True}}, "spec.ttlSecondsAfterEmpty",
                 id="consolidation-and-empty-ttl"),
    pytest.param({"provider": {}, "providerRef": {"name": "providerRef"}}, "spec", id="provider-and-provider-ref"),
    pytest.param({"labels": {wk.PROVISIONER_NAME: "silly"}}, f"spec.labels[{wk.PROVISIONER_NAME}]", id="labels-provisioner-name"),
    pytest.param({"labels": {"spaces are not allowed": "silly"}}, "spec.labels[spaces are not allowed]", id="labels-invalid-key"),
    pytest.param({"labels": {"silly": "/ is not allowed"}}, "spec.labels[silly]", id="labels-invalid-value"),
    *[pytest.param({"labels": {f"{domain}/unknown": "silly"}}, f"spec.labels[{domain}/unknown]", id=f"labels-restricted-{domain}")
      for domain in sorted(wk.RESTRICTED_LABEL_DOMAINS | wk.AWS_RESTRICTED_LABEL_DOMAINS)],
    pytest.param({"taints": [{"key": "???"}]}, "spec.taints[0].key", id="taints-invalid-key"),
    pytest.param({"taints": [{"effect": "NoSchedule"}]}, "spec.taints[0].key", id="taints-missing-key"),
    pytest.param({"taints": [{"key": "invalid-value", "effect": "NoSchedule", "value": "???"}]}, "spec.taints[0].value",
                 id="taints-invalid-value"),
    pytest.param({"taints": [{"key": "invalid-effect", "effect": "???"}]}, "spec.taints[0].effect", id="taints-invalid-effect"),
    pytest.param({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]}, "spec.taints[1]",
                 id="taints-duplicate"),
    pytest.param({"taints": [{"key": "a", "effect": "NoSchedule"}], "startupTaints": [{"key": "a", "effect": "NoSchedule"}]},
                 "spec.startupTaints[0]", id="taints-duplicate-in-startup-taints"),
    pytest.param({"requirements": [_req(wk.PROVISIONER_NAME, "In", ["silly"])]}, "spec.requirements[0].key",
                 id="requirements-provisioner-name"),
    pytest.param({"requirements": [_req(ZONE, "unknown", ["test"])]}, "spec.requirements[0].operator",
                 id="requirements-unsupported-op"),
    *[pytest.param({"requirements": [_req(f"{domain}/test", "In", ["test"])]}, "spec.requirements[0].key",
                   id=f"requirements-restricted-{domain}")
      for domain in sorted(wk.RESTRICTED_LABEL_DOMAINS | wk.AWS_RESTRICTED_LABEL_DOMAINS)],
    *[pytest.param({"requirements": [_req(ZONE, op, values)]}, "spec.requirements[0].values", id=f"requirements-{op}-{values}")
      for op in ("Gt", "Lt") for values in ([], ["1", "2"], ["a"], ["-1"])],
    pytest.param({"kubeletConfiguration": {"kubeReserved": {"pods": "2"}}}, "spec.kubeletConfiguration.kubeReserved[pods]",
                 id="kube-reserved-invalid-key"),
    pytest.param({"kubeletConfiguration": {"systemReserved": {"pods": "2"}}}, "spec.kubeletConfiguration.systemReserved[pods]",
                 id="system-reserved-invalid-key"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory": "5%"}}}, "spec.kubeletConfiguration.evictionHard[memory]",
                 id="eviction-hard-invalid-key"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "5%3"}}},
                 "spec.kubeletConfiguration.evictionHard[memory.available]", id="eviction-hard-bad-percentage"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "110%"}}},
                 "spec.kubeletConfiguration.evictionHard[memory.available]", id="eviction-hard-percentage-too-large"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "110GB"}}},
                 "spec.kubeletConfiguration.evictionHard[memory.available]", id="eviction-hard-bad-quantity"),
]

# --- pkg/cloudprovider/aws/suite_test.go, Context "Validation" ----------------------------------
AWS_ALLOWED = [
    pytest.param({"provider": PROVIDER}, id="validate"),
    pytest.param({}, id="provider-undefined"),
    *[pytest.param({"labels": {label: "silly"}}, id=f"labels-well-known-{label}")
      for label in ("karpenter.k8s.aws/instance-hypervisor", "karpenter.k8s.aws/instance-family",
                    "karpenter.k8s.aws/instance-size", "karpenter.k8s.aws/instance-cpu",
                    "karpenter.k8s.aws/instance-memory", "karpenter.k8s.aws/instance-gpu-name",
                    "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-count",
                    "karpenter.k8s.aws/instance-gpu-memory")],
    pytest.param(_provider(metadataOptions={}), id="metadata-options-missing-values"),
    *[pytest.param(_provider(metadataOptions={"httpEndpoint": v}), id=f"http-endpoint-{v}") for v in ("enabled", "disabled")],
    *[pytest.param(_provider(metadataOptions={"httpProtocolIPv6": v}), id=f"http-protocol-ipv6-{v}") for v in ("disabled", "enabled")],
    *[pytest.param(_provider(metadataOptions={"httpPutResponseHopLimit": v}), id=f"hop-limit-{v}") for v in (1, 2, 64)],
    *[pytest.param(_provider(metadataOptions={"httpTokens": v}), id=f"http-tokens-{v}") for v in ("optional", "required")],
    pytest.param(_bdm(volumeSize="1G"), id="block-device-minimal-1G"),
    pytest.param(_bdm(volumeSize="64T"), id="block-device-maximum-64T"),
    pytest.param(_bdm(snapshotID="snap-0123456789"), id="block-device-snapshot-only"),
]

AWS_DENIED = [
    *[pytest.param({"provider": {**PROVIDER, "subnetSelector": {k: v}}}, f"spec.provider.subnetSelector[{k}]",
                   id=f"subnet-selector-empty-{'key' if not k else 'value'}") for k, v in (("", "value"), ("key", ""))],
    pytest.param(_provider(launchTemplate="my-lt", securityGroupSelector={"key": "value"}), "spec.provider.securityGroupSelector",
                 id="security-group-selector-with-launch-template"),
    *[pytest.param({"provider": {**PROVIDER, "securityGroupSelector": {k: v}}}, f"spec.provider.securityGroupSelector[{k}]",
                   id=f"security-group-selector-empty-{'key' if not k else 'value'}") for k, v in (("", "value"), ("key", ""))],
    pytest.param({"labels": {"karpenter.k8s.aws/silly": "name"}}, "spec.labels[karpenter.k8s.aws/silly]",
                 id="labels-unrecognized-aws-prefix"),
    pytest.param(_provider(launchTemplate="my-lt", metadataOptions={}), "spec.provider.metadataOptions",
                 id="metadata-options-with-launch-template"),
    pytest.param(_provider(metadataOptions={"httpEndpoint": "silly"}), "spec.provider.metadataOptions.httpEndpoint",
                 id="http-endpoint-non-enum"),
    pytest.param(_provider(metadataOptions={"httpProtocolIPv6": "silly"}), "spec.provider.metadataOptions.httpProtocolIPv6",
                 id="http-protocol-ipv6-non-enum"),
    *[pytest.param(_provider(metadataOptions={"httpPutResponseHopLimit": v}), "spec.provider.metadataOptions.httpPutResponseHopLimit",
                   id=f"hop-limit-{v}") for v in (-(2**62), 0, 65, 2**62)],
    pytest.param(_provider(metadataOptions={"httpTokens": "silly"}), "spec.provider.metadataOptions.httpTokens",
                 id="http-tokens-non-enum"),
    pytest.param(_provider(launchTemplate="my-lt", blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "1G"}}]),
                 "spec.provider.blockDeviceMappings", id="block-device-with-launch-template"),
    pytest.param(_bdm(volumeSize="100M"), "spec.provider.blockDeviceMappings[0].ebs.volumeSize", id="block-device-below-minimum"),
    pytest.param(_bdm(volumeSize="65T"), "spec.provider.blockDeviceMappings[0].ebs.volumeSize", id="block-device-above-maximum"),
    pytest.param(_provider(blockDeviceMappings=[{"ebs": {"volumeSize": "65T"}}]), "spec.provider.blockDeviceMappings[0].deviceName",
                 id="block-device-nil-device-name"),
    pytest.param(_bdm(), "spec.provider.blockDeviceMappings[0].ebs.volumeSize", id="block-device-nil-volume-size"),
    pytest.param(_provider(blockDeviceMappings=[{"deviceName": "/dev/xvda"}]), "spec.provider.blockDeviceMappings[0].ebs",
                 id="block-device-empty-ebs"),
]


def _post(server: Server, path: str, obj: dict[str, Any]) -> Any:
    return server.post(path, json=admission_review(obj))


def _spec(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


@pytest.mark.parametrize("spec", V1ALPHA5_ALLOWED + AWS_ALLOWED)
def test_karpenter_allows(webhook_server: Server, spec: dict[str, Any]) -> None:
    expect_admitted(_post(webhook_server, VALIDATE_PROVISIONER, provisioner(name="silly-name", **_spec(spec))))


@pytest.mark.parametrize(("spec", "path"), V1ALPHA5_DENIED + AWS_DENIED)
def test_karpenter_denies_naming_the_field(webhook_server: Server, spec: dict[str, Any], path: str) -> None:
    expect_denied(_post(webhook_server, VALIDATE_PROVISIONER, provisioner(name="silly-name", **spec)), path)


# --- pkg/apis/awsnodetemplate/v1alpha1/suite_test.go --------------------------------------------
def test_template_without_user_data_is_allowed(webhook_server: Server) -> None:
    obj = awsnodetemplate(name="silly", subnetSelector={"foo": "bar"}, securityGroupSelector={"foo": "bar"})
    expect_admitted(_post(webhook_server, VALIDATE_TEMPLATE, obj))


def test_template_with_user_data_and_launch_template_is_denied(webhook_server: Server) -> None:
    obj = awsnodetemplate(name="silly", launchTemplate="someLaunchTemplate", userData="someUserData", securityGroupSelector=None)
    expect_denied(_post(webhook_server, VALIDATE_TEMPLATE, obj), "spec.userData")


# --- knative ValidateObjectMetadata, for both resources -----------------------------------------
METADATA_DENIED = [
    pytest.param({"name": "Default"}, "metadata.name", id="uppercase"),
    pytest.param({"name": "my.provisioner"}, "metadata.name", id="dot"),
    pytest.param({"name": "1st"}, "metadata.name", id="leading-digit"),
    pytest.param({"name": "trailing-"}, "metadata.name", id="trailing-dash"),
    pytest.param({"name": "a" * 64}, "metadata.name", id="too-long"),
    pytest.param({"name": "has_underscore"}, "metadata.name", id="underscore"),
    pytest.param({"generateName": "Gen-"}, "metadata.generateName", id="generate-name-uppercase"),
    pytest.param({"generateName": "9gen-"}, "metadata.generateName", id="generate-name-leading-digit"),
    pytest.param({}, "metadata.name", id="neither"),
]
METADATA_ALLOWED = [
    pytest.param({"name": "default"}, id="name"),
    pytest.param({"name": "a" * 63}, id="63-characters"),
    pytest.param({"generateName": "gen-"}, id="generate-name-with-trailing-dash"),
    pytest.param({"name": "a-1", "generateName": "a-"}, id="both"),
]


def _with_metadata(obj: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"] = dict(metadata)
    return obj


@pytest.mark.parametrize("path", [VALIDATE_PROVISIONER, VALIDATE_TEMPLATE])
@pytest.mark.parametrize(("metadata", "field"), METADATA_DENIED)
def test_invalid_object_metadata_is_denied(webhook_server: Server, path: str, metadata: dict[str, Any], field: str) -> None:
    obj = provisioner() if path == VALIDATE_PROVISIONER else awsnodetemplate()
    message = expect_denied(_post(webhook_server, path, _with_metadata(obj, metadata)), field)
    assert len(message.splitlines()) == 1  # knative reports the first metadata problem only


@pytest.mark.parametrize("path", [VALIDATE_PROVISIONER, VALIDATE_TEMPLATE])
@pytest.mark.parametrize("metadata", METADATA_ALLOWED)
def test_valid_object_metadata_is_allowed(webhook_server: Server, path: str, metadata: dict[str, Any]) -> None:
    obj = provisioner() if path == VALIDATE_PROVISIONER else awsnodetemplate()
    expect_admitted(_post(webhook_server, path, _with_metadata(obj, metadata)))


# --- aws-ids selectors ---------------------------------------------------------------------------
IDS_DENIED = [
    pytest.param("subnetSelector", "subnet-0123abcd,sg-0123abcd", id="subnet-ids-with-a-group-id"),
    pytest.param("subnetSelector", "subnet-", id="subnet-id-without-suffix"),
    pytest.param("securityGroupSelector", "sg-0123abcd, subnet-1", id="group-ids-with-a-subnet-id"),
    pytest.param("securityGroupSelector", "SG-0123ABCD", id="group-id-uppercase"),
    pytest.param("amiSelector", "ami-0123abcd,i-0123abcd", id="ami-ids-with-an-instance-id"),
]
IDS_ALLOWED = [
    pytest.param("subnetSelector", "subnet-0123abcd,subnet-4567ef01", id="subnet-ids"),
    pytest.param("securityGroupSelector", "sg-0123abcd, sg-4567ef01", id="group-ids-spaced"),
    pytest.param("amiSelector", "ami-0123456789abcdef0", id="ami-id"),
]


@pytest.mark.parametrize(("selector", "ids"), IDS_DENIED)
def test_aws_ids_of_the_wrong_form_are_denied(webhook_server: Server, selector: str, ids: str) -> None:
    message = expect_denied(_post(webhook_server, VALIDATE_TEMPLATE, awsnodetemplate(name="ids", **{selector: {"aws-ids": ids}})),
                            f"spec.{selector}[aws-ids]")
    assert "must be a valid" in message
    if selector != "amiSelector":
        expect_denied(_post(webhook_server, VALIDATE_PROVISIONER, provisioner(name="ids", **_provider(**{selector: {"aws-ids": ids}}))),
                      f"spec.provider.{selector}[aws-ids]")


@pytest.mark.parametrize(("selector", "ids"), IDS_ALLOWED)
def test_aws_ids_of_the_right_form_are_allowed(webhook_server: Server, selector: str, ids: str) -> None:
    expect_admitted(_post(webhook_server, VALIDATE_TEMPLATE, awsnodetemplate(name="ids", **{selector: {"aws-ids": ids}})))
