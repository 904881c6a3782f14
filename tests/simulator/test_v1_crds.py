"""Karpenter v1's CRDs on the local cluster, through the real kubectl: the getting-started NodePool and
EC2NodeClass apply, an invalid NodePool is refused with the rule's message as an API server words it, and
transition rules compare with the stored object; `karpy convert`'s output applies; the printer columns and the
scale subresource read the paths the CRDs name. The bulk of the rules: tests/simulator/test_v1_validation.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.apis.test_convert import PROVISIONER
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts the local cluster and runs kubectl

ROOT = Path(__file__).resolve().parents[2]
# Karpenter v1.14's getting-started step (website/.../getting-started-with-karpenter/scripts/step12-add-nodepool.sh),
# with CLUSTER_NAME=demo and ALIAS_VERSION=latest substituted as its envsubst would.
GETTING_STARTED = """apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
        - key: kubernetes.io/os
          operator: In
          values: ["linux"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      expireAfter: 720h # 30 * 24h = 720h
  limits:
    cpu: 1000
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: "KarpenterNodeRole-demo" # replace with your cluster name
  amiSelectorTerms:
    - alias: "al2023@latest"
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: "demo" # replace with your cluster name
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: "demo" # replace with your cluster name
"""


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    cluster, kube = start(tmp_path_factory.mktemp("v1"), system_nodes=0, controllers=False)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    yield kube
    kube.api_client.close()
    cluster.stop()


def test_the_getting_started_nodepool_and_ec2nodeclass_apply_with_their_defaults(v1: Kube) -> None:
    out = v1.kubectl("apply", "-f", "-", input=GETTING_STARTED).stdout
    assert "nodepool.karpenter.sh/default created" in out and "ec2nodeclass.karpenter.k8s.aws/default created" in out
    pool = json.loads(v1.kubectl("get", "nodepool", "default", "-o", "json").stdout)
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]          # defaulted, as on EKS
    assert pool["spec"]["limits"] == {"cpu": 1000}
    node_class = json.loads(v1.kubectl("get", "ec2nodeclass", "default", "-o", "json").stdout)
    assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"
    table = v1.kubectl("get", "nodepools").stdout.splitlines()
    assert table[0].split() == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    assert table[1].split()[:2] == ["default", "default"]
    # applying the same documents again changes nothing and breaks no transition rule
    assert "unchanged" in v1.kubectl("apply", "-f", "-", input=GETTING_STARTED).stdout


def test_an_invalid_nodepool_is_refused_with_the_rules_message(v1: Kube) -> None:
    pool = next(yaml.safe_load_all(GETTING_STARTED))
    pool["metadata"]["name"] = "bad"
    pool["spec"]["template"]["spec"]["requirements"][0]["values"] = []
    result = v1.kubectl("apply", "-f", "-", input=yaml.safe_dump(pool), check=False)
    assert result.returncode == 1
    assert ('The NodePool "bad" is invalid: spec.template.spec.requirements: Invalid value: "array": '
            "requirements with operator 'In' must have a value defined") in result.stderr, result.stderr
    assert v1.kubectl("get", "nodepool", "bad", check=False).returncode == 1


def test_several_broken_rules_are_listed_together(v1: Kube) -> None:
    pool = next(yaml.safe_load_all(GETTING_STARTED))
    pool["metadata"]["name"] = "worse"
    pool["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/nodepool": "x"}}
    pool["spec"]["template"]["spec"]["requirements"][4]["values"] = ["-1"]
    result = v1.kubectl("create", "-f", "-", input=yaml.safe_dump(pool), check=False)
    assert result.returncode == 1
    assert 'label "karpenter.sh/nodepool" is restricted' in result.stderr
    assert "must have a single positive integer value" in result.stderr


def test_a_transition_rule_refuses_changing_the_node_class_group(v1: Kube) -> None:
    v1.kubectl("apply", "-f", "-", input=GETTING_STARTED)
    result = v1.kubectl("patch", "nodepool", "default", "--type=merge", "-p",
                        json.dumps({"spec": {"template": {"spec": {"nodeClassRef": {"group": "example.com"}}}}}),
                        check=False)
    assert result.returncode == 1
    assert ('The NodePool "default" is invalid: spec.template.spec.nodeClassRef: Invalid value: "object": '
            "nodeClassRef.group is immutable") in result.stderr, result.stderr
    # a change the rules allow goes through
    v1.kubectl("patch", "nodepool", "default", "--type=merge", "-p", json.dumps({"spec": {"weight": 10}}))
    assert json.loads(v1.kubectl("get", "nodepool", "default", "-o", "json").stdout)["spec"]["weight"] == 10


def test_an_ec2nodeclass_with_both_role_and_instance_profile_is_refused(v1: Kube) -> None:
    node_class = list(yaml.safe_load_all(GETTING_STARTED))[1]
    node_class["metadata"]["name"] = "both"
    node_class["spec"]["instanceProfile"] = "KarpenterNodeInstanceProfile"
    result = v1.kubectl("apply", "-f", "-", input=yaml.safe_dump(node_class), check=False)
    assert result.returncode == 1
    assert ('The EC2NodeClass "both" is invalid: spec: Invalid value: "object": '
            "must specify exactly one of ['role', 'instanceProfile']") in result.stderr, result.stderr


def test_karpy_convert_output_applies_with_kubectl(v1: Kube) -> None:
    converted = subprocess.run([sys.executable, "-m", "karpy.main", "convert", "-f", "-"], input=PROVISIONER,
                               capture_output=True, text=True, check=True).stdout
    renamed = converted.replace("name: default", "name: converted").replace("$KARPENTER_NODE_ROLE", "KarpenterNodeRole-demo")
    out = v1.kubectl("apply", "-f", "-", input=renamed).stdout
    assert "nodepool.karpenter.sh/converted created" in out and "ec2nodeclass.karpenter.k8s.aws/converted created" in out
    pool = json.loads(v1.kubectl("get", "nodepool", "converted", "-o", "json").stdout)
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                                          "budgets": [{"nodes": "10%"}]}


def test_a_static_nodepool_scales_through_its_scale_subresource(v1: Kube) -> None:
    pool = next(yaml.safe_load_all(GETTING_STARTED))
    pool["metadata"]["name"] = "static"
    pool["spec"]["replicas"] = 2
    del pool["spec"]["limits"]
    v1.kubectl("apply", "-f", "-", input=yaml.safe_dump(pool))
    v1.kubectl("scale", "nodepool", "static", "--replicas=4")
    assert json.loads(v1.kubectl("get", "nodepool", "static", "-o", "json").stdout)["spec"]["replicas"] == 4
    v1.custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodepools", "static", {"status": {"nodes": 3}})
    scale = v1.custom.get_cluster_custom_object_scale("karpenter.sh", "v1", "nodepools", "static")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (4, 3)      # statusReplicasPath: .status.nodes


def test_kubectl_get_nodeclaims_reads_the_escaped_label_columns(v1: Kube) -> None:
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
             "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default",
                                                                "node.kubernetes.io/instance-type": "m5.large"}},
             "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                      "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}
    v1.kubectl("apply", "-f", "-", input=yaml.safe_dump(claim))
    v1.custom.patch_cluster_custom_object_status("karpenter.sh", "v1", "nodeclaims", "default-abcde", {"status": {
        "conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                       {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    header, row = v1.kubectl("get", "nodeclaims").stdout.splitlines()[:2]
    cells = dict(zip(header.split(), row.split()))
    assert (cells["NAME"], cells["TYPE"], cells["READY"]) == ("default-abcde", "m5.large", "True")
    wide = v1.kubectl("get", "nodeclaims", "-o", "wide").stdout.splitlines()
    assert "NODEPOOL" in wide[0].split() and "default" in wide[1].split()[1:]
