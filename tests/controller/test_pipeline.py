"""The live path as a pipeline: a node's pods bind side by side, and a batch does not wait for the binds of the
last one (nor plans its pods again)."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

import pytest

from karpy.apis import launch_record as rec
from karpy.apis.v1 import nodeclaim as api
from karpy.controller.launch.launcher import Launcher
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env

pytestmark = pytest.mark.slow      # starts the local cluster

CLAIMS = path_of(api.GROUP_VERSION, api.PLURAL)
ELSEWHERE = "another-scheduler"      # the local cluster's scheduler leaves these pods to karpy


def test_the_pods_of_one_node_bind_side_by_side(env: Env) -> None:
    # another scheduler's pods: karpy alone binds them, so every bind reaches the barrier below
    env.apply(provisioner("default"), *[unschedulable_pod(f"web-{i}", cpu="100m", schedulerName=ELSEWHERE) for i in range(40)])
    # each bind, once sent, waits for nine others: binds sent one at a time would never meet and break the barrier
    meet = threading.Barrier(10, timeout=20)

    def in_step(at: str) -> None:
        if at == "mid-bind":
            meet.wait()

    Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG, fault=in_step)).reconcile()
    assert not meet.broken
    (claim,) = env.client.get(CLAIMS)["items"]
    assert rec.is_true(claim, rec.PODS_BOUND)
    nodes = {env.client.get(path_of("v1", "pods", "default", f"web-{i}"))["spec"].get("nodeName") for i in range(40)}
    assert nodes == {claim["status"]["nodeName"]}


def test_a_batch_opens_while_the_last_one_binds_and_does_not_plan_its_pods_again(env: Env) -> None:
    env.apply(provisioner("default"), *[unschedulable_pod(f"first-{i}", cpu="100m", schedulerName=ELSEWHERE) for i in range(20)])
    gate = threading.Event()

    def held(at: str) -> None:
        if at == "mid-bind":
            gate.wait(20)

    provisioning = Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG, fault=held))
    try:
        provisioning.reconcile(wait=False)
        env.apply(*[unschedulable_pod(f"second-{i}", cpu="100m", schedulerName=ELSEWHERE) for i in range(5)])
        provisioning.reconcile(wait=False)                    # returns while the first node's binds are held
        def every_pod_claimed() -> list[dict[str, Any]] | None:
            items = env.client.get(CLAIMS)["items"]
            return items if sum(len(rec.pods_of(c)) for c in items) >= 25 else None

        claims = env.settle(every_pod_claimed)
        assert not any(rec.is_true(c, rec.PODS_BOUND) for c in claims)
        planned = sorted(p.name for c in claims for p in rec.pods_of(c))      # each pod once, in one claim
        assert planned == sorted([f"first-{i}" for i in range(20)] + [f"second-{i}" for i in range(5)])
        assert not any({p.name[:5] for p in rec.pods_of(c)} == {"first", "secon"} for c in claims)
    finally:
        gate.set()
    env.settle(lambda: all(rec.is_true(c, rec.PODS_BOUND) for c in env.client.get(CLAIMS)["items"]))
    assert len(env.cloud.create_calls) == len(claims)
    pods = env.client.get(path_of("v1", "pods", "default"))["items"]
    assert len(pods) == 25 and all(p["spec"].get("nodeName") for p in pods)


def test_a_large_batch_launches_its_first_chunk_while_the_rest_is_planned(env: Env) -> None:
    env.apply(provisioner("default"), *[unschedulable_pod(f"web-{i}", cpu="1", schedulerName=ELSEWHERE) for i in range(10)])
    first_launch = threading.Event()
    asked: list[bool] = []

    def leading() -> bool:
        # asked before each chunk is launched: the second chunk is held until the first one's launch has begun
        if asked:
            asked.append(first_launch.wait(20))
        else:
            asked.append(True)
        return True

    def step(at: str) -> None:
        if at == "before-create":
            first_launch.set()

    launcher = Launcher(env.state, env.cloud, lambda: CATALOG, fault=step)
    Provisioner(env.state, env.cloud, CATALOG, launcher=launcher, leading=leading, first_chunk=3).reconcile()
    assert len(asked) == 2 and all(asked)             # chunks of 3 and 7 pods; the first launched before the second
    claims = env.client.get(CLAIMS)["items"]
    planned = sorted(p.name for c in claims for p in rec.pods_of(c))
    assert planned == sorted(f"web-{i}" for i in range(10))             # each pod in one claim
    assert len(env.cloud.create_calls) == len(claims)
    pods = env.client.get(path_of("v1", "pods", "default"))["items"]
    assert all(p["spec"].get("nodeName") for p in pods)


def test_a_replica_that_stops_leading_mid_plan_launches_no_further_chunk(env: Env) -> None:
    env.apply(provisioner("default"), *[unschedulable_pod(f"web-{i}", cpu="1", schedulerName=ELSEWHERE) for i in range(10)])
    asked: list[int] = []

    def leading() -> bool:
        asked.append(1)
        return len(asked) == 1                        # leads for the first chunk only

    Provisioner(env.state, env.cloud, CATALOG, leading=leading, first_chunk=3).reconcile()
    claims = env.client.get(CLAIMS)["items"]
    assert sorted(p.name for c in claims for p in rec.pods_of(c)) == ["web-0", "web-3", "web-6"]   # evenly over the queue
    assert len(env.cloud.create_calls) == len(claims)
    events = env.client.get(path_of("v1", "events", "default"))["items"]
    assert not [e for e in events if e.get("reason") == "FailedProvisioning"]   # the rest are not called unschedulable
    waiting = {p["metadata"]["name"] for p in env.client.get(path_of("v1", "pods", "default"))["items"] if not p["spec"].get("nodeName")}
    assert waiting == {f"web-{i}" for i in range(10)} - {"web-0", "web-3", "web-6"}


def test_planning_leaves_the_process_wide_collector_and_switch_interval_alone(env: Env) -> None:
    """Garbage collection and the interpreter's switch interval are the process's settings, not a batch's."""
    env.apply(provisioner("default"), *[unschedulable_pod(f"web-{i}", cpu="1", schedulerName=ELSEWHERE) for i in range(6)])
    seen: list[tuple[bool, float]] = []

    def leading() -> bool:
        seen.append((gc.isenabled(), sys.getswitchinterval()))
        return True

    switch = sys.getswitchinterval()
    assert gc.isenabled()
    Provisioner(env.state, env.cloud, CATALOG, leading=leading, first_chunk=2).reconcile()
    assert seen == [(True, switch), (True, switch)]                # asked before each of the two chunks
