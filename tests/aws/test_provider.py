"""The AWS provider with boto3 against a moto server on loopback. It returns what it launched and writes no
Kubernetes object: the Node it describes is the launch module's to write."""

from __future__ import annotations

import base64

import pytest

from karpy.apis import labels as wk
from karpy.apis.launch_record import PodReference, pods_of
from karpy.apis.v1alpha1 import AWS, AWSNodeTemplateSpec
from karpy.controller.cloudprovider.aws.provider import NODE_CLAIM_TAG, AwsConfigError
from karpy.controller.cloudprovider.types import InstanceNotFound
from karpy.controller.launch.claims import claim_manifest, launched_status, node_manifest
from karpy.kubeclient.raw import RawClient, path_of
from tests.aws.conftest import CLUSTER, DISCOVERY, REGION, TEMPLATE, Moto, provider, request
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts a moto server on loopback


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
    claim = claim_manifest(asked, pods=[PodReference("default", "web")], bind=True, owner=None)
    status = launched_status(claim, instance, m5, now="2026-01-01T00:00:00Z")
    assert status["imageID"] == launched["ImageId"]          # the AMI it booted: AMI drift compares it
    node = node_manifest({**claim, "status": status}, instance, m5)
    assert node["metadata"]["name"] == instance.node_name and node["spec"]["providerID"] == instance.provider_id
    assert node["metadata"]["finalizers"] == [wk.TERMINATION_FINALIZER]
    labels = node["metadata"]["labels"]
    assert labels[wk.INSTANCE_TYPE] == "m5.large" and labels[wk.ZONE] == zone and labels["team"] == "payments"
    assert labels[wk.CAPACITY_TYPE] == wk.CAPACITY_TYPE_ON_DEMAND and labels[wk.REGION] == REGION
    assert {"key": "dedicated", "value": "db", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["annotations"]["example.com/owner"] == "payments"
    assert pods_of(claim) == [PodReference("default", "web")] and wk.LAUNCHED_FOR not in node["metadata"]["annotations"]

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


def _template_images(moto: Moto, names: list[str]) -> list[str]:
    out = []
    for name in names:
        (version,) = moto.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
        out.append(version["LaunchTemplateData"]["ImageId"])
    return out


def test_an_arm64_instance_type_launches_with_the_arm64_eks_ami(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)
    instance = cloud.create(request(cloud, "default-graviton", "a1.2xlarge"))
    (launched,) = [i for i in moto.instances() if instance.provider_id.endswith(i["InstanceId"])]
    assert launched["InstanceType"] == "a1.2xlarge"
    assert launched["ImageId"] == moto.arm_image != moto.image


def test_instance_types_are_grouped_by_ami_into_one_launch_template_each(moto: Moto, kube: Kube) -> None:
    from karpy.controller.cloudprovider.aws.launch import fleet_request
    cloud = provider(kube)
    types = ("m5.large", "a1.2xlarge", "g4dn.xlarge", "inf1.xlarge", "m5.xlarge")
    names = cloud._launch_templates(request(cloud, "default-mixed", *types), TEMPLATE,
                                    [moto.security_group], list(types))
    assert set(names) == set(types)
    by_image = dict(zip(names, _template_images(moto, list(names.values()))))
    assert by_image == {"m5.large": moto.image, "m5.xlarge": moto.image, "a1.2xlarge": moto.arm_image,
                        "g4dn.xlarge": moto.gpu_image, "inf1.xlarge": moto.gpu_image}
    assert names["m5.large"] == names["m5.xlarge"] and names["g4dn.xlarge"] == names["inf1.xlarge"]
    assert len(set(names.values())) == 3 == len(moto.ec2.describe_launch_templates()["LaunchTemplates"])
    overrides = [(t, "subnet-1", "us-east-1a", float(i)) for i, t in enumerate(types)]
    fleet = fleet_request(templates=names, overrides=overrides, capacity_type=wk.CAPACITY_TYPE_ON_DEMAND, tags={})
    configs = fleet["LaunchTemplateConfigs"]
    assert [c["LaunchTemplateSpecification"]["LaunchTemplateName"] for c in configs] == list(dict.fromkeys(
        names[t] for t in types))                                                  # the cheapest override's template first
    assert [[o["InstanceType"] for o in c["Overrides"]] for c in configs] == [
        ["m5.large", "m5.xlarge"], ["a1.2xlarge"], ["g4dn.xlarge", "inf1.xlarge"]]


def test_bottlerocket_and_ubuntu_choose_their_variant_per_instance_type() -> None:
    from karpy.controller.cloudprovider.aws.launch import ami_parameter
    assert ami_parameter("Bottlerocket", "1.31", "arm64") == "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id"
    assert ami_parameter("Bottlerocket", "1.31", "amd64", nvidia_gpu=True) == \
        "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/latest/image_id"
    assert ami_parameter("Bottlerocket", "1.31", "amd64", neuron=True) == \
        "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"          # v0.16: no Neuron variant
    assert ami_parameter("AL2", "1.31", "amd64", neuron=True).endswith("/amazon-linux-2-gpu/recommended/image_id")
    assert "/arm64/hvm/" in ami_parameter("Ubuntu", "1.31", "arm64")


def test_ami_selector_gives_each_architecture_its_own_image(moto: Moto, kube: Kube) -> None:
    images = moto.ec2.describe_images(Owners=["amazon"])["Images"]
    x86 = next(i["ImageId"] for i in images if i.get("Architecture") == "x86_64")
    arm = next(i["ImageId"] for i in images if i.get("Architecture") == "arm64")
    template = AWSNodeTemplateSpec.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                                   "amiSelector": {"aws-ids": f"{x86},{arm}"}})
    cloud = provider(kube, template)
    names = cloud._launch_templates(request(cloud, "default-sel", "m5.large", "a1.2xlarge"), template,
                                    [moto.security_group], ["m5.large", "a1.2xlarge"])
    assert dict(zip(names, _template_images(moto, list(names.values())))) == {"m5.large": x86, "a1.2xlarge": arm}


def test_images_tagged_with_well_known_labels_get_a_launch_template_each(moto: Moto, kube: Kube) -> None:
    """v0.16.3 launchtemplate_test, "Custom AMI Selector": multiple AMIs discovered make multiple launch templates,
    each instance type on the image whose requirements (architecture, well-known-label tags) it meets."""
    x86 = [i["ImageId"] for i in moto.ec2.describe_images(Owners=["amazon"])["Images"] if i.get("Architecture") == "x86_64"]
    large, xlarge = x86[3], x86[4]
    for image, instance_type in ((large, "m5.large"), (xlarge, "m5.xlarge")):
        moto.ec2.create_tags(Resources=[image], Tags=[{"Key": "karpy-test", "Value": "multi"},
                                                      {"Key": wk.INSTANCE_TYPE, "Value": instance_type}])
    template = AWSNodeTemplateSpec.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                                   "amiSelector": {"karpy-test": "multi"}})
    cloud = provider(kube, template)
    instance = cloud.create(request(cloud, "default-multi", "m5.large", "m5.xlarge"))
    (launched,) = [i for i in moto.instances() if instance.provider_id.endswith(i["InstanceId"])]
    assert (launched["InstanceType"], launched["ImageId"]) == ("m5.large", large)
    images = {_template_images(moto, [t["LaunchTemplateName"]])[0]
              for t in moto.ec2.describe_launch_templates()["LaunchTemplates"]}
    assert images == {large, xlarge}

    nothing_fits = AWSNodeTemplateSpec.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                                       "amiSelector": {"aws-ids": large}})
    cloud = provider(kube, nothing_fits)
    with pytest.raises(AwsConfigError, match="no x86_64 image matches amiSelector"):
        cloud.create(request(cloud, "default-nofit", "m5.xlarge"))
    assert len(moto.instances()) == 1
