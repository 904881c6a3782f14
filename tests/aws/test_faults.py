"""EC2's failures on the wire, played by a loopback proxy in front of moto: an instance type out of capacity,
throttling, a launch whose answer never came, and launches batched into one CreateFleet. In every case
nothing leaks and nothing launches twice."""

from __future__ import annotations

import concurrent.futures

import pytest

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.types import CloudError, InsufficientCapacity
from karpy.kubeclient.raw import RawClient, path_of
from tests.aws.conftest import Moto, provider, request
from tests.aws.faults import FaultProxy, answer_lost, ec2_error, out_of_capacity, throttled
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts a moto server on loopback


def claims(moto: Moto) -> dict[str, str]:
    """node name -> instance id, for the running instances."""
    return {t["Value"]: i["InstanceId"] for i in moto.instances("running") for t in i["Tags"] if t["Key"] == "karpy.dev/node-claim"}


def test_an_instance_type_out_of_capacity_is_skipped_for_the_next_cheapest_and_remembered(
        moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube)
    proxy.on("CreateFleet", out_of_capacity("m5.large"))
    instance = cloud.create(request(cloud, "default-ice", "m5.large", "m5.xlarge"))
    assert instance.labels[wk.INSTANCE_TYPE] == "m5.xlarge"
    assert any("EC2 has no on-demand m5.large capacity in us-east-1" in w and "InsufficientInstanceCapacity" in w
               for w in instance.warnings), instance.warnings
    # the next launch does not ask for m5.large again: it is remembered as unavailable
    cloud.create(request(cloud, "default-ice2", "m5.large", "m5.xlarge"))
    last = proxy.sent("CreateFleet")[-1]
    assert {o["InstanceType"] for o in last.overrides()} == {"m5.xlarge"}
    assert sorted(claims(moto)) == ["default-ice", "default-ice2"] and len(moto.instances()) == 2


def test_no_capacity_anywhere_is_a_plain_error_and_launches_nothing(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube)
    proxy.on("CreateFleet", out_of_capacity("m5.large"))
    with pytest.raises(InsufficientCapacity, match="EC2 has no on-demand m5.large capacity"):
        cloud.create(request(cloud, "default-none", "m5.large"))
    assert moto.instances() == []
    assert RawClient(kube.api_client).get(path_of("v1", "nodes"))["items"] == []


def test_throttling_is_retried_with_backoff(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube)
    proxy.on("CreateFleet", throttled, times=2)
    proxy.on("DescribeInstances", throttled, times=1)   # botocore retries the other calls itself
    instance = cloud.create(request(cloud, "default-slow", "m5.large"))
    assert proxy.seen["CreateFleet"] == 3
    assert claims(moto) == {"default-slow": instance.provider_id.rsplit("/", 1)[1]} and len(moto.instances()) == 1


def test_throttling_that_never_ends_is_a_plain_error(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube)
    proxy.on("CreateFleet", throttled)
    with pytest.raises(CloudError, match=r"EC2 is throttling karpy's requests.*RequestLimitExceeded"):
        cloud.create(request(cloud, "default-never", "m5.large"))
    assert proxy.seen["CreateFleet"] == 5 and moto.instances() == []


def test_a_launch_whose_answer_was_lost_is_found_not_made_again(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube, fleet_timeout_seconds=1.0)
    proxy.on("CreateFleet", answer_lost(3.0), times=1)
    instance = cloud.create(request(cloud, "default-lost", "m5.large"))
    assert proxy.seen["CreateFleet"] == 1                              # not sent again: the instance was found
    assert any(v == "tag:karpy.dev/launch-token" for r in proxy.sent("DescribeInstances") for v in r.params.values())
    (launched,) = moto.instances()
    assert instance.provider_id.endswith(launched["InstanceId"]) and claims(moto) == {"default-lost": launched["InstanceId"]}


def test_concurrent_identical_launches_share_one_create_fleet(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    # each launch resolves its template against moto before it joins the batch: on a loaded machine those
    # steps can sit further apart than a short idle window, so the window here is generous
    cloud = provider(kube, launch_batch_idle_seconds=1.5)
    cloud.instance_types()                                             # the catalog read is not part of the launch
    names = [f"default-batch{i}" for i in range(5)]
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        instances = list(pool.map(lambda n: cloud.create(request(cloud, n, "m5.large")), names))
    (fleet,) = proxy.sent("CreateFleet")
    assert fleet.params["TargetCapacitySpecification.TotalTargetCapacity"] == "5"
    assert len({i.provider_id for i in instances}) == 5
    assert claims(moto) == {n: i.provider_id.rsplit("/", 1)[1] for n, i in zip(names, instances)}
    assert len({i.node_name for i in instances}) == 5


def test_launches_that_differ_are_not_batched(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube, launch_batch_idle_seconds=0.2)
    cloud.instance_types()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda a: cloud.create(request(cloud, a[0], a[1])), [("default-m5", "m5.large"), ("default-c5", "c5.large")]))
    assert sorted(r.params["TargetCapacitySpecification.TotalTargetCapacity"] for r in proxy.sent("CreateFleet")) == ["1", "1"]
    assert sorted(i["InstanceType"] for i in moto.instances()) == ["c5.large", "m5.large"]


def test_an_aws_refusal_anywhere_in_a_launch_is_a_plain_error(moto: Moto, proxy: FaultProxy, kube: Kube) -> None:
    cloud = provider(kube)
    proxy.on("DescribeSubnets", lambda *_: ec2_error("UnauthorizedOperation", "You are not authorized to perform this operation."))
    with pytest.raises(CloudError, match=r"launching node default-denied: karpy's AWS credentials are not allowed.*"
                                         r"UnauthorizedOperation"):
        cloud.create(request(cloud, "default-denied", "m5.large"))
    assert moto.instances() == []
