"""Consolidation on the local cluster: each action carried out, re-validation, replacement ordering, events."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys
from typing import Any, Collection

import pytest
import yaml
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.apis.v1 import nodeclaim as v1
from karpy.controller.clock import FakeClock
from karpy.controller.consolidation.controller import (
    Consolidation,
    Settings,
    disruption_budget,
    launching_or_terminating,
)
from karpy.controller.node.initialization import Initialization
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, provisioner
from tests.controller.conftest import CATALOG_DOC, Env
from tests.plan.test_consolidation import PER_NODE

pytestmark = pytest.mark.slow      # starts the local cluster

SETTINGS = Settings(stabilization_seconds=15, min_node_age_seconds=0, poll_seconds=10)


def karpy_node(name: str, instance_type: str = "large") -> dict[str, Any]:
    cpu, memory = {"small": ("2", "4Gi"), "large": ("8", "16Gi")}[instance_type]
    return node(name, provisioner="default", instance_type=instance_type, zone="zone-a", capacity_type="on-demand",
                initialized=True, allocatable={"cpu": cpu, "memory": memory, "pods": "40"})


def consolidation(env: Env) -> Consolidation:
    env.clock = FakeClock(dt.datetime.now(dt.timezone.utc))
    names = iter(f"default-new{i}" for i in range(100))
    return Consolidation(env.state, env.cloud, env.cloud.catalog, env.clock, lambda p, i: next(names), SETTINGS)


def live_nodes(env: Env) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in env.client.get(path_of("v1", "nodes"))["items"]
            if not n["metadata"].get("deletionTimestamp")}


def settle_initialized(env: Env, names: Collection[str]) -> None:
    """Run node initialization until every one of `names` (launched replacements) is initialized."""
    initialization = Initialization(env.state, env.clock)

    def initialized() -> bool:
        initialization.reconcile()
        return all((env.state.nodes.get("", n) or {"metadata": {}})["metadata"].get("labels", {}).get(wk.INITIALIZED)
                   == "true" for n in names)
    env.settle(initialized)


def test_a_node_whose_pods_fit_elsewhere_is_deleted_after_the_wait(env: Env) -> None:
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
              pod("pa", cpu="1", node_name="a"), pod("pb", cpu="6", node_name="b"))
    c.reconcile()
    assert c._proposal is not None                 # proposed, not taken
    assert set(live_nodes(env)) == {"a", "b"}
    env.clock.step(15)
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"b"})


def test_a_pod_arriving_during_the_wait_cancels_the_action(env: Env) -> None:
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("empty"),
              karpy_node("full"), pod("big", cpu="7", node_name="full"))
    c.reconcile()
    assert c._proposal is not None and c._proposal.action.nodes == ("empty",)
    env.apply(pod("arrived", cpu="4", node_name="empty"))
    env.clock.step(15)
    assert c.revalidate(c._proposal.action) is not None
    c.reconcile()
    assert set(live_nodes(env)) == {"empty", "full"}


def test_a_replacement_is_ready_before_the_old_node_goes(env: Env) -> None:
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("big"), pod("p", cpu="1", node_name="big"))
    c.reconcile()
    assert c._proposal is not None and c._proposal.action.replacement.instance_type == "small"
    created = REGISTRY.get_sample_value("karpenter_consolidation_nodes_created") or 0.0
    env.clock.step(15)
    c.reconcile()                                  # launches the replacement, cordons the old node
    assert "default-new0" in live_nodes(env)
    assert REGISTRY.get_sample_value("karpenter_consolidation_nodes_created") == created + 1
    assert live_nodes(env)["big"]["spec"].get("unschedulable") is True
    c.reconcile()
    assert "big" in live_nodes(env)               # the replacement is not initialized yet: the old node stays
    settle_initialized(env, ["default-new0"])
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"default-new0"})


def test_a_repack_launches_every_replacement_and_deletes_the_old_nodes_once_all_are_ready(env: Env) -> None:
    """Two larges with four 1.5-cpu pods each ($0.80/h): no node can go or be replaced alone; packed again,
    a large and three smalls ($0.70/h)."""
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, max_disrupted="2")
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
              *[pod(f"p{n}{i}", cpu="1500m", node_name=n) for n in "ab" for i in range(4)])
    c.reconcile()
    assert c._proposal is not None
    action = c._proposal.action
    assert action.kind == "replace" and action.nodes == ("a", "b")
    assert sorted(r.instance_type for r in action.replacements) == ["large", "small", "small", "small"]
    env.clock.step(15)
    c.reconcile()                                  # launches the replacements, cordons the old nodes
    new = set(live_nodes(env)) - {"a", "b"}
    assert sorted(live_nodes(env)[n]["metadata"]["labels"][wk.INSTANCE_TYPE] for n in new) == [
        "large", "small", "small", "small"]
    assert all(live_nodes(env)[n]["spec"].get("unschedulable") is True for n in "ab")
    c.reconcile()
    assert {"a", "b"} <= set(live_nodes(env))      # not every replacement is initialized yet: the old nodes stay
    settle_initialized(env, new)
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == new)


def moving_in_mark(env: Env, name: str) -> dict[str, Any] | None:
    text = (live_nodes(env)[name]["metadata"].get("annotations") or {}).get(wk.MOVING_IN)
    return json.loads(text) if text else None


def test_with_steering_the_node_a_delete_moves_pods_to_is_marked_with_their_owners_before_the_drain(env: Env) -> None:
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, steer=True)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
              pod("web-1", cpu="1", node_name="a", owner=("ReplicaSet", "web")),
              pod("web-2", cpu="1", node_name="b", owner=("ReplicaSet", "web")),
              pod("api-1", cpu="5", node_name="b", owner=("ReplicaSet", "api")))
    web = env.state.pods.get("default", "web-1")["metadata"]["ownerReferences"][0]["uid"]
    c.reconcile()
    assert c._proposal is not None and c._proposal.action.nodes == ("a",)
    assert moving_in_mark(env, "b") is None                    # proposed only: nothing is steered yet
    env.clock.step(15)
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"b"})
    mark = moving_in_mark(env, "b")
    assert mark is not None and mark["owners"] == {web: 2}    # the web pod it holds, and the one on its way
    until = dt.datetime.fromisoformat(mark["until"].replace("Z", "+00:00"))
    assert dt.timedelta(minutes=4) < until - env.clock.now() <= dt.timedelta(minutes=5)


def test_with_steering_a_replacement_is_marked_under_its_launched_name_once_ready(env: Env) -> None:
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, steer=True)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("big"),
              pod("p", cpu="1", node_name="big", owner=("ReplicaSet", "web")))
    web = env.state.pods.get("default", "p")["metadata"]["ownerReferences"][0]["uid"]
    c.reconcile()
    env.clock.step(15)
    c.reconcile()                                  # launches the replacement
    assert "default-new0" in live_nodes(env) and moving_in_mark(env, "default-new0") is None
    settle_initialized(env, ["default-new0"])
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"default-new0"})
    assert moving_in_mark(env, "default-new0")["owners"] == {web: 1}


def test_a_blocked_node_gets_an_event_naming_the_blocker(env: Env) -> None:
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
              pod("keep", cpu="1", node_name="a", annotations={wk.DO_NOT_EVICT: "true"}), pod("other", cpu="6", node_name="b"))
    c.reconcile()

    def event() -> list[str]:
        return [e["message"] for e in env.client.get(path_of("v1", "events", "default"))["items"]
                if e["reason"] == "Unconsolidatable" and e["involvedObject"]["name"] == "a"]
    assert env.settle(event) == [f"pod default/keep has annotation {wk.DO_NOT_EVICT}"]
    c.reconcile()
    assert len(event()) == 1                       # the same reason is not reported again


def test_an_action_that_does_not_pay_for_its_disruption_is_not_taken_and_says_so(env: Env) -> None:
    """At $0.50/h per pod moved, deleting `a` ($0.40/h and its per-node costs, one pod) does not pay, nor, saving less, does replacing it."""
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, min_savings_per_pod=0.5)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
              pod("p", cpu="1", node_name="a"), pod("other", cpu="7", node_name="b"))
    c.reconcile()
    assert c._proposal is None

    def event() -> list[str]:
        return [e["message"] for e in env.client.get(path_of("v1", "events", "default"))["items"]
                if e["reason"] == "Unconsolidatable" and e["involvedObject"]["name"] == "a"]
    assert env.settle(event) == [f"not worth its disruption: saves ${0.4 + PER_NODE:.4f}/h for 1 pod(s) moved (disruption cost 1), "
                                 "less than $0.5000/h ($0.5/h per unit of disruption cost)"]


def test_an_unchanged_reason_is_not_reported_every_pass(env: Env) -> None:
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
              pod("keep", cpu="1", node_name="a", annotations={wk.DO_NOT_EVICT: "true"}), pod("other", cpu="6", node_name="b"))

    def events() -> list[dict[str, Any]]:
        return [e for e in env.client.get(path_of("v1", "events", "default"))["items"]
                if e["reason"] == "Unconsolidatable" and e["involvedObject"]["name"] == "a"]
    for _ in range(6):                              # a minute of passes, 10 s apart
        c.reconcile()
        env.clock.step(10)
    (event,) = env.settle(events)
    assert event["count"] == 1
    env.clock.step(31 * 60)                         # said again only after a long while: the same Event, counted
    c.reconcile()
    env.settle(lambda: [e["count"] for e in events()] == [2])


def test_reasons_that_change_every_pass_are_said_every_few_minutes_not_every_pass(env: Env) -> None:
    from karpy.controller.consolidation.decisions import ConsolidationPlan, Kept
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("a"))

    def messages() -> list[str]:
        return sorted(e["message"] for e in env.client.get(path_of("v1", "events", "default"))["items"]
                      if e["reason"] == "Unconsolidatable" and e["involvedObject"]["name"] == "a")
    for i in range(6):                              # a reason naming a node planned with a new name each pass
        c._report_kept(ConsolidationPlan([], [Kept("a", f"no cheaper fit: would need node default-{i}")]))
        env.clock.step(10)
    assert env.settle(messages) == ["no cheaper fit: would need node default-0"]
    env.clock.step(120)
    c._report_kept(ConsolidationPlan([], [Kept("a", "no cheaper fit: would need node default-9")]))
    env.settle(lambda: len(messages()) == 2)


def test_nothing_is_proposed_while_pods_wait_for_capacity(env: Env) -> None:
    c = consolidation(env)
    # fits on no node: the local cluster's scheduler marks it Unschedulable
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("empty"), pod("waiting", cpu="100"))
    env.settle(lambda: c.unsettled() == "pods are waiting for capacity")
    c.reconcile()
    assert c._proposal is None


def test_karpy_explain_node_answers_for_a_live_cluster(env: Env, tmp_path: Any) -> None:
    """The same decisions as the controller, for one node, from the command line against the local cluster."""
    catalog_file = tmp_path / "catalog.yaml"
    catalog_file.write_text(yaml.safe_dump(CATALOG_DOC))
    # owned by a kind the local cluster's garbage collector leaves alone: their owner does not exist
    rc = ("ReplicationController", "app")
    objects = [provisioner("default", consolidation={"enabled": True}), karpy_node("a"), karpy_node("b"),
               pod("pa", cpu="1", node_name="a", owner=rc),
               pod("pb", cpu="6", node_name="b", annotations={wk.DO_NOT_EVICT: "true"}, owner=rc)]
    env.kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def explain(name: str) -> dict[str, Any]:
        run = subprocess.run([sys.executable, "-m", "karpy.main", "explain", "node", name, "--kubeconfig",
                              str(env.kube.kubeconfig), "--catalog", str(catalog_file), "--consolidation-min-node-age", "0",
                              "-o", "json"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)
    assert explain("b") == {"node": "b", "verdict": "keep",
                            "reason": f"pod default/pb has annotation {wk.DO_NOT_EVICT}"}
    a = explain("a")
    assert a["verdict"] == "delete" and "a" in a["nodes"], a
    assert a["moves"] == [{"pod": "default/pa", "to": "b"}], a
    missing = subprocess.run([sys.executable, "-m", "karpy.main", "explain", "node", "nope", "--kubeconfig",
                              str(env.kube.kubeconfig), "--catalog", str(catalog_file)], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "node 'nope' not found" in missing.stderr


def test_a_replacement_that_never_initializes_is_removed_and_the_old_node_kept(env: Env) -> None:
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("big"), pod("p", cpu="1", node_name="big"))
    c.reconcile()
    env.clock.step(15)
    c.reconcile()
    env.settle(lambda: "default-new0" in live_nodes(env))
    env.clock.step(601)                            # past the replacement timeout, never initialized
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"big"} and not live_nodes(env)["big"]["spec"].get("unschedulable"))


def test_several_nodes_go_at_once_within_the_disruption_budget(env: Env) -> None:
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, max_disrupted="2")
    env.apply(provisioner("default", consolidation={"enabled": True}),
              *[karpy_node(n) for n in "abcde"], *[pod(f"p{n}", cpu="1", node_name=n) for n in "abcde"])
    c.reconcile()
    assert c._proposal is not None
    assert sum(len(a.nodes) for a in c._proposal.actions) == 2
    env.clock.step(15)
    c.reconcile()
    env.settle(lambda: len(live_nodes(env)) == 3)
    assert set(live_nodes(env)) == {"c", "d", "e"}      # a's and b's pods go to e, the node the others go before


def test_a_pod_no_provisioner_can_satisfy_holds_consolidation_back_only_for_the_window(env: Env) -> None:
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, pending_wait_seconds=30)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("empty"),
              karpy_node("full"), pod("big", cpu="7", node_name="full"), pod("waiting", cpu="100"))
    env.settle(lambda: c.unsettled() == "pods are waiting for capacity")
    c.reconcile()
    assert c._proposal is None
    env.clock.step(31)
    c.reconcile()
    assert c._proposal is not None and c._proposal.action.nodes == ("empty",)


def test_consolidation_waits_while_a_node_leaves_by_its_nodeclaim(env: Env) -> None:
    """A NodeClaim being deleted takes its Node with it: the in-flight index counts the node as leaving before the
    Node itself carries a deletionTimestamp, and consolidation waits for it."""
    claims = path_of(v1.GROUP_VERSION, v1.PLURAL)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("going"))
    env.client.create(claims, {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                               "metadata": {"name": "going", "finalizers": [wk.TERMINATION_FINALIZER]},
                               "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws",
                                                                             "kind": "EC2NodeClass", "name": "default"}}})
    env.client.patch(path_of(v1.GROUP_VERSION, v1.PLURAL, name="going", subresource="status"),
                     {"status": {"nodeName": "going"}})
    env.settle(lambda: env.state.nodes.get("", "going"))
    assert launching_or_terminating(env.state) is None
    env.client.delete(path_of(v1.GROUP_VERSION, v1.PLURAL, name="going"))
    try:
        assert not env.state.nodes.get("", "going")["metadata"].get("deletionTimestamp")
        assert launching_or_terminating(env.state) == "node going is being deleted"
    finally:
        env.client.patch(path_of(v1.GROUP_VERSION, v1.PLURAL, name="going"), {"metadata": {"finalizers": None}})


def test_a_node_the_pods_of_a_deleted_node_go_to_is_not_consolidated(env: Env) -> None:
    """v0.16 does not consider a node nominated for pods: here those of a node being drained."""
    c = consolidation(env)
    going = karpy_node("going")
    going["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    env.apply(provisioner("default", consolidation={"enabled": True}), going, karpy_node("fresh"),
              pod("moving", cpu="6", node_name="going", owner=("ReplicationController", "app")))
    env.client.delete(path_of("v1", "nodes", name="going"))
    env.settle(lambda: (env.state.nodes.get("", "going") or {"metadata": {}})["metadata"].get("deletionTimestamp"))
    env.settle(lambda: env.state.pods.get("default", "moving") is not None)
    verdict = c.decide(first_only=False).verdict("fresh")
    assert verdict is not None and verdict.reason == "node is nominated for pod default/moving, which is on its way to it"
    env.client.patch(path_of("v1", "nodes", name="going"), {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("setting, nodes, allowed", [("10%", 300, 30), ("10%", 5, 1), ("3", 300, 3), ("0", 10, 1),
                                                      ("25%", 10, 2)])
def test_the_disruption_budget_is_a_count_or_a_share_of_the_nodes_and_at_least_one(setting: str, nodes: int,
                                                                                     allowed: int) -> None:
    assert disruption_budget(setting, nodes) == allowed


def test_a_malformed_disruption_budget_is_refused_by_name() -> None:
    run = subprocess.run([sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", "/nonexistent",
                          "--cloud-provider", "fake", "--cluster-name", "x", "--consolidation-max-disrupted", "a lot"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--consolidation-max-disrupted 'a lot'" in run.stderr


def test_the_next_proposal_is_decided_while_one_waits_as_if_its_nodes_were_gone(env: Env) -> None:
    """Proposals overlap, staggered over the window: the budget bounds the nodes disrupted at once, not per window."""
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, max_disrupted="1")
    env.apply(provisioner("default", consolidation={"enabled": True}),
              *[karpy_node(n) for n in "abcd"], *[pod(f"p{n}", cpu="1", node_name=n) for n in "abcd"])
    c.reconcile()
    (first,) = c._proposals
    env.clock.step(5)                                # a third of the window
    c.reconcile()
    assert len(c._proposals) == 2
    second = c._proposals[1]
    assert not set(second.nodes) & set(first.nodes)
    # its pods do not go to the first proposal's node, and the node the first one's pods go to stays
    receiving = {to for a in first.actions for _, to in a.moves}
    assert not {to for a in second.actions for _, to in a.moves} & set(first.nodes)
    assert receiving and not set(second.nodes) & receiving
    env.clock.step(10)                               # the first one's turn
    c.reconcile()
    env.settle(lambda: not set(first.nodes) & set(live_nodes(env)))
    env.clock.step(5)                                # the second one's turn, re-validated against the cluster now
    c.reconcile()
    env.settle(lambda: len(live_nodes(env)) == 2)
    assert not set(second.nodes) & set(live_nodes(env))


def test_a_proposal_whose_turn_comes_while_a_drain_uses_the_budget_waits_for_it(env: Env) -> None:
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, max_disrupted="1")
    going = karpy_node("going")
    going["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    env.apply(provisioner("default", consolidation={"enabled": True}), going, karpy_node("full"),
              karpy_node("half"), pod("big", cpu="6", node_name="full"), pod("ph", cpu="1", node_name="half"),
              pod("draining", cpu="1", node_name="going"))
    env.client.delete(path_of("v1", "nodes", name="going"))
    env.settle(lambda: (env.state.nodes.get("", "going") or {"metadata": {}})["metadata"].get("deletionTimestamp"))
    c.reconcile()                                    # proposed while the drain goes on
    assert c._proposal is not None and c._proposal.nodes == ("half",)
    env.clock.step(15)
    assert c.reconcile() == 1.0                      # its turn, but the node being drained uses the budget
    assert "half" in live_nodes(env) and c._proposal is not None
    env.client.patch(path_of("v1", "nodes", name="going"), {"metadata": {"finalizers": None}})
    env.settle(lambda: env.state.nodes.get("", "going") is None)
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"full"})


def test_empty_nodes_all_go_at_once_whatever_the_disruption_budget(env: Env) -> None:
    """An empty node disrupts no pod: a budget of one node does not make a scale-in's empty nodes go one by one."""
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, max_disrupted="1")
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("full"),
              pod("big", cpu="6", node_name="full"), *(karpy_node(f"empty{i}") for i in range(3)))
    c.reconcile()
    assert c._proposal is not None and set(c._proposal.nodes) == {"empty0", "empty1", "empty2"}
    env.clock.step(15)
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"full"})


def test_a_proposal_held_past_another_window_is_dropped(env: Env) -> None:
    c = consolidation(env)
    c.settings = dataclasses.replace(SETTINGS, max_disrupted="1")
    going = karpy_node("going")
    going["metadata"]["finalizers"] = [wk.TERMINATION_FINALIZER]
    env.apply(provisioner("default", consolidation={"enabled": True}), going, karpy_node("full"),
              karpy_node("half"), pod("big", cpu="6", node_name="full"), pod("ph", cpu="1", node_name="half"),
              pod("draining", cpu="1", node_name="going"))
    env.client.delete(path_of("v1", "nodes", name="going"))
    env.settle(lambda: (env.state.nodes.get("", "going") or {"metadata": {}})["metadata"].get("deletionTimestamp"))
    c.reconcile()
    env.clock.step(30)                               # the drain never ends within a second window
    c.reconcile()
    assert c._proposal is None and "half" in live_nodes(env)
    env.client.patch(path_of("v1", "nodes", name="going"), {"metadata": {"finalizers": None}})


def test_a_replacement_no_longer_needed_becomes_a_delete_and_nothing_is_launched(env: Env) -> None:
    """Re-validation takes a fresh delete of the proposed nodes (room appeared during the window)."""
    c = consolidation(env)
    env.apply(provisioner("default", consolidation={"enabled": True}), karpy_node("big"), pod("p", cpu="1", node_name="big"))
    c.reconcile()
    assert c._proposal is not None and c._proposal.action.kind == "replace"
    env.apply(karpy_node("roomy"))
    env.clock.step(15)
    c.reconcile()
    env.settle(lambda: set(live_nodes(env)) == {"roomy"})    # no replacement launched
    assert not c._replacing


def test_karpy_explain_node_agrees_with_karpy_plan_consolidate_on_the_same_cluster(env: Env, tmp_path: Any) -> None:
    catalog_file = tmp_path / "catalog.yaml"
    catalog_file.write_text(yaml.safe_dump(CATALOG_DOC))
    rc = ("ReplicationController", "app")
    # a is deleted (its pod fits on b), b is kept (do-not-evict), c is replaced by a small node (its pod fits
    # nowhere once a's pod is on b), d is kept (no cheaper fit)
    objects = [provisioner("default", consolidation={"enabled": True}), *[karpy_node(n) for n in "abcd"],
               pod("pa", cpu="1500m", node_name="a", owner=rc),
               pod("pb", cpu="6", node_name="b", annotations={wk.DO_NOT_EVICT: "true"}, owner=rc),
               pod("pc", cpu="1500m", node_name="c", owner=rc), pod("pd", cpu="7", node_name="d", owner=rc)]
    env.kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    live = [o for plural in ("provisioners", "nodes", "pods")
            for o in env.client.get(path_of("karpenter.sh/v1alpha5" if plural == "provisioners" else "v1", plural))["items"]]
    dump = tmp_path / "cluster.yaml"
    dump.write_text(yaml.safe_dump_all(live))
    run = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "--consolidate", "-o", "json", "-f", str(dump),
                          "--catalog", str(catalog_file)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    planned = json.loads(run.stdout)
    by_node = {n: a for a in planned["actions"] for n in a["nodes"]}
    kept = {k["node"]: k["reason"] for k in planned["kept"]}
    assert {n: a["type"] for n, a in by_node.items()} == {"a": "delete", "c": "replace"} and set(kept) == {"b", "d"}
    for name in "abcd":
        run = subprocess.run([sys.executable, "-m", "karpy.main", "explain", "node", name, "--kubeconfig",
                              str(env.kube.kubeconfig), "--catalog", str(catalog_file), "--consolidation-min-node-age", "0",
                              "-o", "json"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        explained = json.loads(run.stdout)
        if name in kept:
            assert (explained["verdict"], explained["reason"]) == ("keep", kept[name])
        else:
            action = by_node[name]
            assert (explained["verdict"], explained["nodes"], explained["moves"]) == \
                (action["type"], action["nodes"], action["moves"])


def test_two_proposed_replacements_found_to_fit_one_new_node_are_taken_as_one() -> None:
    """Re-validation accepts a fresh replace that launches no more than was proposed for the same nodes."""
    from karpy.controller.consolidation.controller import fewer_launches
    from karpy.controller.consolidation.decisions import Action
    from karpy.controller.consolidation.replacements import Replacement

    def replace(nodes: str, launches: int) -> Action:
        new = tuple(Replacement(None, "small", "zone-a", "on-demand", 0.1) for _ in range(launches))  # type: ignore[arg-type]
        return Action("replace", tuple(nodes), 0.3, replacements=new)
    a, b = replace("a", 1), replace("b", 1)
    proposed = {"a": a, "b": b}
    assert fewer_launches(replace("ab", 1), proposed)
    assert fewer_launches(replace("ab", 2), proposed)
    assert not fewer_launches(replace("ab", 3), proposed)         # more launched than proposed
    assert not fewer_launches(replace("ac", 1), proposed)         # c was not proposed for replacing
    assert not fewer_launches(Action("delete", ("a", "c"), 0.5), proposed)
