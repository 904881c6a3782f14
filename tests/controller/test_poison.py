"""A poison pod or Provisioner next to healthy ones, on the local cluster: the healthy pods get their
nodes in the same batch; the bad object is skipped and said once, as a Warning Event on it."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env

pytestmark = pytest.mark.slow      # starts the local cluster

BENCHMARK_LIMITS = {"limits": {"resources": {"cpu": "10000000", "memory": "10000000Gi"}}}


def warnings_on(env: Env, kind: str, name: str) -> list[dict[str, Any]]:
    return [e for e in env.client.get(path_of("v1", "events", "default"))["items"]
            if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name and e["type"] == "Warning"]


def test_healthy_pod_gets_its_node_beside_a_pod_asking_for_1e30_bytes(env: Env) -> None:
    env.apply(provisioner("default", **BENCHMARK_LIMITS), unschedulable_pod("poison", cpu=None, memory="1e30"),
              unschedulable_pod("healthy", cpu="500m"))
    Provisioner(env.state, env.cloud, CATALOG).reconcile()
    assert len(env.cloud.create_calls) == 1
    assert env.client.get(path_of("v1", "pods", "default", "healthy"))["spec"].get("nodeName")
    assert not env.client.get(path_of("v1", "pods", "default", "poison"))["spec"].get("nodeName")
    messages = [e["message"] for e in env.settle(lambda: warnings_on(env, "Pod", "poison"))]
    assert "no instance type satisfies memory=1e30" in messages


def test_a_provisioner_that_cannot_be_used_is_skipped_once_and_the_others_launch(env: Env) -> None:
    # the webhook would refuse this one; written straight to the API, it reaches the controller
    broken = provisioner("broken", weight=100, kubeletConfiguration={"evictionHard": {"memory.available": "lots%"}})
    env.apply(broken, provisioner("good"), unschedulable_pod("first", cpu="1500m"))
    provisioning = Provisioner(env.state, env.cloud, CATALOG)
    provisioning.reconcile()
    env.apply(unschedulable_pod("second", cpu="1500m"))   # a node of its own
    provisioning.reconcile()
    for name in ("first", "second"):
        node = env.client.get(path_of("v1", "pods", "default", name))["spec"].get("nodeName")
        assert node and env.client.get(path_of("v1", "nodes", name=node))["metadata"]["labels"]["karpenter.sh/provisioner-name"] == "good"
    # reported once over both batches: a second report would raise the Event's count
    (warning,) = env.settle(lambda: warnings_on(env, "Provisioner", "broken"))
    assert warning["count"] == 1
