"""Every Provisioner validation rule and default, through `karpy webhook` over TLS."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from tests.builders import admission_review, provisioner
from tests.conftest import Server
from tests.expectations import expect_admitted, expect_denied, patch_of

pytestmark = pytest.mark.slow      # starts karpy server processes

VALIDATE = "/validate-karpenter-sh-v1alpha5-provisioner"
MUTATE = "/mutate-karpenter-sh-v1alpha5-provisioner"
AWS_PROVIDER = {"subnetSelector": {"karpenter.sh/discovery": "demo"},
                "securityGroupSelector": {"karpenter.sh/discovery": "demo"}}


def validate(server: Server, obj: dict[str, Any], **kw: Any) -> Any:
    return server.post(VALIDATE, json=admission_review(obj, **kw))


ACCEPTED = [
    pytest.param({}, id="empty-spec"),
    pytest.param({"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
                  "limits": {"resources": {"cpu": 1000}}, "ttlSecondsAfterEmpty": 30}, id="design-demo"),
    pytest.param({"labels": {"team": "a", "node.kubernetes.io/role": "x", "kops.k8s.io/group": "g"}}, id="labels-exception-domains"),
    pytest.param({"labels": {"topology.kubernetes.io/zone": "us-east-1a"}}, id="labels-well-known"),
    pytest.param({"requirements": [{"key": "failure-domain.beta.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]},
                 id="requirement-normalized-alias"),
    pytest.param({"requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]},
                                   {"key": "karpenter.k8s.aws/instance-memory", "operator": "Lt", "values": ["0"]},
                                   {"key": "team", "operator": "Exists"},
                                   {"key": "gpu", "operator": "DoesNotExist"},
                                   {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}]},
                 id="requirement-every-operator"),
    pytest.param({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
                  "startupTaints": [{"key": "dedicated", "effect": "NoExecute"}]}, id="taints-same-key-other-effect"),
    pytest.param({"consolidation": {"enabled": True}, "ttlSecondsUntilExpired": 2592000}, id="consolidation"),
    pytest.param({"limits": {"resources": {"cpu": "10000000", "memory": "10000000Gi"}}}, id="limits-of-the-scheduling-benchmark"),
    pytest.param({"limits": {"resources": {"memory": "1e30", "nvidia.com/gpu": "1e100"}}}, id="limits-past-int64"),
    pytest.param({"consolidation": {"enabled": False}, "ttlSecondsAfterEmpty": 0}, id="consolidation-off-with-ttl"),
    pytest.param({"kubeletConfiguration": {"clusterDNS": ["10.0.1.100"], "containerRuntime": "containerd", "maxPods": 110,
                                           "podsPerCore": 10, "systemReserved": {"cpu": "100m", "memory": "100Mi"},
                                           "kubeReserved": {"cpu": 1, "ephemeral-storage": "1Gi", "pid": "100"},
                                           "evictionHard": {"memory.available": "5%", "nodefs.available": "10Gi",
                                                            "pid.available": "0.5%"}}}, id="kubelet-configuration"),
    pytest.param({"provider": AWS_PROVIDER}, id="inline-provider"),
    pytest.param({"provider": {"apiVersion": "extensions.karpenter.sh/v1alpha1", "kind": "AWS", **AWS_PROVIDER,
                               "amiFamily": "Bottlerocket", "instanceProfile": "KarpenterNodeInstanceProfile",
                               "tags": {"team": "a"}, "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                                                           "httpPutResponseHopLimit": 2, "httpTokens": "required"},
                               "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3",
                                                                                           "encrypted": True, "deleteOnTermination": True}}]}},
                 id="inline-provider-full"),
    pytest.param({"provider": {"subnetSelector": {"a": "b"}, "launchTemplate": "my-template"}}, id="inline-provider-launch-template"),
    pytest.param({"providerRef": {"name": "default"}}, id="provider-ref"),
    pytest.param({"weight": 100, "limits": {"resources": {"cpu": "1k", "memory": "1000Gi", "nvidia.com/gpu": 4}}}, id="weight-and-limits"),
]


@pytest.mark.parametrize("spec", ACCEPTED)
def test_accepts_valid_provisioners(webhook_server: Server, spec: dict[str, Any]) -> None:
    obj = provisioner(name="default", **spec)
    review = admission_review(obj)
    expect_admitted(webhook_server.post(VALIDATE, json=review), uid=review["request"]["uid"])


REJECTED = [
    pytest.param({"ttlSecondsAfterEmpty": -1}, ["spec.ttlSecondsAfterEmpty"], "negative", id="negative-ttl-after-empty"),
    pytest.param({"ttlSecondsUntilExpired": -5}, ["spec.ttlSecondsUntilExpired"], "negative", id="negative-ttl-until-expired"),
    pytest.param({"ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": True}}, ["spec.ttlSecondsAfterEmpty"],
                 "spec.consolidation.enabled", id="ttl-after-empty-with-consolidation"),
    pytest.param({"labels": {"karpenter.sh/provisioner-name": "x"}}, ["spec.labels[karpenter.sh/provisioner-name]"], "restricted",
                 id="label-provisioner-name"),
    pytest.param({"labels": {"kubernetes.io/custom": "x"}}, ["spec.labels[kubernetes.io/custom]"], "restricted", id="label-restricted-domain"),
    pytest.param({"labels": {"kubernetes.io/hostname": "x"}}, ["spec.labels[kubernetes.io/hostname]"], "restricted", id="label-hostname"),
    pytest.param({"labels": {"karpenter.k8s.aws/custom": "x"}}, ["spec.labels[karpenter.k8s.aws/custom]"], "restricted", id="label-aws-domain"),
    pytest.param({"labels": {"foo bar": "x"}}, ["spec.labels[foo bar]"], "invalid key", id="label-key-syntax"),
    pytest.param({"labels": {"team": "has space"}}, ["spec.labels[team]"], "invalid value", id="label-value-syntax"),
    pytest.param({"labels": {"team": "x" * 64}}, ["spec.labels[team]"], "63 characters", id="label-value-too-long"),
    pytest.param({"requirements": [{"key": "team", "operator": "Within", "values": ["a"]}]}, ["spec.requirements[0].operator"],
                 "Within", id="requirement-operator"),
    pytest.param({"requirements": [{"key": "team", "operator": "In"}]}, ["spec.requirements[0].values"], "must have a value",
                 id="requirement-in-without-values"),
    pytest.param({"requirements": [{"key": "team", "operator": "In", "values": []}]}, ["spec.requirements[0].values"],
                 "must have a value", id="requirement-in-empty-values"),
    pytest.param({"requirements": [{"key": "team", "operator": "Gt", "values": ["1", "2"]}]}, ["spec.requirements[0].values"],
                 "single positive integer", id="requirement-gt-two-values"),
    pytest.param({"requirements": [{"key": "team", "operator": "Lt", "values": ["-1"]}]}, ["spec.requirements[0].values"],
                 "single positive integer", id="requirement-lt-negative"),
    pytest.param({"requirements": [{"key": "team", "operator": "Gt", "values": ["abc"]}]}, ["spec.requirements[0].values"],
                 "single positive integer", id="requirement-gt-not-integer"),
    pytest.param({"requirements": [{"key": "karpenter.sh/provisioner-name", "operator": "In", "values": ["a"]}]},
                 ["spec.requirements[0].key"], "restricted", id="requirement-provisioner-name"),
    pytest.param({"requirements": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]},
                 ["spec.requirements[0].key"], "restricted", id="requirement-hostname"),
    pytest.param({"requirements": [{"key": "k8s.io/foo", "operator": "Exists"}]}, ["spec.requirements[0].key"], "restricted",
                 id="requirement-restricted-domain"),
    pytest.param({"requirements": [{"key": "bad key!", "operator": "Exists"}]}, ["spec.requirements[0].key"], "qualified name",
                 id="requirement-key-syntax"),
    pytest.param({"requirements": [{"key": "team", "operator": "In", "values": ["ok", "not ok"]}]},
                 ["spec.requirements[0].values[1]"], "invalid value", id="requirement-value-syntax"),
    pytest.param({"taints": [{"key": "a", "effect": "Sometimes"}]}, ["spec.taints[0].effect"], "Sometimes", id="taint-effect"),
    pytest.param({"taints": [{"key": "a"}]}, ["spec.taints[0].effect"], "not one of", id="taint-missing-effect"),
    pytest.param({"taints": [{"effect": "NoSchedule"}]}, ["spec.taints[0].key"], "missing", id="taint-missing-key"),
    pytest.param({"taints": [{"key": "-bad-", "effect": "NoSchedule"}]}, ["spec.taints[0].key"], "invalid value", id="taint-key-syntax"),
    pytest.param({"taints": [{"key": "a", "value": "b c", "effect": "NoSchedule"}]}, ["spec.taints[0].value"], "invalid value",
                 id="taint-value-syntax"),
    pytest.param({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}]},
                 ["spec.taints[1]"], "duplicate taint", id="taint-duplicate"),
    pytest.param({"taints": [{"key": "a", "effect": "NoSchedule"}], "startupTaints": [{"key": "a", "effect": "NoSchedule"}]},
                 ["spec.startupTaints[0]"], "duplicate taint", id="taint-duplicate-across-startup-taints"),
    pytest.param({"startupTaints": [{"key": "a", "effect": "Never"}]}, ["spec.startupTaints[0].effect"], "Never", id="startup-taint-effect"),
    pytest.param({"provider": AWS_PROVIDER, "providerRef": {"name": "default"}}, ["spec"], "spec.providerRef",
                 id="provider-and-provider-ref"),
    pytest.param({"providerRef": {"name": ""}}, ["spec.providerRef.name"], "missing", id="provider-ref-without-name"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "-5%"}}},
                 ["spec.kubeletConfiguration.evictionHard[memory.available]"], "negative", id="eviction-negative-percent"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "105%"}}},
                 ["spec.kubeletConfiguration.evictionHard[memory.available]"], "greater than 100", id="eviction-over-100-percent"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "x%"}}},
                 ["spec.kubeletConfiguration.evictionHard[memory.available]"], "percentage", id="eviction-bad-percent"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.available": "lots"}}},
                 ["spec.kubeletConfiguration.evictionHard[memory.available]"], "resource quantity", id="eviction-bad-quantity"),
    pytest.param({"kubeletConfiguration": {"evictionHard": {"memory.free": "1Gi"}}},
                 ["spec.kubeletConfiguration.evictionHard[memory.free]"], "invalid key name", id="eviction-unknown-signal"),
    pytest.param({"kubeletConfiguration": {"kubeReserved": {"gpu": "1"}}}, ["spec.kubeletConfiguration.kubeReserved[gpu]"],
                 "invalid key name", id="kube-reserved-unknown-resource"),
    pytest.param({"kubeletConfiguration": {"systemReserved": {"memory": "-1Gi"}}},
                 ["spec.kubeletConfiguration.systemReserved[memory]"], "negative", id="system-reserved-negative"),
    pytest.param({"kubeletConfiguration": {"kubeReserved": {"cpu": "one"}}}, ["spec.kubeletConfiguration.kubeReserved[cpu]"],
                 "not a quantity", id="kube-reserved-not-quantity"),
    pytest.param({"kubeletConfiguration": {"containerRuntime": "cri-o"}}, ["spec.kubeletConfiguration.containerRuntime"],
                 "cri-o", id="container-runtime"),
    pytest.param({"kubeletConfiguration": {"maxPods": -1}}, ["spec.kubeletConfiguration.maxPods"], "negative", id="max-pods-negative"),
    pytest.param({"kubeletConfiguration": {"podsPerCore": -1}}, ["spec.kubeletConfiguration.podsPerCore"], "negative",
                 id="pods-per-core-negative"),
    pytest.param({"kubeletConfiguration": {"clusterDNS": ["dns.local"]}}, ["spec.kubeletConfiguration.clusterDNS[0]"],
                 "IP address", id="cluster-dns-not-ip"),
    pytest.param({"limits": {"resources": {"cpu": "-1"}}}, ["spec.limits.resources[cpu]"], "negative", id="limits-negative"),
    pytest.param({"limits": {"resources": {"cpu": "many"}}}, ["spec.limits.resources[cpu]"], "not a quantity", id="limits-not-quantity"),
    pytest.param({"limits": {"resources": {"memory": "-1e30"}}}, ["spec.limits.resources[memory]"], "negative", id="limits-hugely-negative"),
    pytest.param({"limits": {"resources": {"memory": "1e99999"}}}, ["spec.limits.resources[memory]"], "exponent", id="limits-exponent-too-long"),
    pytest.param({"weight": 0}, ["spec.weight"], "between 1 and 100", id="weight-zero"),
    pytest.param({"weight": 101}, ["spec.weight"], "between 1 and 100", id="weight-over-100"),
    pytest.param({"provider": {"securityGroupSelector": {"a": "b"}}}, ["spec.provider.subnetSelector"], "missing",
                 id="provider-without-subnet-selector"),
    pytest.param({"provider": {"subnetSelector": {"a": "b"}}}, ["spec.provider.securityGroupSelector"], "missing",
                 id="provider-without-security-group-selector"),
    pytest.param({"provider": {"subnetSelector": {"a": ""}, "securityGroupSelector": {"": "b"}}},
                 ["spec.provider.subnetSelector[a]", "spec.provider.securityGroupSelector[]"], "empty", id="provider-empty-selectors"),
    pytest.param({"provider": {**AWS_PROVIDER, "launchTemplate": "lt", "amiFamily": "AL2", "instanceProfile": "p",
                               "metadataOptions": {}, "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi"}}]}},
                 ["spec.provider.securityGroupSelector", "spec.provider.amiFamily", "spec.provider.instanceProfile",
                  "spec.provider.metadataOptions", "spec.provider.blockDeviceMappings"], "launchTemplate",
                 id="provider-launch-template-conflicts"),
    pytest.param({"provider": {**AWS_PROVIDER, "amiFamily": "Windows"}}, ["spec.provider.amiFamily"], "Windows", id="provider-ami-family"),
    pytest.param({"provider": {**AWS_PROVIDER, "tags": {"": "v"}}}, ["spec.provider.tags"], "empty tag keys", id="provider-empty-tag-key"),
    pytest.param({"provider": {**AWS_PROVIDER, "metadataOptions": {"httpEndpoint": "on", "httpProtocolIPv6": "yes",
                                                                   "httpPutResponseHopLimit": 65, "httpTokens": "maybe"}}},
                 ["spec.provider.metadataOptions.httpEndpoint", "spec.provider.metadataOptions.httpProtocolIPv6",
                  "spec.provider.metadataOptions.httpPutResponseHopLimit", "spec.provider.metadataOptions.httpTokens"],
                 "not one of", id="provider-metadata-options"),
    pytest.param({"provider": {**AWS_PROVIDER, "blockDeviceMappings": [{"ebs": {"volumeSize": "20Gi", "volumeType": "gp9"}},
                                                                       {"deviceName": "/dev/xvdb"},
                                                                       {"deviceName": "/dev/xvdc", "ebs": {"volumeSize": "100Ti"}},
                                                                       {"deviceName": "/dev/xvdd", "ebs": {"volumeType": "gp3"}}]}},
                 ["spec.provider.blockDeviceMappings[0].deviceName", "spec.provider.blockDeviceMappings[0].ebs.volumeType",
                  "spec.provider.blockDeviceMappings[1].ebs", "spec.provider.blockDeviceMappings[2].ebs.volumeSize",
                  "spec.provider.blockDeviceMappings[3].ebs.volumeSize"], "", id="provider-block-devices"),
    pytest.param({"provider": {**AWS_PROVIDER, "userData": "#!/bin/bash"}}, ["spec.provider.userData"], "unknown field",
                 id="provider-unknown-field"),
    pytest.param({"ttlSecondsAfterEmpty": "thirty"}, ["spec.ttlSecondsAfterEmpty"], "integer", id="decode-wrong-type"),
    pytest.param({"requirement": []}, ["spec.requirement"], "unknown field", id="decode-unknown-spec-field"),
    pytest.param({"labels": {"team": 5}}, ["spec.labels[team]"], "string", id="decode-label-not-string"),
    pytest.param({"requirements": [{"operator": "In", "values": ["a"]}]}, ["spec.requirements[0].key"], "missing",
                 id="decode-requirement-without-key"),
]


@pytest.mark.parametrize(("spec", "paths", "words"), REJECTED)
def test_denies_invalid_provisioners_naming_each_field(
    webhook_server: Server, spec: dict[str, Any], paths: list[str], words: str
) -> None:
    message = expect_denied(validate(webhook_server, provisioner(name="default", **spec)), *paths)
    assert words in message


def test_denial_names_every_offending_field_at_once(webhook_server: Server) -> None:
    spec = {"ttlSecondsAfterEmpty": -1, "weight": 0,
            "requirements": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Nope"}],
            "taints": [{"key": "t", "effect": "Bad"}]}
    message = expect_denied(validate(webhook_server, provisioner(name="default", **spec)),
                            "spec.ttlSecondsAfterEmpty", "spec.weight", "spec.requirements[0].values",
                            "spec.requirements[1].operator", "spec.taints[0].effect")
    assert len(message.splitlines()) == 5


def test_update_validates_the_new_object(webhook_server: Server) -> None:
    old = provisioner(name="default", ttlSecondsAfterEmpty=30)
    new = provisioner(name="default", ttlSecondsAfterEmpty=-30)
    expect_denied(validate(webhook_server, new, operation="UPDATE", old=old), "spec.ttlSecondsAfterEmpty")
    expect_admitted(validate(webhook_server, old, operation="UPDATE", old=new))


def test_delete_is_allowed(webhook_server: Server) -> None:
    expect_admitted(validate(webhook_server, provisioner(name="default", ttlSecondsAfterEmpty=-1), operation="DELETE"))


def test_unknown_metadata_and_status_fields_are_kept(webhook_server: Server) -> None:
    obj = provisioner(name="default")
    obj["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    obj["status"] = {"resources": {"cpu": "4"}, "somethingNew": True}
    expect_admitted(validate(webhook_server, obj))


# --- defaulting ---------------------------------------------------------------------------------

DEFAULTS = [
    pytest.param({}, [("karpenter.sh/capacity-type", "on-demand"), ("kubernetes.io/arch", "amd64")], id="both-defaults"),
    pytest.param({"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]},
                 [("kubernetes.io/arch", "amd64")], id="capacity-type-in-requirements"),
    pytest.param({"labels": {"kubernetes.io/arch": "arm64"}}, [("karpenter.sh/capacity-type", "on-demand")], id="arch-in-labels"),
    pytest.param({"labels": {"karpenter.sh/capacity-type": "spot"},
                  "requirements": [{"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}]}, [], id="both-present"),
]


@pytest.mark.parametrize(("spec", "added"), DEFAULTS)
def test_mutate_appends_aws_default_requirements_only_when_absent(
    webhook_server: Server, spec: dict[str, Any], added: list[tuple[str, str]]
) -> None:
    obj = provisioner(name="default", **spec)
    answer = expect_admitted(webhook_server.post(MUTATE, json=admission_review(obj)))
    defaulted = jsonpatch.apply_patch(obj, patch_of(answer))
    before = spec.get("requirements", [])
    assert defaulted["spec"].get("requirements", []) == before + [
        {"key": key, "operator": "In", "values": [value]} for key, value in added
    ]
    if not added:
        assert "patch" not in answer


def test_mutate_is_idempotent(webhook_server: Server) -> None:
    obj = provisioner(name="default")
    once = jsonpatch.apply_patch(obj, patch_of(expect_admitted(webhook_server.post(MUTATE, json=admission_review(obj)))))
    answer = expect_admitted(webhook_server.post(MUTATE, json=admission_review(once)))
    assert patch_of(answer) == []


def test_mutate_denies_objects_that_do_not_decode(webhook_server: Server) -> None:
    expect_denied(webhook_server.post(MUTATE, json=admission_review(provisioner(name="d", ttlSecondsAfterEmpty=[1]))),
                  "spec.ttlSecondsAfterEmpty")
