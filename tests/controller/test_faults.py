"""Faults: a controller that dies at any point of a launch and starts again launches nothing twice, leaks
nothing, and binds every pod. The 'kill' stops the launch at the point (the fault hook raises SystemExit, as
the process would vanish); the 'restart' is a fresh launcher and provisioner against the same cluster and
the same cloud."""

from __future__ import annotations

from typing import Callable

import pytest
from prometheus_client import REGISTRY

from karpy.apis import nodeclaim as api
from karpy.apis.resources import Resources
from karpy.controller.launch.launcher import KILL_POINTS, Launcher
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.builders import pod, provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env

pytestmark = pytest.mark.slow      # starts the local cluster


def kill_at(point: str) -> Callable[[str], None]:
    def fault(at: str) -> None:
        if at == point:
            raise SystemExit(f"killed at {point}")
    return fault


def launches() -> float:
    """Nodes launched so far for the `default` provisioner, by the launcher's metric."""
    return REGISTRY.get_sample_value("karpenter_nodes_created", {"reason": "provisioning", "provisioner": "default"}) or 0.0


def restart(env: Env, dead: Provisioner | None = None) -> Provisioner:
    """What a restarted controller does first: finish every claim, then provision. Its cache is listed after
    the kill, so it holds every bind the killed process made (here: the shared cache catches up first, with the
    binds the killed launch still had in flight on its other bind workers, which a SystemExit in one does not stop;
    `dead`'s workers are waited for, as a process killed for real has none left to land a bind later)."""
    if dead is not None:
        dead.launcher.close()
    def caught_up() -> bool:
        bound = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"].get("nodeName")
                 for p in env.client.get(path_of("v1", "pods"))["items"]}
        return all((env.state.pods.get(*key) or {}).get("spec", {}).get("nodeName") == node for key, node in bound.items())

    env.settle(caught_up)
    launcher = Launcher(env.state, env.cloud, lambda: CATALOG)
    launcher.reconcile()
    fresh = Provisioner(env.state, env.cloud, CATALOG, launcher=launcher)
    fresh.reconcile()
    return fresh


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_launch_killed_at_any_point_is_finished_by_the_next_process_without_duplicates_or_leaks(env: Env, point: str) -> None:
    env.apply(provisioner("default"), *[unschedulable_pod(f"web-{i}", cpu="500m") for i in range(3)])
    dying = Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG,
                                                                        fault=kill_at(point)))
    counted = launches()
    with pytest.raises(SystemExit):
        dying.reconcile()
    claims = env.client.get(path_of(api.GROUP_VERSION, api.PLURAL))["items"]
    assert len(claims) == 1                                            # the intent was written before the cloud call
    restart(env, dying)
    assert launches() - counted == 1     # an instance the restarted launch finds and adopts is not counted again
    nodes = env.client.get(path_of("v1", "nodes"))["items"]
    assert [n["metadata"]["name"] for n in nodes] == [claims[0]["metadata"]["name"]]
    assert len(env.cloud.launched) == 1                                # one instance ever launched: no duplicate
    assert [i.provider_id for i in env.cloud.list()] == [nodes[0]["spec"]["providerID"]]   # and none without its node
    env.settle(lambda: all(env.client.get(path_of("v1", "pods", "default", f"web-{i}"))["spec"].get("nodeName")
                           == nodes[0]["metadata"]["name"] for i in range(3)))
    claim = env.client.get(path_of(api.GROUP_VERSION, api.PLURAL, name=claims[0]["metadata"]["name"]))
    assert claim["status"]["providerID"] == nodes[0]["spec"]["providerID"] and claim["status"]["podsBound"] is True


def test_pods_a_claim_is_for_are_not_planned_again_while_it_is_unfinished(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m"))
    dying = Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG,
                                                                        fault=kill_at("before-create")))
    with pytest.raises(SystemExit):
        dying.reconcile()
    Provisioner(env.state, env.cloud, CATALOG).reconcile()            # a batch before the claims were finished
    assert env.cloud.create_calls == [] and len(env.client.get(path_of(api.GROUP_VERSION, api.PLURAL))["items"]) == 1


def test_a_restarted_launch_binds_no_pod_past_the_room_the_scheduler_left_on_its_node(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="1500m", schedulerName="another-scheduler"))
    dying = Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG,
                                                                        fault=kill_at("after-node")))
    with pytest.raises(SystemExit):
        dying.reconcile()
    (node,) = [n for n in env.client.get(path_of("v1", "nodes"))["items"]
               if n["metadata"]["labels"].get("karpenter.sh/provisioner-name") == "default"]
    room = Resources.parse(node["status"]["allocatable"]) - Resources.parse({"cpu": "1500m"})
    # while karpy was down, the scheduler filled the node with another pod as large as the room left for web-0
    env.apply(pod("squatter", node_name=node["metadata"]["name"], cpu=f"{room['cpu'] + 500}m"))
    restart(env).reconcile()
    web = env.client.get(path_of("v1", "pods", "default", "web-0"))
    assert web["spec"].get("nodeName") != node["metadata"]["name"]        # left pending: it no longer fits there
