"""EC2NodeClass on AWS against one moto server: AMI aliases and selector terms, subnets and security groups,
the role's instance profile, and launch template data that launches an instance with all of it."""

from __future__ import annotations

import base64
import dataclasses
import email
import socket
import tomllib
from email.message import Message
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.v1.ec2nodeclass import GROUP_VERSION, PLURAL, EC2NodeClass
from karpy.controller.clock import FakeClock
from karpy.controller.cloudprovider.aws.catalog import aws_catalog
from karpy.controller.cloudprovider.aws.launch import (
    ClusterFacts,
    LaunchSpec,
    fleet_request,
    nodeclass_launch_templates,
    nodeclass_subnet,
)
from karpy.controller.cloudprovider.aws.nodeclass import NodeClassNotReady, NodeClassResolver, instance_profile_name
from karpy.controller.cloudprovider.aws.provider import AwsCloudProvider, AwsSettings, parse_provider_id
from karpy.controller.cloudprovider.types import NodeRequest
from karpy.controller.launch.claims import claim_manifest, launched_status
from karpy.controller.nodeclass.controller import FINALIZER, NodeClassController
from karpy.kubeclient.raw import RawClient, path_of
from tests.aws.conftest import CLUSTER, DISCOVERY, REGION, TEMPLATE, amazon_images, seed_parameter
from tests.aws.motoserver import MotoServer
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts a moto server on loopback (and, once, the local cluster)

ROOT = Path(__file__).resolve().parents[2]
MINOR = "1.31"
FACTS = ClusterFacts(name=CLUSTER, endpoint="https://cluster.example", ca_bundle=base64.b64encode(b"CA").decode(),
                     cidr="10.100.0.0/16")


@dataclasses.dataclass
class World:
    ec2: Any
    iam: Any
    resolver: NodeClassResolver
    subnets: dict[str, str]
    security_group: str
    x86: str
    arm: str
    gpu: str


@pytest.fixture(scope="module")
def world(moto_server: MotoServer) -> Iterator[World]:
    refusing = socket.socket()            # bound, never listening: the Pricing API is refused (moto has none)
    refusing.bind(("127.0.0.1", 0))
    env = pytest.MonkeyPatch()
    try:
        url = moto_server.url
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION,
                           "AWS_ENDPOINT_URL": url,
                           "AWS_ENDPOINT_URL_PRICING": f"http://127.0.0.1:{refusing.getsockname()[1]}"}.items():
            env.setenv(key, value)              # the provider's clients reach moto, as deployed ones reach AWS
        env.delenv("AWS_PROFILE", raising=False)
        moto_server.reset()
        kw = dict(region_name=REGION, endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing")
        ec2, ssm, iam = (boto3.client(name, **kw) for name in ("ec2", "ssm", "iam"))
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        tags = [{"Key": k, "Value": v} for k, v in DISCOVERY.items()]
        subnets = {zone: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone, TagSpecifications=[
            {"ResourceType": "subnet", "Tags": tags}])["Subnet"]["SubnetId"] for i, zone in enumerate(("us-east-1a", "us-east-1b"))}
        ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.9.0/24", AvailabilityZone="us-east-1c")   # untagged
        group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc, TagSpecifications=[
            {"ResourceType": "security-group", "Tags": tags}])["GroupId"]
        ec2.create_security_group(GroupName="other", Description="other", VpcId=vpc)
        x86, gpu, arm = amazon_images(ec2)
        base = f"/aws/service/eks/optimized-ami/{MINOR}/amazon-linux-2023"
        for arch, variant, image in (("x86_64", "standard", x86), ("arm64", "standard", arm), ("x86_64", "nvidia", gpu)):
            seed_parameter(f"{base}/{arch}/{variant}/recommended/image_id", image)
        seed_parameter(f"{base}/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-{MINOR}-v20240807/image_id", gpu)
        seed_parameter(f"/aws/service/bottlerocket/aws-k8s-{MINOR}/x86_64/1.20.0/image_id", x86)
        seed_parameter(f"/aws/service/bottlerocket/aws-k8s-{MINOR}/arm64/1.20.0/image_id", arm)
        iam.create_role(RoleName="KarpenterNodeRole", AssumeRolePolicyDocument="{}")
        iam.create_role(RoleName="OtherRole", AssumeRolePolicyDocument="{}")
        resolver = NodeClassResolver(ec2, ssm, iam, cluster=CLUSTER, region=REGION, kubernetes_minor=MINOR)
        yield World(ec2, iam, resolver, subnets, group, x86, arm, gpu)
    finally:
        env.undo()
        refusing.close()


def node_class(name: str = "default", **spec: Any) -> EC2NodeClass:
    base = {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": DISCOVERY}], "securityGroupSelectorTerms": [{"tags": DISCOVERY}]}
    return EC2NodeClass.model_validate({"metadata": {"name": name}, "spec": {**base, **spec}})


def arch_of(ami: dict[str, Any]) -> str:
    return next(r["values"][0] for r in ami["requirements"] if r["key"] == wk.ARCH)


# --- AMIs -------------------------------------------------------------------------------------
def test_al2023_latest_alias_gives_one_image_per_architecture_and_variant(world: World) -> None:
    amis = world.resolver.amis(node_class())
    found = {(arch_of(a), next(r["operator"] for r in a["requirements"] if r["key"] == wk.AWS_INSTANCE_GPU_COUNT)): a["id"]
             for a in amis}
    assert found == {("amd64", "DoesNotExist"): world.x86, ("arm64", "DoesNotExist"): world.arm,
                     ("amd64", "Exists"): world.gpu}


def test_pinned_alias_reads_the_versioned_parameter(world: World) -> None:
    amis = world.resolver.amis(node_class(amiSelectorTerms=[{"alias": "al2023@v20240807"}]))
    assert [a["id"] for a in amis] == [world.gpu]


def test_bottlerocket_alias_takes_the_version_with_or_without_v(world: World) -> None:
    for version in ("1.20.0", "v1.20.0"):
        amis = world.resolver.amis(node_class(amiSelectorTerms=[{"alias": f"bottlerocket@{version}"}]))
        assert {arch_of(a): a["id"] for a in amis} == {"amd64": world.x86, "arm64": world.arm}


def test_alias_without_parameters_is_not_ready_and_says_which(world: World) -> None:
    with pytest.raises(NodeClassNotReady, match=r"al2@v20200101.*1\.31"):
        world.resolver.amis(node_class(amiSelectorTerms=[{"alias": "al2@v20200101"}]))


def test_id_name_tags_and_owner_terms_select_images(world: World) -> None:
    image = world.ec2.describe_images(ImageIds=[world.x86])["Images"][0]
    world.ec2.create_tags(Resources=[world.arm], Tags=[{"Key": "team", "Value": "nodes"}])
    assert [a["id"] for a in world.resolver.amis(node_class(amiSelectorTerms=[{"id": world.x86}]))] == [world.x86]
    by_name = world.resolver.amis(node_class(amiSelectorTerms=[{"name": image["Name"], "owner": image["OwnerId"]}]))
    assert [a["id"] for a in by_name] == [world.x86]
    for tags in ({"team": "nodes"}, {"team": "*"}):
        assert [a["id"] for a in world.resolver.amis(node_class(amiSelectorTerms=[{"tags": tags}]))] == [world.arm]
    with pytest.raises(NodeClassNotReady, match="no image matches amiSelectorTerms"):
        world.resolver.amis(node_class(amiSelectorTerms=[{"tags": {"team": "nobody"}}]))


# --- subnets, security groups, instance profile ---------------------------------------------------
def test_subnets_and_security_groups_by_tags_wildcard_id_and_name(world: World) -> None:
    subnets = world.resolver.subnets(node_class(subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "*"}}]))
    assert {s["zone"]: s["id"] for s in subnets} == world.subnets and all(s["zoneID"] for s in subnets)
    one = world.resolver.subnets(node_class(subnetSelectorTerms=[{"id": world.subnets["us-east-1b"]}]))
    assert [s["zone"] for s in one] == ["us-east-1b"]
    for term in ({"tags": DISCOVERY}, {"name": "nodes"}, {"id": world.security_group}):
        groups = world.resolver.security_groups(node_class(securityGroupSelectorTerms=[term]))
        assert groups == [{"id": world.security_group, "name": "nodes"}]
    with pytest.raises(NodeClassNotReady, match="securityGroupSelectorTerms"):
        world.resolver.security_groups(node_class(securityGroupSelectorTerms=[{"tags": {"nobody": "*"}}]))


def test_role_gets_a_tagged_instance_profile_that_goes_with_the_node_class(world: World) -> None:
    nc = node_class("profiled", tags={"team": "payments"})
    name = world.resolver.instance_profile(nc, uid="uid-1")
    assert name == instance_profile_name(CLUSTER, REGION, "profiled") == world.resolver.instance_profile(nc, uid="uid-1")
    profile = world.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["KarpenterNodeRole"]
    assert profile["Path"] == f"/karpenter/{REGION}/{CLUSTER}/uid-1/"
    tags = {t["Key"]: t["Value"] for t in profile["Tags"]}
    assert tags == {"team": "payments", f"kubernetes.io/cluster/{CLUSTER}": "owned", "eks:eks-cluster-name": CLUSTER,
                    "karpenter.k8s.aws/ec2nodeclass": "profiled", "topology.kubernetes.io/region": REGION}
    world.resolver.instance_profile(node_class("profiled", role="OtherRole"))       # a changed role replaces the old
    profile = world.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["OtherRole"]
    world.resolver.delete_instance_profile(nc)
    assert name not in {p["InstanceProfileName"] for p in world.iam.list_instance_profiles()["InstanceProfiles"]}
    world.resolver.delete_instance_profile(nc)                                        # gone already: done
    assert world.resolver.instance_profile(node_class(role=None, instanceProfile="Theirs")) == "Theirs"


# --- launch ---------------------------------------------------------------------------------------
def resolved(world: World, **spec: Any) -> EC2NodeClass:
    """A node class (the default's spec with `spec` over it) with its status resolved against moto."""
    nc = node_class(**spec)
    status = {"subnets": world.resolver.subnets(nc), "securityGroups": world.resolver.security_groups(nc),
              "amis": world.resolver.amis(nc), "instanceProfile": world.resolver.instance_profile(nc)}
    return EC2NodeClass.model_validate({**nc.model_dump(by_alias=True, exclude_none=True), "status": status})


def launch_spec(*types: str) -> LaunchSpec:
    catalog = {t.name: t for t in aws_catalog().instance_types(None)}
    return LaunchSpec(node_pool="default", instance_types=[catalog[t] for t in types], labels={"team": "payments"},
                      taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])


def parts(document: str) -> list[Message]:
    message = email.message_from_string(document)
    assert message.is_multipart()
    return [p for p in message.get_payload() if isinstance(p, Message)]


def test_launch_templates_launch_an_instance_with_the_node_class(world: World) -> None:
    custom = "#!/bin/bash\necho custom\n"
    nc = resolved(world, **{"userData": custom,
                            "tags": {"team": "payments"}, "kubelet": {"maxPods": 42, "clusterDNS": ["10.100.0.10"]}})
    templates = nodeclass_launch_templates(nc, FACTS, launch_spec("m5.large", "m6g.large"))
    by_types = {tuple(members): (name, data) for name, (data, members) in templates.items()}
    assert set(by_types) == {("m5.large",), ("m6g.large",)}
    name, data = by_types[("m5.large",)]
    assert data["ImageId"] == world.x86 and by_types[("m6g.large",)][1]["ImageId"] == world.arm
    assert data["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1,
                                       "HttpProtocolIpv6": "disabled"}
    world.ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)
    subnet = nodeclass_subnet(nc, "us-east-1b")
    assert subnet == world.subnets["us-east-1b"]
    fleet = world.ec2.create_fleet(**fleet_request(templates={"m5.large": name}, overrides=[
        ("m5.large", subnet, "us-east-1b", 0.096)], capacity_type=wk.CAPACITY_TYPE_ON_DEMAND, tags={"Name": "web"}))
    instance_id = fleet["Instances"][0]["InstanceIds"][0]
    described = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert described["ImageId"] == world.x86 and described["SubnetId"] == subnet
    # moto's CreateFleet applies a template's image, not its groups or profile: read those off the stored template
    stored = world.ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0]
    assert stored["LaunchTemplateData"]["SecurityGroupIds"] == [world.security_group]
    profile = stored["LaunchTemplateData"]["IamInstanceProfile"]["Name"]
    assert profile == instance_profile_name(CLUSTER, REGION, "default")
    assert world.iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"][0]["RoleName"] == \
        "KarpenterNodeRole"
    tags = {t["Key"]: t["Value"] for t in described["Tags"]}
    assert tags["karpenter.sh/nodepool"] == "default" and tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
    assert tags["team"] == "payments" and tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
    user_data = world.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    document = base64.b64decode(user_data["UserData"]["Value"]).decode()
    custom_part, node_config_part = parts(document)
    assert custom_part.get_payload() == custom and node_config_part.get_content_type() == "application/node.eks.aws"
    config = yaml.safe_load(str(node_config_part.get_payload()))
    assert config["kind"] == "NodeConfig" and config["spec"]["cluster"] == {
        "name": CLUSTER, "apiServerEndpoint": FACTS.endpoint, "certificateAuthority": FACTS.ca_bundle, "cidr": FACTS.cidr}
    assert config["spec"]["kubelet"]["config"] == {"maxPods": 42, "clusterDNS": ["10.100.0.10"], "registerWithTaints": [
        {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}
    assert config["spec"]["kubelet"]["flags"] == ['--node-labels="karpenter.sh/nodepool=default,team=payments"']


def test_bottlerocket_user_data_keeps_the_users_toml_with_karpys_keys_winning(world: World) -> None:
    custom = '[settings.kubernetes]\ncluster-name = "theirs"\nmax-pods = 5\n[settings.motd]\nmessage = "hi"\n'
    nc = resolved(world, **{"userData": custom,
                            "amiSelectorTerms": [{"alias": "bottlerocket@1.20.0"}], "kubelet": {"maxPods": 42}})
    (data, _), = nodeclass_launch_templates(nc, FACTS, launch_spec("m5.large")).values()
    settings = tomllib.loads(base64.b64decode(data["UserData"]).decode())["settings"]
    assert settings["motd"] == {"message": "hi"}
    assert settings["kubernetes"]["cluster-name"] == CLUSTER and settings["kubernetes"]["max-pods"] == 42
    assert [b["DeviceName"] for b in data["BlockDeviceMappings"]] == ["/dev/xvda", "/dev/xvdb"]


def test_al2_user_data_and_block_devices_from_the_node_class(world: World) -> None:
    world.ec2.create_tags(Resources=[world.x86], Tags=[{"Key": "role", "Value": "al2"}])
    nc = resolved(world, **{"amiFamily": "AL2",
                            "amiSelectorTerms": [{"tags": {"role": "al2"}}], "kubelet": {"maxPods": 42, "systemReserved": {"cpu": "100m"}},
                            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}],
                            "metadataOptions": {"httpPutResponseHopLimit": 2}})
    (data, _), = nodeclass_launch_templates(nc, FACTS, launch_spec("m5.large")).values()
    script = base64.b64decode(data["UserData"]).decode()
    assert "/etc/eks/bootstrap.sh 'test-cluster'" in script and "--max-pods=42" in script
    assert "--system-reserved=cpu=100m" in script
    assert data["BlockDeviceMappings"] == [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 100, "VolumeType": "gp3"}}]
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2 and data["MetadataOptions"]["HttpTokens"] == "required"


def test_reserved_tags_and_unresolved_status_are_refused_by_name(world: World) -> None:
    nc = resolved(world)
    bad = nc.model_copy(update={"spec": nc.spec.model_copy(update={"tags": {"karpenter.sh/nodepool": "x"}})})
    with pytest.raises(ValueError, match="spec.tags may not set karpenter.sh/nodepool"):
        nodeclass_launch_templates(bad, FACTS, launch_spec("m5.large"))
    with pytest.raises(ValueError, match="no subnet in its status is in zone us-east-1c"):
        nodeclass_subnet(nc, "us-east-1c")
    with pytest.raises(ValueError, match="EC2NodeClass default is not ready"):
        nodeclass_launch_templates(node_class(), FACTS, launch_spec("m5.large"))


# --- the status controller, on the local cluster ---------------------------------------------------
@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Kube]:
    """A local cluster (API only) with the EC2NodeClass CRD."""
    local, k = start(tmp_path, system_nodes=0, controllers=False)
    try:
        k.kubectl("apply", "-f", str(ROOT / "manifests" / "crds" / "karpenter.k8s.aws_ec2nodeclasses.yaml"))
        yield k
    finally:
        k.api_client.close()
        local.stop()


def test_controller_keeps_status_current_and_removes_the_profile_with_the_node_class(world: World, cluster: Kube) -> None:
    client = RawClient(cluster.api_client)
    clock = FakeClock()
    controller = NodeClassController(client, world.resolver, clock)
    path = path_of(GROUP_VERSION, PLURAL)
    client.create(path, {"apiVersion": GROUP_VERSION, "kind": "EC2NodeClass", "metadata": {"name": "ready"},
                         "spec": node_class().spec.model_dump(by_alias=True, exclude_none=True)})
    broken = node_class(securityGroupSelectorTerms=[{"tags": {"nobody": "*"}}]).spec.model_dump(by_alias=True, exclude_none=True)
    client.create(path, {"apiVersion": GROUP_VERSION, "kind": "EC2NodeClass", "metadata": {"name": "broken"}, "spec": broken})

    assert 1.0 <= controller.reconcile() <= 2.0                   # the broken one is retried first, after a pause
    clock.step(2)
    assert 2.0 <= controller.reconcile() <= 4.0                   # that doubles while it keeps failing
    ready = client.get(path_of(GROUP_VERSION, PLURAL, name="ready"))
    status = ready["status"]
    assert {s["zone"] for s in status["subnets"]} == set(world.subnets) and all(s["zoneID"] for s in status["subnets"])
    assert status["securityGroups"] == [{"id": world.security_group, "name": "nodes"}]
    assert {a["id"] for a in status["amis"]} == {world.x86, world.arm, world.gpu}
    assert status["instanceProfile"] == instance_profile_name(CLUSTER, REGION, "ready")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "SubnetsReady": "True", "SecurityGroupsReady": "True", "AMIsReady": "True", "InstanceProfileReady": "True",
        "Ready": "True"}
    assert ready["metadata"]["finalizers"] == [FINALIZER]
    conditions = {c["type"]: c for c in client.get(path_of(GROUP_VERSION, PLURAL, name="broken"))["status"]["conditions"]}
    assert conditions["SecurityGroupsReady"]["status"] == "False" and conditions["Ready"]["status"] == "False"
    assert "no security group matches securityGroupSelectorTerms" in conditions["Ready"]["message"]

    client.delete(path_of(GROUP_VERSION, PLURAL, name="ready"))   # held by the finalizer until the profile is gone
    controller.reconcile()
    with pytest.raises(ApiException) as gone:
        client.get(path_of(GROUP_VERSION, PLURAL, name="ready"))
    assert gone.value.status == 404
    profiles = {p["InstanceProfileName"] for p in world.iam.list_instance_profiles()["InstanceProfiles"]}
    assert instance_profile_name(CLUSTER, REGION, "ready") not in profiles


def test_the_provider_creates_a_node_class_templates_once(world: World) -> None:
    nc = resolved(world)
    settings = AwsSettings(region=REGION, cluster_name=CLUSTER, cluster_endpoint=FACTS.endpoint, kubernetes_minor=MINOR,
                           ca_bundle=FACTS.ca_bundle, cluster_cidr=FACTS.cidr)
    cloud = AwsCloudProvider(boto3.session.Session(), settings, lambda _: TEMPLATE)
    names = cloud.node_class_launch_templates(nc, launch_spec("m5.large", "c5.large", "m6g.large"))
    assert names["m5.large"] == names["c5.large"] != names["m6g.large"]
    stored = world.ec2.describe_launch_templates(LaunchTemplateNames=sorted(set(names.values())))["LaunchTemplates"]
    assert len(stored) == 2
    assert cloud.node_class_launch_templates(nc, launch_spec("m5.large")) == {"m5.large": names["m5.large"]}


def test_a_nodepools_launch_goes_through_its_ec2nodeclass_and_its_claim_records_the_image(world: World) -> None:
    nc = resolved(world, tags={"team": "payments"}, metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2})
    settings = AwsSettings(region=REGION, cluster_name=CLUSTER, cluster_endpoint=FACTS.endpoint, kubernetes_minor=MINOR,
                           ca_bundle=FACTS.ca_bundle, cluster_cidr=FACTS.cidr)
    cloud = AwsCloudProvider(boto3.session.Session(), settings, lambda _: nc)
    m5 = launch_spec("m5.large").instance_types[0]
    request = NodeRequest(node_name="general-abcde", provisioner="general",
                          requirements=Requirements([Requirement.exactly(wk.CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND)]),
                          instance_type_options=(m5,), labels={wk.NODEPOOL: "general"},
                          taints=({"key": "dedicated", "value": "db", "effect": "NoSchedule"},))
    instance = cloud.create(request)

    _, instance_id = parse_provider_id(instance.provider_id)
    described = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert instance.image_id == described["ImageId"] == world.x86                    # the node class's status AMI
    assert described["SubnetId"] in {s.id for s in nc.status.subnets}
    tags = {t["Key"]: t["Value"] for t in described["Tags"]}
    assert tags["karpenter.sh/nodepool"] == "general" and tags["karpenter.k8s.aws/ec2nodeclass"] == "default"
    assert tags["team"] == "payments" and tags["eks:eks-cluster-name"] == CLUSTER
    # the template it launched with (named by a hash of its content: asking again names the same one)
    template = cloud.node_class_launch_templates(nc, LaunchSpec(node_pool="general", instance_types=[m5],
                                                                labels=request.labels, taints=request.taints))["m5.large"]
    data = world.ec2.describe_launch_template_versions(LaunchTemplateName=template)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"]
    assert data["SecurityGroupIds"] == [world.security_group]
    assert data["IamInstanceProfile"]["Name"] == nc.status.instance_profile
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    config = yaml.safe_load(str(parts(base64.b64decode(data["UserData"]).decode())[-1].get_payload()))
    assert config["kind"] == "NodeConfig" and config["spec"]["cluster"]["name"] == CLUSTER

    claim = claim_manifest(request, pods=[], bind=True, owner=None)
    status = launched_status(claim, instance, m5, now="2026-01-01T00:00:00Z")
    assert status["imageID"] == world.x86 and status["providerID"] == instance.provider_id
    assert status["nodeName"] == instance.node_name and status["capacity"]["cpu"] == "2"
