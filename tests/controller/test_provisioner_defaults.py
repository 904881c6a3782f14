"""Provisioners applied without the defaulting webhook (the local cluster's plain `kubectl apply`) read as the
webhook would have left them when they launch EC2 instance types: an amd64 image gets an amd64 on-demand node,
not the cheapest arm64 or spot one; a Provisioner that names the key keeps its choice."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from karpy.apis import labels as wk
from karpy.controller.clock import FakeClock
from karpy.controller.cloudprovider.catalog import built_in
from karpy.controller.cloudprovider.fake import FakeCloudProvider
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.state import ClusterState, aws_defaults
from karpy.kubeclient.raw import RawClient
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, ROOT, Env
from tests.expectations import expect_nodes
from tests.simulator.conftest import start

pytestmark = pytest.mark.slow      # starts the local cluster

AWS = built_in("aws")


@pytest.fixture
def aws_env(tmp_path: Path) -> Iterator[Env]:
    """The controller's caches as `karpy controller --cloud-provider fake` (default catalog `aws`) builds them."""
    cluster, kube = start(tmp_path, system_nodes=0, boot_delay=0.2)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    client = RawClient(kube.api_client)
    state = ClusterState(client, aws_defaults=aws_defaults("fake", AWS))
    state.start()
    yield Env(kube, client, state, FakeCloudProvider(client, AWS), FakeClock())
    state.stop()
    kube.api_client.close()
    cluster.stop()


@pytest.mark.parametrize(("spec", "arch", "capacity_type"), [
    pytest.param({}, wk.ARCH_AMD64, wk.CAPACITY_TYPE_ON_DEMAND, id="defaulted"),
    pytest.param({"requirements": [{"key": wk.ARCH, "operator": "In", "values": ["arm64"]}]}, "arm64",
                 wk.CAPACITY_TYPE_ON_DEMAND, id="arch-named"),
    pytest.param({"labels": {wk.CAPACITY_TYPE: "spot"}}, wk.ARCH_AMD64, "spot", id="capacity-type-named"),
])
def test_provisioners_get_the_webhooks_defaults_when_read(aws_env: Env, spec: dict[str, Any], arch: str,
                                                           capacity_type: str) -> None:
    aws_env.apply(provisioner("default", **spec), unschedulable_pod("web", cpu="1"))
    Provisioner(aws_env.state, aws_env.cloud, AWS).reconcile()
    (made,) = expect_nodes(aws_env.client, 1)
    labels = made["metadata"]["labels"]
    assert (labels[wk.ARCH], labels[wk.CAPACITY_TYPE]) == (arch, capacity_type), labels[wk.INSTANCE_TYPE]


def test_aws_defaults_apply_where_ec2_instance_types_are_launched() -> None:
    assert aws_defaults("aws", None) and aws_defaults("fake", AWS)
    assert not aws_defaults("fake", CATALOG) and not aws_defaults("fake", built_in("fake-400"))
