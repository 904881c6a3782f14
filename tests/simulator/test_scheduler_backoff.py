"""The local cluster's kube-scheduler backs a pod that fit nowhere off before trying it again, as kube-scheduler's
podInitialBackoffSeconds/podMaxBackoffSeconds do: a burst of new nodes does not re-evaluate and re-mark every
pending pod at each node."""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client import ApiClient, Configuration

from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient
from karpy.simulator.scheduler import INITIAL_BACKOFF_SECONDS, Scheduler
from tests.builders import node, pod
from tests.expectations import eventually
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts the local cluster


def test_a_pod_that_fit_nowhere_is_tried_again_only_after_its_backoff(kube: Kube) -> None:
    configuration = Configuration()
    configuration.host = kube.cluster.url
    api = ApiClient(configuration)
    client = RawClient(api)
    nodes, pods = Informer(client, "v1", "nodes"), Informer(client, "v1", "pods")
    now = [100.0]
    scheduler = Scheduler(client, nodes, pods, clock=lambda: now[0])
    waiting = f"huge-{uuid.uuid4().hex[:6]}"
    extra = f"small-{uuid.uuid4().hex[:6]}"
    try:
        nodes.start().synced.wait(10)
        pods.start().synced.wait(10)
        kube.core.create_namespaced_pod("default", pod(waiting, cpu="64"))
        eventually(lambda: pods.get("default", waiting) is not None)
        scheduler.reconcile()
        marked = kube.core.read_namespaced_pod(waiting, "default")       # the pass awaits its writes
        first = marked.status.conditions[0].message
        eventually(lambda: (pods.get("default", waiting) or {}).get("status", {}).get("conditions"))

        kube.core.create_node(node(extra, allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"}))
        eventually(lambda: nodes.get("", extra) is not None)
        assert scheduler.reconcile() == INITIAL_BACKOFF_SECONDS          # the new node waits for the backoff
        assert kube.core.read_namespaced_pod(waiting, "default").metadata.resource_version == marked.metadata.resource_version

        now[0] += INITIAL_BACKOFF_SECONDS
        scheduler.reconcile()
        again = kube.core.read_namespaced_pod(waiting, "default").status.conditions[0].message
        assert again != first and "Insufficient cpu" in again              # one node more counted in the verdict
    finally:
        nodes.stop()
        pods.stop()
        api.close()
        kube.core.delete_namespaced_pod(waiting, "default", grace_period_seconds=0)
        kube.core.delete_node(extra)


def test_a_pass_sends_a_bounded_number_of_writes_and_asks_to_run_again_at_once(kube: Kube) -> None:
    configuration = Configuration()
    configuration.host = kube.cluster.url
    api = ApiClient(configuration)
    client = RawClient(api)
    nodes, pods = Informer(client, "v1", "nodes"), Informer(client, "v1", "pods")
    scheduler = Scheduler(client, nodes, pods, clock=lambda: 100.0, pass_writes=1)
    names = [f"huge-{uuid.uuid4().hex[:6]}" for _ in range(2)]

    def marked() -> list[str]:
        return [n for n in names if kube.core.read_namespaced_pod(n, "default").status.conditions]
    try:
        nodes.start().synced.wait(10)
        pods.start().synced.wait(10)
        for name in names:
            kube.core.create_namespaced_pod("default", pod(name, cpu="64"))
        eventually(lambda: all(pods.get("default", n) is not None for n in names))
        assert scheduler.reconcile() == 0.0                               # one write, then the rest next pass
        assert marked() == names[:1]                                      # the first to join the queue first
        scheduler.reconcile()
        assert marked() == names
    finally:
        nodes.stop()
        pods.stop()
        api.close()
        for name in names:
            kube.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
