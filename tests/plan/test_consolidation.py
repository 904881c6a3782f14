"""`karpy plan --consolidate`: each action, each blocker, the order of candidates, and the JSON contract (decided in
process by `expect_consolidated`; the table through the command line)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import catalog, instance_type, node, pod, provisioner
from tests.expectations import expect_consolidated
from tests.plan.conftest import Plan

CATALOG = catalog(
    instance_type("small", cpu="2", memory="8Gi", price=0.10, zones=("zone-a", "zone-b")),
    instance_type("medium", cpu="4", memory="16Gi", price=0.20, zones=("zone-a", "zone-b"),
                  capacity_types=("on-demand", "spot")),
    instance_type("large", cpu="8", memory="32Gi", price=0.40, zones=("zone-a", "zone-b"),
                  capacity_types=("on-demand", "spot")),
)
# what every node costs besides its instance (docs/cost.md): a 20 GiB gp3 root volume and a public IPv4 address
PER_NODE = 20 * 0.08 / 730 + 0.005


def consolidating(**spec: Any) -> dict[str, Any]:
    return provisioner("default", consolidation={"enabled": True}, **spec)


def karpy_node(name: str, instance_type: str = "medium", *, capacity_type: str = "on-demand", zone: str = "zone-a",
               created: str = "2024-01-01T00:00:00Z", **kw: Any) -> dict[str, Any]:
    cpu = {"small": "2", "medium": "4", "large": "8"}[instance_type]
    memory = {"small": "8Gi", "medium": "16Gi", "large": "32Gi"}[instance_type]
    kw.setdefault("initialized", True)
    return node(name, provisioner="default", instance_type=instance_type, zone=zone, capacity_type=capacity_type,
                allocatable={"cpu": cpu, "memory": memory, "pods": "110"}, created=created, **kw)


def consolidate(*docs: dict[str, Any]) -> dict[str, Any]:
    """What `karpy plan --consolidate -o json` prints, decided in process."""
    return expect_consolidated(CATALOG, *docs)


def reasons(run: dict[str, Any]) -> dict[str, str]:
    return {k["node"]: k["reason"] for k in run["kept"]}


def test_empty_nodes_are_deleted_together_first() -> None:
    run = consolidate(consolidating(), karpy_node("a"), karpy_node("b", "large"),
                      karpy_node("c"), pod("busy", cpu="3", node_name="c"))
    first = run["actions"][0]
    assert first == {"type": "delete", "nodes": ["a", "b"], "savingsPerHour": 0.6, "pods": [], "moves": [],
                     "podsMoved": 0, "disruptionCost": 0.0, "costSavingsPerHour": round(0.6 + 2 * PER_NODE, 6)}
    assert reasons(run)["c"].startswith("no cheaper fit")


def test_a_node_whose_pods_fit_elsewhere_is_deleted() -> None:
    run = consolidate(consolidating(), karpy_node("a"), karpy_node("b"),
                      pod("p1", cpu="1", node_name="a"), pod("p2", cpu="2", node_name="b"))
    assert run["actions"] == [{"type": "delete", "nodes": ["a"], "savingsPerHour": 0.2, "pods": ["default/p1"],
                               "costSavingsPerHour": round(0.2 + PER_NODE, 6), "podsMoved": 1, "disruptionCost": 1.0, "moves": [{"pod": "default/p1", "to": "b"}]}]
    assert reasons(run) == {"b": "no cheaper fit: pod default/p1 would fit nowhere else (insufficient cpu)"} \
        or reasons(run)["b"].startswith("no cheaper fit")


def test_an_oversized_on_demand_node_is_replaced_by_a_cheaper_one() -> None:
    run = consolidate(consolidating(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                         "values": ["on-demand"]}]),
                      karpy_node("big", "large"), pod("p", cpu="1", node_name="big"))
    (action,) = run["actions"]
    assert action["type"] == "replace" and action["nodes"] == ["big"]
    assert action["replacement"] == {"instanceType": "small", "zone": "zone-a", "capacityType": "on-demand",
                                     "pricePerHour": 0.1, "costPerHour": pytest.approx(0.1 + PER_NODE)}
    assert action["savingsPerHour"] == pytest.approx(0.3)
    assert action["costSavingsPerHour"] == pytest.approx(0.3, abs=1e-6)     # both nodes pay the same per-node costs
    assert run["kept"] == []


def test_replacement_is_priced_at_its_worst_case_offering() -> None:
    """Spot allowed: the replacement could land on-demand, so it is priced on-demand."""
    run = consolidate(consolidating(), karpy_node("big", "large"), pod("p", cpu="1", node_name="big"))
    (action,) = run["actions"]
    assert action["replacement"]["pricePerHour"] == 0.1
    assert action["savingsPerHour"] == pytest.approx(0.3)


def test_a_burstable_node_paying_credits_is_replaced_by_one_that_lists_dearer() -> None:
    """A t3-like node (2 cpu, 20% baseline, $0.05/h) holding a pod of 1.5 cpu is billed (1.5 - 0.4) x $0.05 in
    credits: it costs more than a steady type listed at $0.08/h, though at list prices the move costs $0.03/h."""
    burstable = {"baseline": 0.2, "mode": "unlimited", "creditPricePerVCPUHour": 0.05}
    two_types = catalog(instance_type("bursty", cpu="2", memory="8Gi", price=0.05, burstable=burstable),
                        instance_type("steady", cpu="2", memory="8Gi", price=0.08))
    run = expect_consolidated(two_types, consolidating(), pod("p", cpu="1500m", node_name="t"),
                              node("t", provisioner="default", instance_type="bursty", zone="zone-a",
                                   capacity_type="on-demand", allocatable={"cpu": "2", "memory": "8Gi", "pods": "110"},
                                   created="2024-01-01T00:00:00Z", initialized=True))
    (action,) = run["actions"]
    assert action["replacement"]["instanceType"] == "steady"
    assert action["savingsPerHour"] == pytest.approx(0.05 - 0.08)
    assert action["costSavingsPerHour"] == pytest.approx(0.05 + (1.5 - 0.4) * 0.05 - 0.08, abs=1e-6)
    assert run["summary"]["costPerHourAfter"] == pytest.approx(0.08 + PER_NODE, abs=1e-6)


def test_a_spot_node_is_never_replaced() -> None:
    run = consolidate(consolidating(), karpy_node("big", "large", capacity_type="spot"),
                      pod("p", cpu="1", node_name="big"))
    assert run["actions"] == []
    assert "spot nodes are only deleted" in reasons(run)["big"]


def test_no_replacement_that_is_not_strictly_cheaper() -> None:
    run = consolidate(consolidating(), karpy_node("s", "small"), pod("p", cpu="1500m", node_name="s"))
    assert run["actions"] == []
    assert reasons(run)["s"].endswith(f"does not cost less than ${0.1 + PER_NODE:.4f}/h")


@pytest.mark.parametrize("blocked, expected", [
    (dict(node_annotations={"karpenter.sh/do-not-consolidate": "true"}), "node has annotation karpenter.sh/do-not-consolidate"),
    (dict(pod_annotations={"karpenter.sh/do-not-evict": "true"}), "pod default/p has annotation karpenter.sh/do-not-evict"),
    (dict(owner=None), "pod default/p has no controller owner"),
    (dict(initialized=False), "node is not initialized yet"),
], ids=["do-not-consolidate", "do-not-evict", "unowned", "uninitialized"])
def test_blockers_keep_a_node_with_the_reason(blocked: dict[str, Any], expected: str) -> None:
    n = karpy_node("a", initialized=blocked.get("initialized", True))
    if "node_annotations" in blocked:
        n["metadata"]["annotations"] = blocked["node_annotations"]
    p = pod("p", cpu="1", node_name="a", annotations=blocked.get("pod_annotations"),
            owner=blocked.get("owner", ("ReplicaSet", "app")))
    run = consolidate(consolidating(), n, karpy_node("b"), p)
    assert reasons(run)["a"] == expected
    assert all("a" not in action["nodes"] for action in run["actions"])


def test_a_pdb_that_allows_no_disruption_blocks() -> None:
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
    docs = [consolidating(), karpy_node("a"), karpy_node("b"),
            pod("w1", cpu="1", node_name="a", labels={"app": "web"}), pod("w2", cpu="1", node_name="b", labels={"app": "web"})]
    run = consolidate(*docs, pdb)
    assert run["actions"] == []
    assert reasons(run) == {"a": "pdb default/web prevents evicting pod default/w1",
                            "b": "pdb default/web prevents evicting pod default/w2"}
    pdb["spec"]["minAvailable"] = 1
    assert consolidate(*docs, pdb)["actions"][0]["nodes"] == ["a"]


def test_nodes_karpy_does_not_own_or_may_not_consolidate_are_kept() -> None:
    run = consolidate(provisioner("default"), karpy_node("a"),
                      node("system", allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"}),
                      karpy_node("unknown-type", "medium"))
    kept = reasons(run)
    assert kept["a"] == "provisioner default does not have consolidation enabled"
    assert kept["system"].startswith("not launched by a provisioner")
    assert run["actions"] == []


def test_cheapest_disruption_first_and_older_first_among_equals() -> None:
    """Three half-full nodes: only one can go. The one with fewer pods goes; between equals, the older."""
    docs = [consolidating(), karpy_node("x", created="2024-01-02T00:00:00Z"), karpy_node("y", created="2024-01-01T00:00:00Z"),
            karpy_node("z", created="2023-01-01T00:00:00Z")]
    docs += [pod("x1", cpu="2", node_name="x"), pod("y1", cpu="2", node_name="y"),
             pod("z1", cpu="1", node_name="z"), pod("z2", cpu="1", node_name="z")]
    run = consolidate(*docs)
    assert run["actions"][0]["nodes"] == ["y"]


def test_every_node_appears_once() -> None:
    docs: list[dict[str, Any]] = [consolidating()]
    for i in range(8):
        docs.append(karpy_node(f"n{i}", "large" if i % 2 else "medium"))
        docs += [pod(f"p{i}-{j}", cpu="500m", node_name=f"n{i}") for j in range(i % 3)]
    run = consolidate(*docs)
    acted = [n for a in run["actions"] for n in a["nodes"]]
    kept = [k["node"] for k in run["kept"]]
    assert sorted(acted + kept) == sorted(f"n{i}" for i in range(8))
    assert len(set(acted)) == len(acted)
    assert run["summary"]["savingsPerHour"] == pytest.approx(sum(a["savingsPerHour"] for a in run["actions"]))


def test_table_output_names_actions_and_reasons(plan: Plan) -> None:
    run = plan(CATALOG, consolidating(), karpy_node("a"), karpy_node("b"), pod("p", cpu="3", node_name="b"),
               args=("--consolidate",), output="table")
    assert run.code == 0
    assert "delete" in run.out and "Nodes kept:" in run.out and "no cheaper fit" in run.out


def test_with_steering_a_replace_moves_the_pods_as_planned(plan: Plan) -> None:
    """The cluster of the test above: steered by karpy's extender, p1 stays where first fit put it (idle) and p0
    and p2 go to the replacement."""
    docs = (CATALOG, consolidating(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
            kept_as_is("idle", "small"), karpy_node("big", "large"),
            *(pod(f"p{i}", cpu=cpu, node_name="big") for i, cpu in enumerate(("1", "2", "1"))))
    run = plan(*docs, args=("--consolidate", "--consolidation-steering"))
    assert run.code == 0, run.err
    (action,) = run.json["actions"]
    assert action["type"] == "replace" and action["replacement"]["instanceType"] == "small"
    assert action["moves"] == [{"pod": "default/p0", "to": "replacement"}, {"pod": "default/p1", "to": "idle"},
                               {"pod": "default/p2", "to": "replacement"}]
    unsteered = plan(*docs, args=("--consolidate",)).json["actions"][0]["moves"]
    assert unsteered != action["moves"]


def test_pod_deletion_cost_and_priority_make_a_node_dearer_to_disrupt() -> None:
    """Two equal nodes (only one may go): the one whose pod is cheaper to delete goes, though it is younger."""
    docs = [consolidating(), karpy_node("old", created="2023-01-01T00:00:00Z"), karpy_node("young", created="2024-06-01T00:00:00Z")]
    dear = pod("dear", cpu="2", node_name="old", annotations={"controller.kubernetes.io/pod-deletion-cost": str(2 ** 30)})
    assert consolidate(*docs, dear, pod("plain", cpu="2", node_name="young"))["actions"][0]["nodes"] == ["young"]
    important = pod("important", cpu="2", node_name="old", priority=1_000_000_000)
    assert consolidate(*docs, important, pod("plain", cpu="2", node_name="young"))["actions"][0]["nodes"] == ["young"]
    assert consolidate(*docs, pod("a", cpu="2", node_name="old"),
                       pod("b", cpu="2", node_name="young"))["actions"][0]["nodes"] == ["old"]


def kept_as_is(name: str, instance_type: str) -> dict[str, Any]:
    n = karpy_node(name, instance_type)
    n["metadata"]["annotations"] = {"karpenter.sh/do-not-consolidate": "true"}
    return n


def test_a_replace_moves_the_pods_where_kube_scheduler_will_put_them() -> None:
    """First fit plans p1 (2 cpu) on idle and a small replacement for p0 and p2. kube-scheduler takes them as they
    come: p0 to idle (equal shares left; the existing node first), p1 to the replacement (only it has 2 cpu left),
    p2 to idle. Nothing is left over, so nothing more is launched."""
    run = consolidate(consolidating(requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                   "values": ["on-demand"]}]),
                      kept_as_is("idle", "small"), karpy_node("big", "large"),
                      *(pod(f"p{i}", cpu=cpu, node_name="big") for i, cpu in enumerate(("1", "2", "1"))))
    (action,) = run["actions"]
    assert action["type"] == "replace" and "provisioned" not in action
    assert action["replacement"]["instanceType"] == "small"
    assert action["moves"] == [{"pod": "default/p0", "to": "idle"}, {"pod": "default/p1", "to": "replacement"},
                               {"pod": "default/p2", "to": "idle"}]
