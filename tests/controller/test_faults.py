"""Faults: a controller that dies mid-launch and starts again launches nothing twice."""

from __future__ import annotations

from karpy.controller.cloudprovider.fake import FakeCloudProvider
from karpy.controller.cloudprovider.types import Instance, NodeRequest
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env


class DiesAfterLaunch(FakeCloudProvider):
    """The real fake provider, but the process 'dies' right after the instance exists."""

    def create(self, request: NodeRequest) -> Instance:
        super().create(request)
        raise SystemExit("killed mid-launch")


def test_restart_after_a_crash_mid_launch_reuses_the_launched_node(env: Env) -> None:
    env.apply(provisioner("default"), *[unschedulable_pod(f"web-{i}", cpu="500m") for i in range(3)])
    crashing = DiesAfterLaunch(env.client, CATALOG)
    try:
        Provisioner(env.state, crashing, CATALOG).reconcile()
    except SystemExit:
        pass
    launched = [n["metadata"]["name"] for n in env.client.get(path_of("v1", "nodes"))["items"]]
    assert len(launched) == 1
    env.settle(lambda: env.state.nodes.get("", launched[0]) is not None)
    Provisioner(env.state, env.cloud, CATALOG).reconcile()        # the restarted controller
    assert env.cloud.create_calls == []                           # the node being launched holds the pods
    assert [n["metadata"]["name"] for n in env.client.get(path_of("v1", "nodes"))["items"]] == launched
    # kube-scheduler (the local cluster's) places them once the node is Ready
    env.settle(lambda: all(env.client.get(path_of("v1", "pods", "default", f"web-{i}"))["spec"].get("nodeName") == launched[0]
                           for i in range(3)))
    assert [i.node_name for i in env.cloud.list()] == launched    # one instance, owned by one node: nothing leaked
