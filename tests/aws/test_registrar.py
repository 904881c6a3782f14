"""The local cluster's EC2 registrar: an instance joins as a Node whose allocatable is what karpy planned with."""

from __future__ import annotations

import pytest

from karpy.apis.resources import Resources
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, path_of
from karpy.simulator.aws import Registrar
from tests.aws.conftest import CLUSTER, REGION, Moto, provider
from tests.expectations import eventually
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts a moto server on loopback


def test_a_joined_node_reports_the_allocatable_the_catalog_planned(moto: Moto, kube: Kube) -> None:
    client = RawClient(kube.api_client)
    nodes = Informer(client, "v1", "nodes").start()
    try:
        registrar = Registrar(client, nodes, endpoint_url=moto.url, cluster_name=CLUSTER, region=REGION, boot_delay=0)
        planned = {t.name: t for t in provider(kube).instance_types()}
        for instance_type in ("m5.large", "c5.2xlarge"):
            (instance,) = moto.ec2.run_instances(ImageId=moto.image, InstanceType=instance_type, MinCount=1, MaxCount=1,
                                                 SubnetId=moto.subnets["us-east-1a"], TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]}])["Instances"]
            registrar.reconcile()
            node = eventually(lambda: client.get(path_of("v1", "nodes", name=instance["PrivateDnsName"])))  # noqa: B023 — run before the loop moves on
            status = node["status"]
            expected = planned[instance_type]
            assert Resources.parse(status["capacity"]) == expected.capacity
            assert Resources.parse(status["allocatable"]) == expected.allocatable
            assert Resources.parse(status["allocatable"])["cpu"] < Resources.parse(status["capacity"])["cpu"]
    finally:
        nodes.stop()
