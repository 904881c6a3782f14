"""Initialization, emptiness and expiry: decisions on a stepped clock, applied to the local cluster."""

from __future__ import annotations

import datetime as dt

import pytest

from karpy.apis import labels as wk
from karpy.controller.clock import FakeClock
from karpy.controller.node.emptiness import Emptiness, decide
from karpy.controller.node.expiration import Expiration, seconds_left
from karpy.controller.node.initialization import Initialization
from karpy.kubeclient.raw import path_of
from tests.builders import node, pod, provisioner
from tests.controller.conftest import Env

pytestmark = pytest.mark.slow      # starts the local cluster

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(("kwargs", "expected"), [
    pytest.param(dict(ttl=None, initialized=True, busy=False, marked_at=None), {}, id="no-ttl"),
    pytest.param(dict(ttl=30, initialized=False, busy=False, marked_at=None), {}, id="not-initialized"),
    pytest.param(dict(ttl=30, initialized=True, busy=True, marked_at=None), {}, id="busy"),
    pytest.param(dict(ttl=30, initialized=True, busy=True, marked_at=T0), {"unmark": True}, id="busy-again"),
    pytest.param(dict(ttl=30, initialized=True, busy=False, marked_at=None), {"mark": "2024-01-01T00:00:10Z", "requeue_after": 30},
                 id="empty"),
    pytest.param(dict(ttl=30, initialized=True, busy=False, marked_at=T0), {"requeue_after": 20}, id="waiting"),
    pytest.param(dict(ttl=5, initialized=True, busy=False, marked_at=T0), {"delete": True}, id="expired"),
])
def test_emptiness_decisions(kwargs: dict, expected: dict) -> None:
    verdict = decide(now=T0 + dt.timedelta(seconds=10), **kwargs)
    assert {k: v for k, v in verdict.__dict__.items() if v not in (None, False)} == expected


def test_seconds_until_expiry() -> None:
    assert seconds_left(ttl=None, created=T0, now=T0) is None
    assert seconds_left(ttl=60, created=T0, now=T0 + dt.timedelta(seconds=70)) == -10


def test_empty_node_is_deleted_after_ttl(env: Env) -> None:
    env.clock = FakeClock(dt.datetime.now(dt.timezone.utc))
    env.apply(provisioner("default", ttlSecondsAfterEmpty=30),
              node("n1", provisioner="default", initialized=True, instance_type="small"))
    emptiness = Emptiness(env.state, env.clock)
    assert emptiness.reconcile() == 30                          # marked; come back in 30 s
    env.settle(lambda: wk.EMPTINESS_TIMESTAMP in (env.state.nodes.get("", "n1")["metadata"].get("annotations") or {}))
    env.clock.step(29)
    assert 0 < emptiness.reconcile() <= 1                   # the mark has second precision
    env.clock.step(1)
    emptiness.reconcile()
    env.settle(lambda: not [n for n in env.client.get(path_of("v1", "nodes"))["items"]
                            if n["metadata"]["name"] == "n1" and not n["metadata"].get("deletionTimestamp")])


def test_a_pod_arriving_clears_the_emptiness_mark(env: Env) -> None:
    env.clock = FakeClock(dt.datetime.now(dt.timezone.utc))
    env.apply(provisioner("default", ttlSecondsAfterEmpty=30),
              node("n1", provisioner="default", initialized=True, instance_type="small"))
    emptiness = Emptiness(env.state, env.clock)
    emptiness.reconcile()
    env.settle(lambda: wk.EMPTINESS_TIMESTAMP in (env.state.nodes.get("", "n1")["metadata"].get("annotations") or {}))
    env.apply(pod("arrived", node_name="n1"))
    emptiness.reconcile()
    env.settle(lambda: wk.EMPTINESS_TIMESTAMP not in (env.state.nodes.get("", "n1")["metadata"].get("annotations") or {}))


def test_expired_nodes_are_deleted(env: Env) -> None:
    env.apply(provisioner("default", ttlSecondsUntilExpired=60), node("old", provisioner="default", instance_type="small"))
    env.clock = FakeClock(dt.datetime.now(dt.timezone.utc))
    expiration = Expiration(env.state, env.clock)
    assert 0 < expiration.reconcile() <= 60
    env.clock.step(61)
    expiration.reconcile()
    env.settle(lambda: not [n for n in env.client.get(path_of("v1", "nodes"))["items"] if n["metadata"]["name"] == "old"])


def test_nodes_are_initialized_once_ready_without_startup_taints(env: Env) -> None:
    taint = {"key": "example.com/agent-not-ready", "effect": "NoSchedule"}
    env.apply(provisioner("default", startupTaints=[taint]),
              node("booting", provisioner="default", instance_type="small", taints=[taint]))
    init = Initialization(env.state, env.clock)
    init.reconcile()
    assert wk.INITIALIZED not in env.client.get(path_of("v1", "nodes", name="booting"))["metadata"]["labels"]
    env.client.patch(path_of("v1", "nodes", name="booting"), {"spec": {"taints": []}})
    env.settle(lambda: not env.state.nodes.get("", "booting")["spec"].get("taints"))
    init.reconcile()
    assert env.client.get(path_of("v1", "nodes", name="booting"))["metadata"]["labels"][wk.INITIALIZED] == "true"
