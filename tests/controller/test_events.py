"""Events as client-go's recorder writes them: a repeat raises the count of the Event already there."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of
from tests.builders import pod
from tests.controller.conftest import Env

pytestmark = pytest.mark.slow      # starts the local cluster


def _events(env: Env, name: str) -> list[dict[str, Any]]:
    return [e for e in env.client.get(path_of("v1", "events", "default"))["items"]
            if e["involvedObject"]["name"] == name and e["source"]["component"] == "karpy"]


def test_repeated_events_are_aggregated_into_one_with_a_count(env: Env) -> None:
    env.apply(pod("web"))
    obj = env.client.get(path_of("v1", "pods", "default", "web"))
    for _ in range(3):
        events.record(env.client, obj, reason="FailedProvisioning", message="no instance type satisfies cpu=100",
                      component="karpy", event_type="Warning")
    (event,) = _events(env, "web")
    assert event["count"] == 3 and event["lastTimestamp"] >= event["firstTimestamp"]
    events.record(env.client, obj, reason="FailedProvisioning", message="another reason", component="karpy",
                  event_type="Warning")
    assert sorted(e["count"] for e in _events(env, "web")) == [1, 3]          # another message is another Event


def test_a_repeat_of_an_event_that_is_gone_creates_it_again(env: Env) -> None:
    env.apply(pod("api"))
    obj = env.client.get(path_of("v1", "pods", "default", "api"))
    events.record(env.client, obj, reason="Nominated", message="to node x", component="karpy")
    (event,) = _events(env, "api")
    env.client.delete(path_of("v1", "events", "default", event["metadata"]["name"]))
    events.record(env.client, obj, reason="Nominated", message="to node x", component="karpy")
    assert [e["count"] for e in _events(env, "api")] == [1]


def test_a_pod_is_told_the_node_launched_for_it_and_its_binding(env: Env) -> None:
    from tests.builders import provisioner, unschedulable_pod
    from tests.expectations import eventually

    (web,) = env.provision(provisioner("default"), unschedulable_pod("web", cpu="1"))
    node = web["spec"]["nodeName"]

    def told() -> dict[str, dict[str, Any]]:
        found = {e["reason"]: e for e in _events(env, "web")}
        return found if {"Nominated", "Scheduled"} <= set(found) else {}
    found = eventually(told, timeout=10)
    assert found["Nominated"]["message"].startswith(f"Pod should schedule on node {node}: launched ")
    assert found["Nominated"]["involvedObject"]["uid"] == web["metadata"]["uid"]
    assert found["Scheduled"]["message"] == f"Successfully assigned default/web to {node}"
    assert {e["type"] for e in found.values()} == {"Normal"}
