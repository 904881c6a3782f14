"""The Drifted condition decided for one NodeClaim (v1's nodeclaim/disruption drift_test.go, the EC2NodeClass and
AMI cases: pkg/cloudprovider/drift.go of the AWS provider). Pure: the cluster-backed cases are in
test_karpenter_disruption_suite.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.v1.disruption.drift import (
    EC2NODECLASS_HASH,
    PROVISIONER_HASH,
    ec2nodeclass_hash,
    ec2nodeclass_hash_annotations,
    provisioner_hash,
)
from karpy.apis.v1.disruption.feature_gates import FeatureGates, parse_feature_gates
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1.pool import read_nodepool
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.consolidation.drift import claim_drift, drift_conditions, drifted_nodes, with_node_labels

NODE_CLASS: dict[str, Any] = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
              "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                       "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                       "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]},
              "status": {"amis": [{"id": "ami-new", "name": "al2023", "requirements": []}]}}
NODEPOOL: dict[str, Any] = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {
                "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}


def node_class(**spec: Any) -> EC2NodeClass:
    raw = copy.deepcopy(NODE_CLASS)
    raw["spec"].update(spec)
    return EC2NodeClass.model_validate(raw)


def claim(image: str, annotations: dict[str, str]) -> dict[str, Any]:
    pool, _ = read_nodepool(NODEPOOL)
    assert pool is not None
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "n", "labels": {wk.NODEPOOL: "general"}, "annotations": {**pool.node_annotations, **annotations}},
            "spec": {"requirements": [], "nodeClassRef": NODEPOOL["spec"]["template"]["spec"]["nodeClassRef"]},
            "status": {"providerID": "aws:///zone-a/i-1", "nodeName": "n", "imageID": image}}


def drift(image: str, launched_with: EC2NodeClass, now: EC2NodeClass) -> str | None:
    pool, _ = read_nodepool(NODEPOOL)
    return claim_drift(claim(image, ec2nodeclass_hash_annotations(launched_with)), pool, node_class=now)


def test_a_node_running_an_image_its_ec2nodeclass_no_longer_selects_is_ami_drifted() -> None:
    assert drift("ami-new", node_class(), node_class()) is None
    assert drift("ami-old", node_class(), node_class()) == "AMIDrift"


def test_an_ec2nodeclass_change_of_what_nodes_are_is_nodeclass_drift_but_selector_terms_are_not() -> None:
    assert drift("ami-new", node_class(), node_class(userData="echo hi")) == "NodeClassDrift"
    assert drift("ami-new", node_class(), node_class(tags={"team": "a"})) == "NodeClassDrift"
    moved = node_class(subnetSelectorTerms=[{"id": "subnet-123"}], securityGroupSelectorTerms=[{"id": "sg-1"}])
    assert ec2nodeclass_hash(moved) == ec2nodeclass_hash(node_class())          # what they resolve to is checked instead
    assert drift("ami-new", node_class(), moved) is None


def test_a_nodepool_launch_carries_its_ec2nodeclass_hash() -> None:
    pool, _ = read_nodepool(NODEPOOL, {"default": node_class()})
    assert pool is not None
    assert pool.node_annotations[EC2NODECLASS_HASH] == ec2nodeclass_hash(node_class())


def test_the_drifted_condition_is_set_once_and_cleared_when_it_no_longer_applies() -> None:
    c = claim("ami-new", {})
    set_once = drift_conditions(c, "AMIDrift", now="2026-01-01T00:00:00Z")
    assert set_once is not None and set_once[-1]["reason"] == "AMIDrift" and set_once[-1]["status"] == "True"
    marked = {**c, "status": {**c["status"], "conditions": set_once}}
    assert drift_conditions(marked, "AMIDrift", now="2026-01-02T00:00:00Z") is None       # nothing to write
    assert drifted_nodes([marked]) == {"n": "AMIDrift"}
    assert drift_conditions(marked, None, now="2026-01-02T00:00:00Z") == []


def test_feature_gates_parse_and_name_what_is_wrong() -> None:
    assert parse_feature_gates("") == FeatureGates()
    assert parse_feature_gates("Drift=true, SpotToSpotConsolidation=false") == FeatureGates(drift=True)
    with pytest.raises(ValueError, match=r"'Drift=yes': expected Drift=true or Drift=false.*unknown feature gate 'Flux'"):
        parse_feature_gates("Drift=yes,Flux=true")


def test_a_provisioner_stamped_by_the_drift_gate_launches_nodes_with_its_hash() -> None:
    plain = Provisioner.model_validate({"metadata": {"name": "default"}, "spec": {"labels": {"team": "a"}}})
    assert plain.node_annotations == {}                                   # v0.16: nothing
    stamped = plain.model_copy(deep=True)
    stamped.metadata.annotations = {PROVISIONER_HASH: "stale"}
    assert stamped.node_annotations == {PROVISIONER_HASH: provisioner_hash(plain)}   # the spec's own, not the stamp


def test_requirements_are_checked_against_the_instance_types_labels_on_the_node_too() -> None:
    """v1's NodeClaim carries every label of its instance type; karpy writes them on the Node."""
    raw = copy.deepcopy(NODEPOOL)
    raw["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]}]
    pool, _ = read_nodepool(raw)
    launched = claim("ami-new", {})
    on_node = {"metadata": {"name": "n", "labels": {"karpenter.k8s.aws/instance-generation": "5"}}}
    assert claim_drift(with_node_labels(launched, on_node), pool) is None
    assert claim_drift(launched, pool) == "RequirementsDrifted"            # a label nowhere is not allowed
    older = {"metadata": {"name": "n", "labels": {"karpenter.k8s.aws/instance-generation": "3"}}}
    assert claim_drift(with_node_labels(launched, older), pool) == "RequirementsDrifted"
