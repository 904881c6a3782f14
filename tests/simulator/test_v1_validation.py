"""Karpenter v1's API validation tests (pkg/apis/v1/*_validation_cel_test.go of kubernetes-sigs/karpenter and
aws/karpenter-provider-aws), run in-process against the shipped CRDs through the local cluster's own admission
functions: schema (defaults, types, patterns, bounds) then the CRDs' CEL rules, as the API server runs them.
tests/simulator/test_v1_crds.py sends a few of them through kubectl."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.simulator import cel, schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {
    crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for crd in (yaml.safe_load((ROOT / "manifests" / "crds" / name).read_text())
                for name in ("karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml",
                             "karpenter.k8s.aws_ec2nodeclasses.yaml"))
}
REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


def admit(obj: dict[str, Any], old: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """What the local cluster stores for `obj` (an update of `old` if given), and every error it reports."""
    s = SCHEMAS[obj["kind"]]
    admitted, errors = schema.admit(copy.deepcopy(obj), s)
    previous = schema.admit(copy.deepcopy(old), s)[0] if old is not None else None
    return admitted, errors + [v.message for v in cel.violations(admitted, previous, s)]


def errors(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    return admit(obj, old)[1]


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def nodepool(**spec: Any) -> dict[str, Any]:
    """Karpenter's test.NodePool(): a valid NodePool; `spec` merged into its spec."""
    base = {"template": {"spec": {"nodeClassRef": dict(REF), "requirements": []}}}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": merged(base, spec)}


def without(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    """`obj` with the field at `path` removed."""
    node = obj
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return obj


def template(**template_spec: Any) -> dict[str, Any]:
    return nodepool(template={"spec": template_spec})


def budgets(*items: dict[str, Any]) -> dict[str, Any]:
    return nodepool(disruption={"consolidateAfter": "0s", "budgets": list(items)})


def requirement(key: str = "example.com/key", operator: str = "In", values: list[str] | None = None,
                **extra: Any) -> dict[str, Any]:
    return template(requirements=[{"key": key, "operator": operator, "values": ["a"] if values is None else values, **extra}])


def nodeclaim(**spec: Any) -> dict[str, Any]:
    base = {"nodeClassRef": dict(REF), "requirements": [{"key": "kubernetes.io/arch", "operator": "In",
                                                         "values": ["amd64"]}]}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default"},
            "spec": merged(base, spec)}


def nodeclass(**spec: Any) -> dict[str, Any]:
    """The provider's test.EC2NodeClass(): alias AMI, tag-selected subnets and security groups, a role."""
    base = {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}
    body = merged(base, spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {k: v for k, v in body.items() if v is not None}}


VALID = [
    pytest.param(nodepool(), id="nodepool-defaults"),
    pytest.param(template(expireAfter="Never"), id="disabled-expireAfter"),
    pytest.param(nodepool(disruption={"consolidateAfter": "Never"}), id="disabled-consolidateAfter"),
    pytest.param(nodepool(disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m"}), id="whenempty-after"),
    pytest.param(nodepool(disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}),
                 id="underutilized-never"),
    pytest.param(budgets({"nodes": "10", "schedule": "* * * * *", "duration": "20m"}), id="budget-cron-duration"),
    pytest.param(budgets({"nodes": "10", "schedule": "* * * * *", "duration": "2h20m"}), id="budget-hours-minutes"),
    pytest.param(budgets({"nodes": "10"}), id="budget-neither-cron-nor-duration"),
    pytest.param(budgets({"nodes": "10", "schedule": "@annually", "duration": "20m"}), id="budget-special-cron"),
    pytest.param(budgets({"nodes": "10", "reasons": ["Drifted", "Empty", "Underutilized"]}), id="budget-reasons"),
    pytest.param(template(taints=[{"key": "a", "value": "b", "effect": "NoSchedule"},
                                  {"key": "a", "effect": "NoExecute"}]), id="taints-same-key-two-effects"),
    pytest.param(requirement("kubernetes.io/arch"), id="kubernetes-domain"),
    pytest.param(requirement("node-restriction.kubernetes.io/team"), id="kubernetes-subdomain-exception"),
    pytest.param(requirement("karpenter.sh/capacity-type", values=["spot"]), id="well-known-karpenter-label"),
    pytest.param(requirement("example.com/gen", "Gt", ["2"]), id="gt"),
    pytest.param(requirement("example.com/gen", "Gte", ["0"]), id="gte-zero"),
    pytest.param(requirement(operator="Exists", values=[]), id="exists"),
    pytest.param(requirement(values=[str(i) for i in range(60)]), id="more-than-50-values-without-minValues"),
    pytest.param(requirement(values=["a", "b"], minValues=2), id="minValues-met"),
    pytest.param(nodepool(template={"metadata": {"labels": {"kops.k8s.io/instancegroup": "a",
                                                            "node.kubernetes.io/team": "b"}}}), id="labels-kops"),
    pytest.param(nodepool(replicas=0), id="static-zero"),
    pytest.param(nodepool(replicas=5, limits={"nodes": "10"}), id="static-nodes-limit"),
    pytest.param(template(terminationGracePeriod="30s"), id="terminationGracePeriod"),
    pytest.param(nodeclaim(), id="nodeclaim"),
    *[pytest.param(nodeclaim(terminationGracePeriod=v), id=f"nodeclaim-terminationGracePeriod-{v}") for v in ("30s", "1h30m5s")],
    *[pytest.param(nodeclaim(expireAfter=v), id=f"nodeclaim-expireAfter-{v}") for v in ("30s", "1h30m5s", "Never")],
    pytest.param(nodeclass(), id="nodeclass"),
    pytest.param(nodeclass(role=None, instanceProfile="profile"), id="instanceProfile"),
    pytest.param(nodeclass(amiSelectorTerms=[{"id": "ami-1"}], amiFamily="AL2023"), id="ami-id"),
    pytest.param(nodeclass(amiSelectorTerms=[{"name": "my-ami", "owner": "self"}, {"tags": {"a": "b"}}],
                           amiFamily="Custom"), id="ami-name-owner"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "al2@v20240807"}], amiFamily="AL2"), id="alias-pinned"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "windows2022@latest"}]), id="alias-windows-latest"),
    pytest.param(nodeclass(subnetSelectorTerms=[{"id": "subnet-1"}], securityGroupSelectorTerms=[{"name": "sg"}]),
                 id="ids-and-names"),
    pytest.param(nodeclass(kubelet={"evictionSoft": {"memory.available": "5%"},
                                    "evictionSoftGracePeriod": {"memory.available": "1m"},
                                    "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80,
                                    "kubeReserved": {"cpu": "100m"}}), id="kubelet"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "rootVolume": True,
                                                 "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}]),
                 id="root-volume"),
    pytest.param(nodeclass(tags={"team": "a"}), id="tags"),
    pytest.param(nodeclass(userData=""), id="empty-user-data"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"tags": {"a": "b"}, "ownerID": "012345678901",
                                                              "instanceMatchCriteria": "targeted"}]),
                 id="capacity-reservation-tags-owner-criteria"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"id": "cr-12345749"}]), id="capacity-reservation-id"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64T"}}]), id="volume-64T"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "5G"}}]), id="volume-G"),
    pytest.param(nodeclass(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                                              {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}]),
                 id="network-interfaces"),
    pytest.param(nodeclass(connectionTracking={"tcpEstablishedTimeout": 60, "udpStreamTimeout": 180, "udpTimeout": 30}),
                 id="connection-tracking"),
    pytest.param(nodeclass(kubelet={"evictionHard": {"memory.available": "5%", "nodefs.available": "10Gi"}}),
                 id="eviction-hard-values"),
    pytest.param(nodeclass(cpuOptions={"nestedVirtualization": "enabled"}), id="cpu-options"),
    pytest.param(nodeclass(metadataOptions={"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled",
                                            "httpPutResponseHopLimit": 2, "httpTokens": "optional"}), id="metadata-options"),
]


@pytest.mark.parametrize("obj", VALID)
def test_valid_objects_are_admitted(obj: dict[str, Any]) -> None:
    assert errors(obj) == []


INVALID = [
    # NodePool: disruption
    pytest.param(template(expireAfter="-1s"), "spec.template.spec.expireAfter: Invalid value", id="negative-expireAfter"),
    pytest.param(budgets({"nodes": "10", "schedule": "*", "duration": "20m"}), "schedule", id="budget-invalid-cron"),
    pytest.param(budgets({"nodes": "10", "schedule": "* * * *", "duration": "20m"}), "schedule", id="budget-short-cron"),
    pytest.param(budgets({"nodes": "10", "schedule": "* * * * *", "duration": "-20m"}), "duration", id="budget-negative-duration"),
    pytest.param(budgets({"nodes": "10", "schedule": "* * * * *", "duration": "30s"}), "duration", id="budget-seconds"),
    pytest.param(budgets({"nodes": "-10"}), "nodes", id="budget-negative-int"),
    pytest.param(budgets({"nodes": "-10%"}), "nodes", id="budget-negative-percent"),
    pytest.param(budgets({"nodes": "1000%"}), "nodes", id="budget-percent-3-digits"),
    pytest.param(budgets({"nodes": "10", "schedule": "* * * * *"}),
                 "spec.disruption.budgets: Invalid value: \"array\": 'schedule' must be set with 'duration'", id="budget-cron-no-duration"),
    pytest.param(budgets({"nodes": "10", "duration": "20m"}), "'schedule' must be set with 'duration'", id="budget-duration-no-cron"),
    pytest.param(budgets({"nodes": "10"}, {"nodes": "10", "schedule": "*", "duration": "20m"}), "schedule",
                 id="two-budgets-one-invalid"),
    pytest.param(budgets({"nodes": "10", "reasons": ["Expired"]}), "Unsupported value: \"Expired\"", id="budget-reason"),
    pytest.param(nodepool(disruption={"consolidateAfter": "0s", "consolidationPolicy": "WhenUnderutilized"}), "Unsupported value", id="v1beta1-policy"),
    # NodePool: taints
    pytest.param(template(taints=[{"key": "???", "effect": "NoSchedule"}]), "taints[0].key", id="taint-key"),
    pytest.param(template(taints=[{"effect": "NoSchedule"}]), "spec.template.spec.taints[0].key: Required value", id="taint-no-key"),
    pytest.param(template(taints=[{"key": "a", "value": "???", "effect": "NoSchedule"}]), "taints[0].value", id="taint-value"),
    pytest.param(template(taints=[{"key": "a", "effect": "???"}]), "taints[0].effect: Unsupported value", id="taint-effect"),
    # NodePool: requirements
    pytest.param(requirement("karpenter.sh/nodepool"), 'label "karpenter.sh/nodepool" is restricted', id="nodepool-label"),
    pytest.param(requirement("kubernetes.io/hostname"), 'label "kubernetes.io/hostname" is restricted', id="hostname"),
    pytest.param(requirement("karpenter.sh/test"), 'label domain "karpenter.sh" is restricted', id="restricted-domain"),
    pytest.param(requirement("subdomain.karpenter.sh/test"), 'label domain "karpenter.sh" is restricted', id="restricted-subdomain"),
    pytest.param(requirement("???"), "requirements[0].key", id="invalid-key"),
    pytest.param(requirement(operator="within"), "Unsupported value: \"within\"", id="unsupported-operator"),
    pytest.param(requirement(values=[]), "requirements with operator 'In' must have a value defined", id="in-without-values"),
    pytest.param(requirement("example.com/gen", "Gt", ["-1"]), "must have a single positive integer value", id="gt-negative"),
    pytest.param(requirement("example.com/gen", "Lt", ["1", "2"]), "must have a single positive integer value", id="lt-two-values"),
    pytest.param(requirement("example.com/gen", "Gte", ["abc"]), "must have a single positive integer value", id="gte-not-integer"),
    pytest.param(requirement(minValues=-1), "minValues", id="minValues-negative"),
    pytest.param(requirement(minValues=0), "minValues", id="minValues-zero"),
    pytest.param(requirement(values=[str(i) for i in range(60)], minValues=51), "minValues", id="minValues-over-50"),
    pytest.param(requirement(values=["a", "b"], minValues=3),
                 "requirements with 'minValues' must have at least that many values", id="minValues-over-values"),
    # NodePool: labels
    pytest.param(nodepool(template={"metadata": {"labels": {"karpenter.sh/nodepool": "a"}}}),
                 'label "karpenter.sh/nodepool" is restricted', id="label-nodepool"),
    pytest.param(nodepool(template={"metadata": {"labels": {"karpenter.sh/custom": "a"}}}),
                 'label domain "karpenter.sh" is restricted', id="label-restricted-domain"),
    pytest.param(nodepool(template={"metadata": {"labels": {"kubernetes.io/hostname": "a"}}}),
                 'label "kubernetes.io/hostname" is restricted', id="label-hostname"),
    pytest.param(nodepool(template={"metadata": {"labels": {"a": "???"}}}), "labels", id="label-value"),
    # NodePool: nodeClassRef, replicas, limits
    pytest.param(template(nodeClassRef={"group": "", "kind": "EC2NodeClass", "name": "default"}),
                 "group may not be empty", id="empty-group"),
    pytest.param(without(template(), "spec", "template", "spec", "nodeClassRef", "group"),
                 "spec.template.spec.nodeClassRef.group: Required value", id="no-group"),
    pytest.param(without(template(), "spec", "template", "spec", "nodeClassRef", "kind"),
                 "spec.template.spec.nodeClassRef.kind: Required value", id="no-kind"),
    pytest.param(template(nodeClassRef={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": ""}),
                 "name may not be empty", id="empty-name"),
    pytest.param(nodepool(replicas=-1), "spec.replicas", id="negative-replicas"),
    pytest.param(nodepool(replicas=2, weight=10), "'weight' is not supported on static NodePools", id="static-weight"),
    pytest.param(nodepool(replicas=2, limits={"cpu": "10"}), "only 'limits.nodes' is supported on static NodePools",
                 id="static-cpu-limit"),
    pytest.param(nodepool(weight=101), "spec.weight", id="weight-over-100"),
    # NodeClaim
    pytest.param(nodeclaim(requirements=[{"key": "karpenter.sh/test", "operator": "In", "values": ["a"]}]),
                 'label domain "karpenter.sh" is restricted', id="nodeclaim-restricted-domain"),
    pytest.param(nodeclaim(requirements=[{"key": "example.com/gen", "operator": "Gt", "values": ["a"]}]),
                 "must have a single positive integer value", id="nodeclaim-gt"),
    pytest.param(nodeclaim(taints=[{"key": "a", "effect": "Sometimes"}]), "Unsupported value", id="nodeclaim-taint"),
    pytest.param(nodeclaim(nodeClassRef={**REF, "group": "karpenter.test.sh/v1"}), "spec.nodeClassRef.group",
                 id="nodeclaim-invalid-group"),
    pytest.param(nodeclaim(requirements=[{"key": f"example.com/k{i}", "operator": "Exists"} for i in range(101)]),
                 "spec.requirements: Too many: 101: must have at most 100 items", id="nodeclaim-over-100-requirements"),
    *[pytest.param(nodeclaim(terminationGracePeriod=v), "spec.terminationGracePeriod", id=f"nodeclaim-terminationGracePeriod-{v}")
      for v in ("-1s", "1hr", "Never", "FooNever")],
    *[pytest.param(nodeclaim(expireAfter=v), "spec.expireAfter", id=f"nodeclaim-expireAfter-{v}")
      for v in ("-1s", "1hr", "FooNever")],
    # EC2NodeClass
    pytest.param(nodeclass(instanceProfile="profile"), "must specify exactly one of ['role', 'instanceProfile']", id="role-and-profile"),
    pytest.param(nodeclass(role=None), "must specify exactly one of ['role', 'instanceProfile']", id="neither-role-nor-profile"),
    pytest.param(nodeclass(role=""), "role cannot be empty", id="empty-role"),
    pytest.param(nodeclass(amiSelectorTerms=[]), "amiSelectorTerms", id="no-ami-terms"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "al2023@latest", "id": "ami-1"}]),
                 "'alias' is mutually exclusive", id="alias-with-id"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "al2023@latest"}, {"id": "ami-1"}]),
                 "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms", id="alias-and-term"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "ubuntu@latest"}]), "family is not supported", id="alias-family"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "al2023"}]), "'alias' is improperly formatted", id="alias-format"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "windows2019@v1"}]), "windows families may only specify version 'latest'",
                 id="alias-windows-version"),
    pytest.param(nodeclass(amiSelectorTerms=[{"alias": "al2@latest"}], amiFamily="AL2023"),
                 "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias", id="alias-family-mismatch"),
    pytest.param(nodeclass(amiSelectorTerms=[{"id": "ami-1"}]),
                 "must specify amiFamily if amiSelectorTerms does not contain an alias", id="no-family"),
    pytest.param(nodeclass(amiSelectorTerms=[{"id": "ami-1", "tags": {"a": "b"}}], amiFamily="AL2"),
                 "'id' is mutually exclusive", id="ami-id-with-tags"),
    pytest.param(nodeclass(amiSelectorTerms=[{"owner": "self"}], amiFamily="AL2"),
                 "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']", id="ami-owner-only"),
    pytest.param(nodeclass(subnetSelectorTerms=[]), "subnetSelectorTerms cannot be empty", id="no-subnet-terms"),
    pytest.param(nodeclass(subnetSelectorTerms=[{"tags": {"": "a"}}]), "empty tag keys or values aren't supported",
                 id="subnet-empty-tag-key"),
    pytest.param(nodeclass(subnetSelectorTerms=[{"id": "subnet-1", "tags": {"a": "b"}}]), "'id' is mutually exclusive",
                 id="subnet-id-with-tags"),
    pytest.param(nodeclass(securityGroupSelectorTerms=[]), "securityGroupSelectorTerms cannot be empty", id="no-sg-terms"),
    pytest.param(nodeclass(securityGroupSelectorTerms=[{"id": "sg-1", "name": "sg"}]), "mutually exclusive", id="sg-id-and-name"),
    pytest.param(nodeclass(tags={"kubernetes.io/cluster/test": "owned"}),
                 "tag contains a restricted tag matching kubernetes.io/cluster/", id="tag-cluster"),
    pytest.param(nodeclass(tags={"karpenter.sh/nodepool": "a"}), "tag contains a restricted tag matching karpenter.sh/nodepool",
                 id="tag-nodepool"),
    pytest.param(nodeclass(tags={"": "a"}), "empty tag keys aren't supported", id="tag-empty-key"),
    pytest.param(nodeclass(kubelet={"evictionSoft": {"memory.available": "5%"}}),
                 "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod", id="eviction-soft-no-grace"),
    pytest.param(nodeclass(kubelet={"evictionSoftGracePeriod": {"memory.available": "1m"}}),
                 "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft", id="grace-no-eviction-soft"),
    pytest.param(nodeclass(kubelet={"evictionHard": {"memory": "5%"}}), "valid keys for evictionHard", id="eviction-hard-key"),
    pytest.param(nodeclass(kubelet={"kubeReserved": {"gpu": "1"}}), "valid keys for kubeReserved", id="kube-reserved-key"),
    pytest.param(nodeclass(kubelet={"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}),
                 "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent", id="image-gc"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "10Gi"}},
                                                {"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "10Gi"}}]),
                 "must have only one blockDeviceMappings with rootVolume", id="two-root-volumes"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]),
                 "snapshotID or volumeSize must be defined", id="ebs-without-size"),
    pytest.param(nodeclass(metadataOptions={"httpTokens": "sometimes"}), "Unsupported value", id="metadata-tokens"),
    pytest.param(nodeclass(metadataOptions={"httpPutResponseHopLimit": 65}), "httpPutResponseHopLimit", id="hop-limit"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"id": "r-12345749"}]), "capacityReservationSelectorTerms[0].id",
                 id="capacity-reservation-malformed-id"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"id": "cr-12345749", "tags": {"a": "b"}}]),
                 "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
                 id="capacity-reservation-id-with-tags"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"ownerID": "012345678901"}]),
                 "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']", id="capacity-reservation-owner-only"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"tags": {"a": "b"}, "ownerID": "01234"}]), "ownerID",
                 id="capacity-reservation-malformed-owner"),
    pytest.param(nodeclass(capacityReservationSelectorTerms=[{"instanceMatchCriteria": "sometimes"}]), "Unsupported value",
                 id="capacity-reservation-criteria"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "0G"}}]), "volumeSize",
                 id="volume-zero"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "65T"}}]), "volumeSize",
                 id="volume-over-64T"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "lots"}}]), "volumeSize",
                 id="volume-not-a-quantity"),
    pytest.param(nodeclass(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "10Gi",
                                                                                   "volumeInitializationRate": 200}}]),
                 "snapshotID must be set when volumeInitializationRate is set", id="initialization-rate-without-snapshot"),
    pytest.param(nodeclass(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                                              {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]),
                 "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs", id="duplicate-interfaces"),
    pytest.param(nodeclass(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "interface"}]),
                 "networkInterfaces must include a primary interface", id="no-primary-interface"),
    pytest.param(nodeclass(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                                              {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
                                              {"networkCardIndex": 1, "deviceIndex": 2, "interfaceType": "efa-only"}]),
                 "at most one efa device per network card", id="two-efa-on-one-card"),
    pytest.param(nodeclass(networkInterfaces=[{"networkCardIndex": -1, "deviceIndex": 0, "interfaceType": "interface"}]),
                 "networkCardIndex", id="negative-card-index"),
    pytest.param(nodeclass(connectionTracking={}), "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout",
                 id="connection-tracking-empty"),
    pytest.param(nodeclass(connectionTracking={"tcpEstablishedTimeout": 59}), "tcpEstablishedTimeout", id="tcp-timeout-low"),
    pytest.param(nodeclass(connectionTracking={"udpTimeout": 61}), "udpTimeout", id="udp-timeout-high"),
    pytest.param(nodeclass(kubelet={"evictionHard": {"memory.available": "110%"}}), "evictionHard", id="eviction-hard-percent"),
    pytest.param(nodeclass(kubelet={"evictionHard": {"memory.available": "lots"}}), "evictionHard", id="eviction-hard-quantity"),
    pytest.param(nodeclass(kubelet={"systemReserved": {"gpu": "1"}}), "valid keys for systemReserved", id="system-reserved-key"),
    pytest.param(nodeclass(cpuOptions={"nestedVirtualization": "maybe"}), "Unsupported value", id="cpu-options"),
]


@pytest.mark.parametrize(("obj", "expected"), INVALID)
def test_invalid_objects_are_rejected_with_the_rules_message(obj: dict[str, Any], expected: str) -> None:
    found = errors(obj)
    assert any(expected in e for e in found), found


def test_defaults_are_the_published_ones() -> None:
    stored, found = admit(nodepool())
    assert found == []
    assert stored["spec"]["disruption"] == {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized",
                                            "budgets": [{"nodes": "10%"}]}
    assert stored["spec"]["template"]["spec"]["expireAfter"] == "720h"
    stored, _ = admit(nodeclass())
    assert stored["spec"]["metadataOptions"] == {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                                 "httpPutResponseHopLimit": 1, "httpTokens": "required"}


UPDATES = [
    pytest.param(template(nodeClassRef={**REF, "group": "example.com"}), "nodeClassRef.group is immutable", id="mutate-group"),
    pytest.param(template(nodeClassRef={**REF, "kind": "Other"}), "nodeClassRef.kind is immutable", id="mutate-kind"),
    pytest.param(nodepool(replicas=3), "Cannot transition NodePool between static", id="dynamic-to-static"),
]


@pytest.mark.parametrize(("new", "expected"), UPDATES)
def test_transition_rules_compare_with_the_stored_object(new: dict[str, Any], expected: str) -> None:
    assert errors(new) == []                      # fine to create
    found = errors(new, old=nodepool())
    assert any(expected in e for e in found), found


def test_transition_rules_on_static_nodepools_and_immutable_nodeclaims() -> None:
    static = nodepool(replicas=2)
    assert errors(nodepool(replicas=4), old=static) == []
    assert any("Cannot transition NodePool" in e for e in errors(nodepool(), old=static))
    claim = nodeclaim()
    changed = nodeclaim(expireAfter="1h")
    assert errors(changed) == []
    assert errors(changed, old=claim) == ['spec: Invalid value: "object": spec is immutable']
    assert errors(claim, old=claim) == []


def test_an_ec2nodeclass_may_change_its_role_or_move_to_an_instance_profile() -> None:
    stored = nodeclass()
    assert errors(nodeclass(role="OtherRole"), old=stored) == []
    assert errors(nodeclass(role=None, instanceProfile="profile"), old=stored) == []
    assert errors(nodeclass(), old=nodeclass(role=None, instanceProfile="profile")) == []


def test_unchanged_invalid_values_ratchet_on_update() -> None:
    """A value that fails a rule but did not change is not re-checked (the API server's validation ratcheting)."""
    bad = nodeclass(tags={"kubernetes.io/cluster/x": "owned"})
    assert errors(bad) != []
    assert errors(bad, old=bad) == []
    worse = nodeclass(tags={"kubernetes.io/cluster/x": "owned", "karpenter.sh/nodepool": "a"})
    assert errors(worse, old=bad) != []


def test_every_rule_of_the_published_crds_compiles_and_runs() -> None:
    """Each rule evaluates on cel-python with the Kubernetes functions registered (no rule is skipped as unknown)."""
    rules: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            rules.extend(r["rule"] for r in node.get("x-kubernetes-validations") or [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(SCHEMAS)
    assert len(rules) > 60
    for rule in set(rules):
        assert cel._program(rule) is not None


def test_rules_without_a_message_reasons_and_field_paths_are_worded_as_the_api_server_words_them() -> None:
    rules = {"type": "object", "properties": {"spec": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "x-kubernetes-validations": [
            {"rule": " self.a < self.b "},
            {"rule": "self.a != 3", "message": "a may not be 3", "reason": "FieldValueForbidden", "fieldPath": ".a"},
            {"rule": "has(self.b)", "message": "b is required", "reason": "FieldValueRequired", "fieldPath": ".b"},
        ]}}}
    found = [v.message for v in cel.violations({"spec": {"a": 3}}, None, rules)]
    assert found == ['spec: Invalid value: "object": failed rule: self.a < self.b',
                     "spec.a: Forbidden: a may not be 3", "spec.b: Required value: b is required"]
    assert cel.violations({"spec": {"a": 1, "b": 2}}, None, rules) == []
