"""A moto server on loopback (EC2, SSM over real HTTP), with a VPC, subnets and security groups tagged for
discovery and the EKS AMI parameters seeded through moto's backend (its API refuses `/aws/service/...`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ssm.models import Parameter, ssm_backends

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.v1alpha1 import AWS, AWSSettings
from karpy.controller.cloudprovider.aws.provider import AwsCloudProvider, AwsSettings
from karpy.controller.cloudprovider.types import NodeRequest
from tests.aws.faults import FaultProxy
from tests.aws.motoserver import MotoServer
from tests.simulator.conftest import Kube, start

REGION = "us-east-1"
CLUSTER = "test-cluster"
DISCOVERY = {"karpenter.sh/discovery": CLUSTER}


@dataclasses.dataclass
class Moto:
    url: str
    ec2: Any
    subnets: dict[str, str]          # zone -> subnet id
    security_group: str
    image: str
    arm_image: str = ""              # the EKS AL2 arm64 AMI
    gpu_image: str = ""              # the EKS AL2 GPU AMI (NVIDIA and Neuron)

    def instances(self, *states: str) -> list[dict[str, Any]]:
        found = [i for r in self.ec2.describe_instances()["Reservations"] for i in r["Instances"]]
        return [i for i in found if not states or i["State"]["Name"] in states]


def seed_parameter(name: str, value: str) -> None:
    backend = ssm_backends[DEFAULT_ACCOUNT_ID][REGION]
    backend._parameters[name].append(Parameter(  # type: ignore[abstract]  # moto marks its CloudFormation hooks abstract yet builds Parameter itself
        account_id=DEFAULT_ACCOUNT_ID, name=name, value=value, parameter_type="String", description=None,
        allowed_pattern=None, keyid=None, last_modified_date=dt.datetime.now(), version=1, data_type="text"))


_amazon_images: list[tuple[str, str, str]] = []


def amazon_images(ec2: Any) -> tuple[str, str, str]:
    """Two x86_64 images (standard and GPU) and an arm64 one of moto's amazon-owned set, which every reset restores
    with the same ids: listed once per run, as listing 1,300 images takes seconds."""
    if not _amazon_images:
        images = ec2.describe_images(Owners=["amazon"])["Images"]
        x86, gpu = [i["ImageId"] for i in images if i.get("Architecture") == "x86_64"][:2]
        _amazon_images.append((x86, gpu, next(i["ImageId"] for i in images if i.get("Architecture") == "arm64")))
    return _amazon_images[0]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def moto(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Moto]:
    moto_server.reset()
    url = moto_server.url
    refusing = socket.socket()                          # bound, never listening: connections are refused at once
    refusing.bind(("127.0.0.1", 0))
    # moto has no Pricing API: it is refused, and the provider uses the shipped table, as when AWS's does not answer
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION,
                       "AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_PRICING": f"http://127.0.0.1:{refusing.getsockname()[1]}"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    tags = [{"Key": k, "Value": v} for k, v in DISCOVERY.items()]
    subnets = {}
    for i, zone in enumerate(("us-east-1a", "us-east-1b")):
        subnets[zone] = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone, TagSpecifications=[
            {"ResourceType": "subnet", "Tags": tags}])["Subnet"]["SubnetId"]
    ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.9.0/24", AvailabilityZone="us-east-1c")     # not tagged: not used
    group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc, TagSpecifications=[
        {"ResourceType": "security-group", "Tags": tags}])["GroupId"]
    image, gpu_image, arm_image = amazon_images(ec2)
    for minor in ("1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"):
        for suffix, ami in (("", image), ("-arm64", arm_image), ("-gpu", gpu_image)):
            seed_parameter(f"/aws/service/eks/optimized-ami/{minor}/amazon-linux-2{suffix}/recommended/image_id", ami)
    try:
        yield Moto(url, ec2, subnets, group, image, arm_image, gpu_image)
    finally:
        refusing.close()


@pytest.fixture
def proxy(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy in front of moto; AWS clients made in the test reach moto through it."""
    with FaultProxy(moto.url) as p:
        monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
        yield p


SETTINGS = AwsSettings(region=REGION, cluster_name=CLUSTER, cluster_endpoint="https://cluster.example",
                       kubernetes_minor="1.31")
TEMPLATE = AWS.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                               "instanceProfile": "KarpenterNodeInstanceProfile", "tags": {"team": "payments"}})


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Kube]:
    """A local cluster (API only) for the Nodes the provider creates."""
    cluster, k = start(tmp_path, system_nodes=0, controllers=False)
    yield k
    cluster.stop()


def provider(kube: Kube, template: AWSSettings = TEMPLATE, **settings: Any) -> AwsCloudProvider:
    """The provider as the controller builds it, reaching AWS wherever AWS_ENDPOINT_URL says (moto, or the proxy)."""
    return AwsCloudProvider(boto3.session.Session(), dataclasses.replace(SETTINGS, **settings), lambda _: template)


def request(cloud: AwsCloudProvider, name: str, *types: str, capacity_type: str = wk.CAPACITY_TYPE_ON_DEMAND) -> NodeRequest:
    options = tuple(sorted((t for t in cloud.instance_types() if t.name in types),
                           key=lambda t: min(o.price_per_hour for o in t.offerings)))
    requirements = Requirements([Requirement.exactly(wk.CAPACITY_TYPE, capacity_type)])
    return NodeRequest(node_name=name, provisioner="default", requirements=requirements, instance_type_options=options,
                       labels={"team": "payments"}, taints=({"key": "dedicated", "value": "db", "effect": "NoSchedule"},),
                       annotations={"example.com/owner": "payments"})
