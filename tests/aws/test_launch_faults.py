"""Crash safety of the launch path with the AWS provider, EC2 played by moto on loopback: a controller killed at
any point of a launch (the fault hook stops it there) and started again (a fresh provider and launcher against
the same cluster and the same moto) launches no instance twice, leaks none, and binds every pod."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Iterator

import pytest

from karpy.apis import labels as wk
from karpy.apis import nodeclaim as api
from karpy.controller.cloudprovider.aws.provider import AwsCloudProvider
from karpy.controller.cloudprovider.types import CloudError
from karpy.controller.launch.launcher import KILL_POINTS, Launcher
from karpy.controller.node.garbagecollection import GarbageCollection
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import RawClient, path_of
from tests.aws.conftest import Moto, provider, request
from tests.aws.faults import FaultProxy, ec2_error
from tests.builders import provisioner, unschedulable_pod
from tests.expectations import eventually
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts a moto server on loopback

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = path_of(api.GROUP_VERSION, api.PLURAL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Kube, ClusterState]]:
    c, kube = start(tmp_path, system_nodes=0, controllers=False)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    state = ClusterState(RawClient(kube.api_client))
    state.start()
    yield kube, state
    state.stop()
    kube.api_client.close()
    c.stop()


def process(kube: Kube, state: ClusterState, fault: Any = None, *, like: AwsCloudProvider | None = None
            ) -> tuple[AwsCloudProvider, Provisioner]:
    """What one controller process builds: its own provider (no memory of earlier launches) and launcher. `like`
    lends its instance type catalog (read from EC2, the slow part) and nothing else."""
    cloud = provider(kube, launch_batch_idle_seconds=0.05)
    if like is not None:
        cloud.types = like.types
    launcher = Launcher(state, cloud, cloud.catalog, **({"fault": fault} if fault else {}))
    return cloud, Provisioner(state, cloud, cloud.catalog, launcher=launcher)


def kill_at(point: str) -> Any:
    def fault(at: str) -> None:
        if at == point:
            raise SystemExit(f"killed at {point}")
    return fault


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_launch_killed_at_any_point_adopts_its_instances_after_a_restart(moto: Moto, cluster: Any, point: str) -> None:
    kube, state = cluster
    client = state.client
    client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner("default", requirements=[
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]},
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]))
    for i in range(3):                                   # 1.5 cpu each: one m5.large apiece, launched as one batch
        client.create(path_of("v1", "pods", "default"), unschedulable_pod(f"web-{i}", cpu="1500m"))
    eventually(lambda: len(state.pods.items()) == 3 and state.provisioners.items())
    first, dying = process(kube, state, kill_at(point))
    with pytest.raises(SystemExit):
        dying.reconcile()
    dying._pool.shutdown(wait=True)                       # every launch of the batch reaches the kill point too
    assert len(client.get(CLAIMS)["items"]) == 3          # every intent was written before the cloud call

    cloud, fresh = process(kube, state, like=first)       # the restarted controller
    fresh.launcher.reconcile()
    fresh.reconcile()
    running = moto.instances("pending", "running")
    assert len(running) == 3                              # no duplicate
    nodes = {n["metadata"]["name"]: n for n in client.get(path_of("v1", "nodes"))["items"]}
    assert sorted(nodes) == sorted(i["PrivateDnsName"] for i in running)      # no leak: each has its Node
    for n in nodes.values():
        assert n["metadata"]["ownerReferences"][0]["kind"] == "Provisioner"
    pods = [client.get(path_of("v1", "pods", "default", f"web-{i}")) for i in range(3)]
    assert sorted(p["spec"].get("nodeName") or "" for p in pods) == sorted(nodes)   # every pod bound, one per node
    GarbageCollection(state, cloud, fresh.launcher, grace_seconds=0).reconcile()
    assert len(moto.instances("pending", "running")) == 3    # garbage collection finds nothing to take


def test_an_instance_whose_claim_tag_was_never_written_is_adopted_by_its_batch_tags(moto: Moto, proxy: FaultProxy,
                                                                                      cluster: Any) -> None:
    kube, _ = cluster
    cloud = provider(kube)
    proxy.on("CreateTags", lambda _, __: ec2_error("UnauthorizedOperation", "stopped between CreateFleet and CreateTags", 403),
             times=1)
    with pytest.raises(CloudError):
        cloud.create(request(cloud, "default-lost-tag", "m5.large"))
    (launched,) = moto.instances("running")
    again = provider(kube).create(request(cloud, "default-lost-tag", "m5.large"))
    assert again.provider_id.endswith(launched["InstanceId"]) and len(proxy.sent("CreateFleet")) == 1
    tags = {t["Key"]: t["Value"] for t in moto.instances("running")[0]["Tags"]}
    assert tags["karpy.dev/node-claim"] == "default-lost-tag"


def test_a_launched_claim_whose_node_never_registers_is_given_up_and_its_instance_terminated(moto: Moto, cluster: Any) -> None:
    kube, state = cluster
    client = state.client
    client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner("default", requirements=[
        {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}]))
    client.create(path_of("v1", "pods", "default"), unschedulable_pod("web-0", cpu="1"))
    eventually(lambda: state.pods.items() and state.provisioners.items())
    cloud, provisioning = process(kube, state)
    provisioning.reconcile()                              # launched; nothing here plays the kubelet: never Ready
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=16)
    gc = GarbageCollection(state, cloud, provisioning.launcher, now=lambda: later)
    gc.reconcile()
    (node,) = client.get(path_of("v1", "nodes"))["items"]
    assert node["metadata"].get("deletionTimestamp")      # handed to termination, which terminates the instance
