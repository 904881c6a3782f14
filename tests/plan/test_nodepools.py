"""v1 NodePools in `karpy plan`: they schedule as Provisioners do, through the same scheduler.

Planning the NodePool `karpy convert` makes of a Provisioner gives the same nodes as planning the Provisioner
(a representative subset of the suite's fixtures); minValues keeps a node's instance-type options diverse;
the template's metadata, `nodePool` and the owner label reach the planned node; both generations mix in one input; consolidationPolicy maps onto v0.16's consolidation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpy.apis.v1.convert import convert
from karpy.controller.provisioning.scheduling.scheduler import Scheduler
from karpy.plan.documents import Document, PlanInputError
from karpy.plan.inputs import from_documents
from karpy.plan.render import plan_json
from tests.apis.test_convert import FIXTURES
from tests.builders import awsnodetemplate, pod, provisioner
from tests.expectations import expect_consolidated
from tests.plan.conftest import Plan
from tests.plan.test_consolidation import CATALOG, karpy_node, reasons

OWNER_LABELS = ("karpenter.sh/provisioner-name", "karpenter.sh/nodepool")
TOLERATE_ALL = [{"operator": "Exists"}]


def nodepool(name: str, *, requirements: list[dict[str, Any]] | None = None, weight: int | None = None,
             **template: Any) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {**({"weight": weight} if weight else {}), "template": {**({"metadata": template.pop("metadata")} if "metadata" in template else {}),
                                  "spec": {"requirements": requirements or [],
                                           "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                            "name": "default"}, **template}}}}


def workload() -> list[dict[str, Any]]:
    """Pods of several sizes, half tolerating every taint (so a tainted pool still gets some)."""
    sizes = [("1", "1Gi"), ("1", "1Gi"), ("3", "6Gi"), ("500m", "12Gi"), ("2", "2Gi"), ("250m", "256Mi")]
    out = []
    for i, (cpu, memory) in enumerate(sizes):
        p = pod(f"p{i}", cpu=cpu, memory=memory)
        if i % 2 == 0:
            p["spec"]["tolerations"] = TOLERATE_ALL
        out.append(p)
    return out


def plan_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    loaded = from_documents([Document("test", i + 1, d) for i, d in enumerate(docs)])
    return plan_json(Scheduler(loaded.snapshot).solve())


def comparable(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan without what names the API generation: the owner label, `nodePool`, the reasons' wording."""
    nodes = []
    for n in plan["nodes"]:
        n = copy.deepcopy(n)
        n.pop("nodePool", None)
        n.pop("reasons", None)
        n["labels"] = {k: v for k, v in n["labels"].items() if k not in OWNER_LABELS}
        nodes.append(n)
    return {"nodes": nodes, "unschedulable": sorted(u["pod"] for u in plan["unschedulable"])}


def representative(fixtures: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """One Provisioner per distinct set of spec fields (and requirement keys): every shape once, quickly."""
    chosen: dict[frozenset[str], tuple[str, dict[str, Any]]] = {}
    for where, obj in fixtures:
        if obj["kind"] == "Provisioner":
            shape = frozenset(obj["spec"]) | {r["key"] for r in obj["spec"].get("requirements") or []}
            chosen.setdefault(shape, (where, obj))
    return list(chosen.values())[:16]


SUBSET = representative(FIXTURES)


def test_the_round_trip_covers_a_representative_subset() -> None:
    fields = {key for _, o in SUBSET for key in o["spec"]}
    assert len(SUBSET) >= 8 and {"requirements", "taints", "labels", "limits"} <= fields, fields


@pytest.mark.parametrize(("where", "obj"), SUBSET, ids=[w for w, _ in SUBSET])
def test_planning_the_converted_nodepool_gives_the_provisioners_nodes(where: str, obj: dict[str, Any]) -> None:
    inputs = [obj]
    if "provider" not in obj["spec"]:
        inputs.append(awsnodetemplate((obj["spec"].get("providerRef") or {}).get("name") or obj["metadata"]["name"]))
    converted = convert(inputs)
    assert converted[0]["kind"] == "NodePool"
    before, after = plan_of(inputs + workload()), plan_of(converted + workload())
    assert comparable(after) == comparable(before), where
    for n in after["nodes"]:
        assert n["nodePool"] == n["provisioner"] == obj["metadata"]["name"]
        assert "karpenter.sh/provisioner-name" not in n["labels"] and n["labels"]["karpenter.sh/nodepool"] == n["nodePool"]


def test_min_values_keeps_that_many_distinct_values_among_a_nodes_options() -> None:
    family = {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 5}
    plan = plan_of([nodepool("diverse", requirements=[family]), pod("small", cpu="250m")])
    (node,) = plan["nodes"]
    assert len({t.split(".")[0] for t in node["instanceTypeOptions"]}) >= 5
    # a pod that leaves fewer families than that fits nowhere, and says why
    pinned = pod("pinned", cpu="250m", nodeSelector={"karpenter.k8s.aws/instance-family": "m5"})
    plan = plan_of([nodepool("diverse", requirements=[family]), pinned])
    assert plan["nodes"] == []
    assert 'minValues requirement is not met for "karpenter.k8s.aws/instance-family"' in plan["unschedulable"][0]["reason"]


def test_template_metadata_taints_and_nodepool_reach_the_planned_node(plan: Plan) -> None:
    pool = nodepool("team", weight=50, metadata={"labels": {"team": "a"}, "annotations": {"example.com/owner": "a"}},
                    requirements=[{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]}],
                    taints=[{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                    startupTaints=[{"key": "example.com/booting", "effect": "NoSchedule"}])
    tolerating = pod("a", cpu="1")
    tolerating["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "a"}]
    run = plan(pool, tolerating, pod("b", cpu="1"), provisioner("legacy", weight=1))
    assert run.code == 0, run.err
    a, b = run.node_of("default/a"), run.node_of("default/b")
    assert a["nodePool"] == "team" and a["labels"]["team"] == "a" and a["annotations"] == {"example.com/owner": "a"}
    assert int(a["labels"]["karpenter.k8s.aws/instance-cpu"]) >= 4
    assert {t["key"] for t in a["taints"]} == {"dedicated", "example.com/booting"}
    assert b["provisioner"] == "legacy" and "nodePool" not in b and b["labels"]["karpenter.sh/provisioner-name"] == "legacy"


def test_ec2nodeclass_kubelet_settings_and_volumes_size_and_cost_the_nodepools_nodes() -> None:
    node_class: dict[str, Any] = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                  "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                           "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
                           "kubelet": {"maxPods": 2}}}
    pods = [pod(f"p{i}", cpu="10m") for i in range(6)]
    with_class, without = plan_of([nodepool("x"), node_class, *pods]), plan_of([nodepool("x"), *pods])
    assert len(without["nodes"]) == 1 and len(with_class["nodes"]) == 3      # two pods a node
    disk = {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "500Gi", "volumeType": "gp3"}}
    node_class["spec"] = {**{k: v for k, v in node_class["spec"].items() if k != "kubelet"}, "blockDeviceMappings": [disk]}
    big_disk = plan_of([nodepool("x"), node_class, pods[0]])["nodes"][0]
    plain = plan_of([nodepool("x"), pods[0]])["nodes"][0]
    assert big_disk["costPerHour"] > plain["costPerHour"] + 0.05            # 500 GiB of gp3 is about $0.055/hour


def test_a_nodepool_and_a_provisioner_may_not_share_a_name() -> None:
    with pytest.raises(PlanInputError, match=r"NodePool 'default' is given more than once"):
        plan_of([provisioner("default"), nodepool("default")])


def test_a_nodepool_the_model_refuses_is_named_with_its_field() -> None:
    bad = nodepool("bad")
    bad["spec"]["disruption"] = {"consolidationPolicy": "Sometimes"}
    with pytest.raises(PlanInputError, match=r"document 1 \(NodePool \"bad\"\): spec.disruption.consolidationPolicy"):
        plan_of([bad])


def nodepool_node(name: str, instance_type: str, **kw: Any) -> dict[str, Any]:
    body = karpy_node(name, instance_type, **kw)
    labels = body["metadata"]["labels"]
    labels["karpenter.sh/nodepool"] = labels.pop("karpenter.sh/provisioner-name")
    return body


@pytest.mark.parametrize(("policy", "replaced"), [("WhenEmptyOrUnderutilized", True), ("WhenEmpty", False)])
def test_consolidation_policy_maps_onto_v016_consolidation(policy: str, replaced: bool) -> None:
    pool = nodepool("default", requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    pool["spec"]["disruption"] = {"consolidationPolicy": policy, "consolidateAfter": "0s"}
    run = expect_consolidated(CATALOG, pool, nodepool_node("big", "large"), pod("p", cpu="1", node_name="big"))
    if replaced:
        (action,) = run["actions"]
        assert action["type"] == "replace" and action["replacement"]["instanceType"] == "small"
    else:
        assert run["actions"] == [] and "does not have consolidation enabled" in reasons(run)["big"]
