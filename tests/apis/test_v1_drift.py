"""Drift: the NodePool template hash and a NodeClaim's Drifted reason, ported from Karpenter v1's
nodeclaim/disruption drift suite (static fields, hash versions, requirements) with the AWS provider's
NodeClassDrift and AMIDrift."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis.v1.disruption.drift import (
    EC2NODECLASS_HASH,
    EC2NODECLASS_HASH_VERSION,
    NODEPOOL_HASH_VERSION_VALUE,
    drifted,
    nodepool_hash,
    nodepool_hash_annotations,
)
from karpy.apis.v1.labels import NODEPOOL_HASH, NODEPOOL_HASH_VERSION
from karpy.apis.v1.nodeclaim import NodeClaim
from karpy.apis.v1.nodepool import NodePool
from tests.simulator.test_v1_validation import merged, nodeclaim, nodepool

ON_DEMAND_LINUX = {"karpenter.sh/capacity-type": "on-demand", "kubernetes.io/os": "linux"}


def pool(**spec: Any) -> NodePool:
    """A NodePool carrying its own hash annotations, as v1's hash controller keeps them."""
    model = NodePool.model_validate(nodepool(**spec))
    model.metadata.annotations = nodepool_hash_annotations(model)
    return model


def launched_from(nodepool_model: NodePool, *, labels: dict[str, str] | None = None,
                  annotations: dict[str, str] | None = None, image_id: str | None = None) -> NodeClaim:
    """A NodeClaim launched from `nodepool_model`: its hash annotations copied at launch."""
    raw = nodeclaim()
    raw["metadata"]["labels"] = dict(labels if labels is not None else ON_DEMAND_LINUX)
    raw["metadata"]["annotations"] = {**(nodepool_model.metadata.annotations or {}), **(annotations or {})}
    if image_id is not None:
        raw["status"] = {"imageID": image_id}
    return NodeClaim.model_validate(raw)


def test_an_unchanged_nodepool_has_not_drifted() -> None:
    default = pool()
    assert drifted(launched_from(default), default) is None


@pytest.mark.parametrize("change", [
    pytest.param({"template": {"metadata": {"annotations": {"keyAnnotationTest": "valueAnnotationTest"}}}}, id="annotations"),
    pytest.param({"template": {"metadata": {"labels": {"keyLabelTest": "valueLabelTest"}}}}, id="labels"),
    pytest.param({"template": {"spec": {"taints": [{"key": "keytest2taint", "effect": "NoExecute"}]}}}, id="taints"),
    pytest.param({"template": {"spec": {"startupTaints": [{"key": "keytest2taint", "effect": "NoExecute"}]}}},
                 id="startup-taints"),
    pytest.param({"template": {"spec": {"nodeClassRef": {"name": "testName"}}}}, id="node-class-ref-name"),
    pytest.param({"template": {"spec": {"expireAfter": "100m"}}}, id="expire-after"),
    pytest.param({"template": {"spec": {"expireAfter": "Never"}}}, id="expire-after-never"),
    pytest.param({"template": {"spec": {"terminationGracePeriod": "100m"}}}, id="termination-grace-period"),
])
def test_a_change_to_a_static_field_is_nodepool_drift(change: dict[str, Any]) -> None:
    before = pool()
    claim = launched_from(before)
    after = pool(**change)
    assert nodepool_hash(after) != nodepool_hash(before)
    assert drifted(claim, after) == "NodePoolDrifted"


@pytest.mark.parametrize("change", [
    pytest.param({"template": {"spec": {"requirements": [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux", "windows"]}]}}}, id="requirements"),
    pytest.param({"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily", "duration": "1h"}]}}, id="budgets"),
    pytest.param({"disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}}, id="consolidation"),
    pytest.param({"limits": {"cpu": "100"}, "weight": 10}, id="limits-and-weight"),
    pytest.param({"template": {"spec": {"expireAfter": "43200m"}}}, id="same-duration-spelt-otherwise"),
    pytest.param({"template": {"metadata": {"labels": {}}, "spec": {"taints": []}}}, id="empty-is-absent"),
])
def test_what_v1_leaves_out_of_the_hash_does_not_change_it(change: dict[str, Any]) -> None:
    assert nodepool_hash(pool(**change)) == nodepool_hash(pool())


def test_taints_hash_as_a_set() -> None:
    a, b = {"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "1", "effect": "NoExecute"}
    assert nodepool_hash(pool(template={"spec": {"taints": [a, b]}})) == nodepool_hash(
        pool(template={"spec": {"taints": [b, a]}}))
    assert nodepool_hash(pool(template={"spec": {"taints": [a, b]}})) != nodepool_hash(
        pool(template={"spec": {"taints": [a, {**b, "value": "2"}]}}))


def test_the_hash_is_a_decimal_uint64_stamped_with_karpys_version() -> None:
    annotations = nodepool_hash_annotations(pool())
    assert annotations[NODEPOOL_HASH].isdigit() and int(annotations[NODEPOOL_HASH]) < 2**64
    assert annotations[NODEPOOL_HASH_VERSION] == NODEPOOL_HASH_VERSION_VALUE


@pytest.mark.parametrize(("side", "key"), [
    pytest.param("nodepool", NODEPOOL_HASH, id="no-hash-on-nodepool"),
    pytest.param("nodeclaim", NODEPOOL_HASH, id="no-hash-on-nodeclaim"),
    pytest.param("nodeclaim", NODEPOOL_HASH_VERSION, id="no-version-on-nodeclaim"),
])
def test_no_static_drift_without_both_hashes(side: str, key: str) -> None:
    before = pool()
    claim = launched_from(before)
    after = pool(template={"metadata": {"labels": {"team": "a"}}})
    target = after if side == "nodepool" else claim
    del target.metadata.annotations[key]
    assert drifted(claim, after) is None


def test_no_static_drift_across_hash_versions() -> None:
    before = pool()
    claim = launched_from(before, annotations={NODEPOOL_HASH_VERSION: "v3"})   # stamped by Karpenter itself
    assert drifted(claim, pool(template={"metadata": {"labels": {"team": "a"}}})) is None


def reqs(*items: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"template": {"spec": {"requirements": [{"key": k, "operator": op, "values": v} for k, op, v in items]}}}


CT, OS, ARCH = "karpenter.sh/capacity-type", "kubernetes.io/os", "kubernetes.io/arch"


@pytest.mark.parametrize(("old", "new", "labels", "expected"), [
    pytest.param(reqs((CT, "In", ["on-demand"]), (ARCH, "In", ["amd64"]), (OS, "In", ["linux"])),
                 reqs((CT, "In", ["spot"])), {**ON_DEMAND_LINUX, ARCH: "amd64"}, True, id="updated"),
    pytest.param(reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux"])),
                 reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux"]), (ARCH, "In", ["amd64"])),
                 ON_DEMAND_LINUX, True, id="added"),
    pytest.param(reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux", "windows"])),
                 reqs((CT, "In", ["on-demand"]), (OS, "In", ["windows"])), ON_DEMAND_LINUX, True, id="reduced"),
    pytest.param(reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux"])),
                 reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux", "windows"])), ON_DEMAND_LINUX, False,
                 id="expanded"),
    pytest.param(reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux"])),
                 reqs((CT, "In", ["on-demand"]), (OS, "Exists", [])), ON_DEMAND_LINUX, False, id="exists"),
    pytest.param(reqs((CT, "In", ["on-demand"]), (OS, "In", ["linux"])),
                 reqs((CT, "In", ["on-demand"]), (OS, "DoesNotExist", [])), ON_DEMAND_LINUX, True, id="does-not-exist"),
    pytest.param(reqs((CT, "In", ["on-demand"]), ("test-label", "Gt", ["2"])),
                 reqs((CT, "In", ["on-demand"]), ("test-label", "Gt", ["10"])),
                 {CT: "on-demand", "test-label": "5"}, True, id="gt-raised"),
    pytest.param(reqs((CT, "In", ["on-demand"]), ("test-label", "Lt", ["5"])),
                 reqs((CT, "In", ["on-demand"]), ("test-label", "Lt", ["1"])),
                 {CT: "on-demand", "test-label": "2"}, True, id="lt-lowered"),
    pytest.param(reqs((CT, "In", ["on-demand"]), ("test-label", "Gte", ["5"])),
                 reqs((CT, "In", ["on-demand"]), ("test-label", "Gte", ["6"])),
                 {CT: "on-demand", "test-label": "5"}, True, id="gte-raised"),
    pytest.param(reqs((CT, "In", ["on-demand"]), ("test-label", "Lte", ["5"])),
                 reqs((CT, "In", ["on-demand"]), ("test-label", "Lte", ["9"])),
                 {CT: "on-demand", "test-label": "5"}, False, id="lte-raised"),
])
def test_requirement_drift(old: dict[str, Any], new: dict[str, Any], labels: dict[str, str], expected: bool) -> None:
    before = pool(**old)
    claim = launched_from(before, labels=labels)
    assert drifted(claim, before) is None
    after = pool(**new)
    after.metadata.annotations = before.metadata.annotations          # requirements are not in the hash
    assert drifted(claim, after) == ("RequirementsDrifted" if expected else None)


def test_static_drift_is_reported_before_requirement_drift() -> None:
    before = pool(**reqs((CT, "In", ["on-demand"])))
    claim = launched_from(before)
    after = pool(**merged(reqs((CT, "In", ["spot"])), {"template": {"metadata": {"labels": {"team": "a"}}}}))
    assert drifted(claim, after) == "NodePoolDrifted"


NODECLASS = {EC2NODECLASS_HASH: "111", EC2NODECLASS_HASH_VERSION: "v4"}


def test_a_changed_ec2nodeclass_is_nodeclass_drift() -> None:
    default = pool()
    claim = launched_from(default, annotations=NODECLASS)
    assert drifted(claim, default, nodeclass_annotations=NODECLASS) is None
    assert drifted(claim, default, nodeclass_annotations={**NODECLASS, EC2NODECLASS_HASH: "222"}) == "NodeClassDrift"
    assert drifted(claim, default, nodeclass_annotations={EC2NODECLASS_HASH: "222",
                                                          EC2NODECLASS_HASH_VERSION: "v5"}) is None


def test_an_image_no_longer_selected_is_ami_drift() -> None:
    default = pool()
    claim = launched_from(default, image_id="ami-old")
    assert drifted(claim, default, image_ids={"ami-old", "ami-new"}) is None
    assert drifted(claim, default, image_ids={"ami-new"}) == "AMIDrift"
    assert drifted(claim, default, image_ids=set()) is None          # nothing resolved: no verdict
    assert drifted(claim, default, nodeclass_annotations={**NODECLASS, EC2NODECLASS_HASH: "2"},
                   image_ids={"ami-new"}) == "AMIDrift"               # no nodeclass hash on the claim: only the AMI tells


def test_a_label_the_nodeclaim_lacks_drifts_it_unless_the_requirement_allows_absence() -> None:
    before = pool()
    claim = launched_from(before)
    for operator, expected in (("NotIn", None), ("DoesNotExist", None), ("Exists", "RequirementsDrifted"),
                               ("In", "RequirementsDrifted")):
        after = pool(**reqs(("example.com/team", operator, ["a"] if operator in ("In", "NotIn") else [])))
        after.metadata.annotations = before.metadata.annotations
        assert drifted(claim, after) == expected, operator
