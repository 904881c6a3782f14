"""The AWS provider with boto3 against a moto server on loopback. It returns what it launched and writes no
Kubernetes object: the Node it describes is the launch module's to write."""

from __future__ import annotations

import base64
import pytest

from karpy.apis import labels as wk
from karpy.apis.v1alpha1 import AWS, AWSNodeTemplateSpec
from karpy.controller.cloudprovider.aws.provider import AwsConfigError
from karpy.controller.cloudprovider.types import InstanceNotFound
from karpy.controller.cloudprovider.aws.provider import NODE_CLAIM_TAG
from karpy.controller.launch.claims import claim_manifest, launched_status, node_manifest
from karpy.kubeclient.raw import RawClient, path_of
from tests.aws.conftest import CLUSTER, DISCOVERY, REGION, Moto, provider, request
from tests.simulator.conftest import Kube

def test_launches_with_create_fleet_and_returns_what_the_node_needs(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)
    asked = request(cloud, "default-abcde", "m5.large", "m5.xlarge")
    instance = cloud.create(asked)
    (launched,) = moto.instances("running")
    assert launched["InstanceType"] == "m5.large"                          # the cheapest option
    assert launched["SubnetId"] in moto.subnets.values()
    tags = {t["Key"]: t["Value"] for t in launched["Tags"]}
    assert tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned" and tags[wk.PROVISIONER_NAME] == "default"
    assert tags["team"] == "payments" and tags["Name"] == f"karpy/{CLUSTER}/default"
    zone = launched["Placement"]["AvailabilityZone"]
    assert instance.provider_id == f"aws:///{zone}/{launched['InstanceId']}"
    assert instance.node_name == launched["PrivateDnsName"]

    assert RawClient(kube.api_client).get(path_of("v1", "nodes"))["items"] == []          # the provider writes no Node
    assert instance.claim_name == "default-abcde" and tags[NODE_CLAIM_TAG] == "default-abcde"
    m5 = next(t for t in asked.instance_type_options if t.name == "m5.large")
    assert instance.capacity == m5.capacity and instance.allocatable == m5.allocatable and instance.price_per_hour
    claim = claim_manifest(asked, pods=[("default", "web", None)], bind=True, owner=None)
    node = node_manifest({**claim, "status": launched_status(instance)}, instance, m5)
    assert node["metadata"]["name"] == instance.node_name and node["spec"]["providerID"] == instance.provider_id
    assert node["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    labels = node["metadata"]["labels"]
    assert labels[wk.INSTANCE_TYPE] == "m5.large" and labels[wk.ZONE] == zone and labels["team"] == "payments"
    assert labels[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_ON_DEMAND and labels[wk.REGION] == REGION
    assert {"key": "dedicated", "value": "db", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["annotations"][wk.LAUNCHED_FOR] == "default/web"

    (template,) = moto.ec2.describe_launch_templates()["LaunchTemplates"]
    data = moto.ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["ImageId"] == moto.image and data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["IamInstanceProfile"]["Name"] == "KarpenterNodeInstanceProfile"
    assert data["SecurityGroupIds"] == [moto.security_group]
    user_data = base64.b64decode(data["UserData"]).decode()
    assert f"/etc/eks/bootstrap.sh '{CLUSTER}'" in user_data and "--apiserver-endpoint 'https://cluster.example'" in user_data
    assert "team=payments" in user_data and "--register-with-taints=dedicated=db:NoSchedule" in user_data


def test_a_retry_finds_the_instance_instead_of_launching_twice_and_templates_are_reused(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)
    first = cloud.create(request(cloud, "default-retry", "m5.large"))
    again = provider(kube).create(request(cloud, "default-retry", "m5.large"))    # a restarted controller
    assert again == first and len(moto.instances("running")) == 1
    cloud.create(request(cloud, "default-other", "m5.large"))
    assert len(moto.instances("running")) == 2
    assert len(moto.ec2.describe_launch_templates()["LaunchTemplates"]) == 1


def test_delete_terminates_once_get_and_list_see_only_live_instances(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)
    a = cloud.create(request(cloud, "default-a", "m5.large"))
    b = cloud.create(request(cloud, "default-b", "c5.large"))
    assert {i.provider_id for i in cloud.list()} == {a.provider_id, b.provider_id}
    cloud.delete(a.provider_id)
    with pytest.raises(InstanceNotFound):
        cloud.delete(a.provider_id)
    with pytest.raises(InstanceNotFound):
        cloud.get(a.provider_id)
    assert cloud.get(b.provider_id).labels[wk.INSTANCE_TYPE] == "c5.large"
    assert [i.provider_id for i in cloud.list()] == [b.provider_id]
    with pytest.raises(InstanceNotFound):
        cloud.get("fake://not-aws")


def test_instance_types_come_from_ec2_with_eni_max_pods_and_zones(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)
    m5 = next(t for t in cloud.instance_types() if t.name == "m5.large")
    assert m5.capacity["pods"] == 29_000                                    # 3 ENIs x (10 - 1) + 2
    assert m5.capacity["cpu"] == 2000
    assert {o.zone for o in m5.offerings} >= {"us-east-1a", "us-east-1b"}
    assert {o.capacity_type for o in m5.offerings} == {wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT}
    assert m5.requirements.get(wk.REGION).has(REGION)


def test_spot_when_the_pods_allow_it(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)
    instance = cloud.create(request(cloud, "default-spot", "m5.large", capacity_type=wk.CAPACITY_TYPE_SPOT))
    assert instance.labels[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_SPOT


def test_a_template_that_discovers_nothing_is_a_clear_error(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube, AWS.model_validate({"subnetSelector": {"nope": "x"}, "securityGroupSelector": DISCOVERY}))
    with pytest.raises(AwsConfigError, match="no subnet matches subnetSelector"):
        cloud.create(request(cloud, "default-x", "m5.large"))
    assert moto.instances() == []


def test_ami_selector_picks_the_image_by_tag_or_id_for_the_architecture(moto: Moto, kube: Kube) -> None:
    images = [i for i in moto.ec2.describe_images(Owners=["amazon"])["Images"] if i.get("Architecture") == "x86_64"]
    tagged, other = images[1]["ImageId"], images[2]["ImageId"]
    moto.ec2.create_tags(Resources=[tagged], Tags=[{"Key": "karpy-test", "Value": "golden"}])
    for selector, expected in (({"karpy-test": "golden"}, tagged), ({"aws-ids": other}, other)):
        template = AWSNodeTemplateSpec.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                                       "amiFamily": "Custom", "amiSelector": selector,
                                                       "userData": "#!/bin/bash\necho joined by the image\n"})
        cloud = provider(kube, template)
        instance = cloud.create(request(cloud, f"default-{expected}", "m5.large"))
        (launched,) = [i for i in moto.instances() if instance.provider_id.endswith(i["InstanceId"])]
        assert launched["ImageId"] == expected
    for made in moto.ec2.describe_launch_templates()["LaunchTemplates"]:
        data = moto.ec2.describe_launch_template_versions(LaunchTemplateId=made["LaunchTemplateId"])[
            "LaunchTemplateVersions"][0]["LaunchTemplateData"]
        assert base64.b64decode(data["UserData"]).decode() == "#!/bin/bash\necho joined by the image\n"   # Custom: as is
    nothing = AWSNodeTemplateSpec.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                                  "amiFamily": "Custom", "amiSelector": {"karpy-test": "absent"}})
    cloud = provider(kube, nothing)
    with pytest.raises(AwsConfigError, match="no x86_64 image matches amiSelector"):
        cloud.create(request(cloud, "default-noami", "m5.large"))
