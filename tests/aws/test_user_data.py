"""User data that joins a node: AL2/Ubuntu bootstrap.sh with custom parts merged as MIME, Bottlerocket TOML;
the cluster CA found at start and written in the form each AMI family reads."""

from __future__ import annotations

import base64
import dataclasses
import email
import shlex
import tomllib
from email.message import Message
from pathlib import Path
from typing import Any

import boto3
import kubernetes
import pytest
import yaml

from karpy.apis.v1alpha1 import AWS
from karpy.certs.authority import generate
from karpy.controller.cloudprovider.aws.cluster import resolve_ca_bundle
from karpy.controller.cloudprovider.aws.launch import al2_user_data, ami_parameter, bottlerocket_user_data
from karpy.controller.cloudprovider.aws.provider import AwsCloudProvider, AwsConfigError
from karpy.kubeclient.raw import load_configuration
from tests.aws.conftest import CLUSTER, REGION, SETTINGS, TEMPLATE, Moto, request, seed_parameter
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts a moto server on loopback

JOIN: dict[str, Any] = dict(cluster="prod", endpoint="https://api.example", ca_bundle="Q0E=", max_pods=29,
            labels={"karpenter.sh/provisioner-name": "default", "team": "web"},
            taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])


def parts(document: str) -> list[str]:
    message = email.message_from_string(document)
    assert message.is_multipart()
    return [str(p.get_payload()) for p in message.get_payload() if isinstance(p, Message)]


def test_al2_without_custom_user_data_is_the_bootstrap_script() -> None:
    script = al2_user_data(**JOIN)
    assert script.startswith("#!/bin/bash") and "/etc/eks/bootstrap.sh 'prod'" in script
    assert "--max-pods=29" in script and "--register-with-taints=dedicated=db:NoSchedule" in script


def test_al2_custom_shell_script_runs_before_the_bootstrap() -> None:
    found = parts(al2_user_data(**JOIN, custom="#!/bin/bash\necho tuned > /etc/motd\n"))
    assert len(found) == 2 and "echo tuned" in found[0] and "/etc/eks/bootstrap.sh" in found[1]


def test_al2_custom_mime_keeps_its_parts() -> None:
    custom = ('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="XX"\n\n--XX\nContent-Type: text/cloud-config\n\n'
              "#cloud-config\npackages: [jq]\n\n--XX\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho one\n--XX--\n")
    found = parts(al2_user_data(**JOIN, custom=custom))
    assert len(found) == 3 and "packages: [jq]" in found[0] and "echo one" in found[1] and "bootstrap.sh" in found[2]


def test_bottlerocket_settings_join_the_node_and_keep_custom_settings() -> None:
    custom = ('[settings.kernel]\nlockdown = "integrity"\n[settings.kubernetes]\ncluster-name = "other"\n'
              '[settings.kubernetes.node-labels]\nowner = "ops"\n')
    settings = tomllib.loads(bottlerocket_user_data(**JOIN, custom=custom))["settings"]
    k8s = settings["kubernetes"]
    assert settings["kernel"] == {"lockdown": "integrity"}
    assert (k8s["cluster-name"], k8s["api-server"], k8s["cluster-certificate"], k8s["max-pods"]) == \
        ("prod", "https://api.example", "Q0E=", 29)                       # the joining keys are karpy's
    assert k8s["node-labels"] == {"owner": "ops", "karpenter.sh/provisioner-name": "default", "team": "web"}
    assert k8s["node-taints"] == {"dedicated": ["db:NoSchedule"]}


def test_bottlerocket_rejects_custom_user_data_that_is_not_toml() -> None:
    with pytest.raises(ValueError, match="userData: not valid TOML"):
        bottlerocket_user_data(**JOIN, custom="#!/bin/bash\necho no\n")


# --- the cluster CA: where the controller finds it, and how each AMI family receives it ---------------------

CA_PEM = generate(["api.example"]).ca_crt
CA_B64 = base64.b64encode(CA_PEM).decode()


def user_data_by_family(moto: Moto, kube: Kube, *families: str, **settings: Any) -> dict[str, str]:
    """The user data of the launch template the provider made to launch one m5.large with each family's AMI
    (one provider, so EC2's instance types are read once)."""
    # Ubuntu gets an image of its own: with AL2's, both would share one launch template (same content)
    seed_parameter(ami_parameter("Ubuntu", SETTINGS.kubernetes_minor, "amd64"), moto.gpu_image)
    seed_parameter(ami_parameter("Bottlerocket", SETTINGS.kubernetes_minor, "amd64"), moto.image)
    chosen: dict[str, AWS] = {}
    cloud = AwsCloudProvider(boto3.session.Session(), dataclasses.replace(SETTINGS, **settings), lambda _: chosen["now"])
    out, seen = {}, set()
    for family in families:
        chosen["now"] = AWS.model_validate({**TEMPLATE.model_dump(by_alias=True, exclude_none=True), "amiFamily": family})
        cloud.create(request(cloud, f"default-{family.lower()}", "m5.large"))
        (template,) = [t for t in moto.ec2.describe_launch_templates()["LaunchTemplates"] if t["LaunchTemplateId"] not in seen]
        seen.add(template["LaunchTemplateId"])
        data = moto.ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
            "LaunchTemplateVersions"][0]["LaunchTemplateData"]
        out[family] = base64.b64decode(data["UserData"]).decode()
    return out


def bootstrap_arguments(script: str) -> list[str]:
    """The argument vector of the script's bootstrap.sh line, as bash splits it (continuations joined)."""
    (line,) = [ln for ln in script.replace("\\\n", " ").splitlines() if "/etc/eks/bootstrap.sh" in ln]
    return shlex.split(line)


def option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, argv
    return argv[argv.index(name) + 1]


def test_each_ami_family_gets_the_endpoint_and_the_ca_in_the_form_its_image_reads(moto: Moto, kube: Kube) -> None:
    found = user_data_by_family(moto, kube, "AL2", "Ubuntu", "Bottlerocket", ca_bundle=CA_B64)
    for family in ("AL2", "Ubuntu"):          # both images run the EKS bootstrap.sh
        argv = bootstrap_arguments(found[family])
        # bootstrap.sh takes the cluster name as its positional argument, options in any order
        assert argv[:2] == ["/etc/eks/bootstrap.sh", CLUSTER], family
        assert option(argv, "--apiserver-endpoint") == SETTINGS.cluster_endpoint
        assert base64.b64decode(option(argv, "--b64-cluster-ca"), validate=True) == CA_PEM
    kubernetes_settings = tomllib.loads(found["Bottlerocket"])["settings"]["kubernetes"]
    assert (kubernetes_settings["cluster-name"], kubernetes_settings["api-server"]) == (CLUSTER, SETTINGS.cluster_endpoint)
    assert base64.b64decode(kubernetes_settings["cluster-certificate"], validate=True) == CA_PEM


def test_without_a_ca_the_bootstrap_leaves_the_flag_out_so_the_node_describes_the_cluster() -> None:
    argv = bootstrap_arguments(al2_user_data(**{**JOIN, "ca_bundle": None}))
    assert "--b64-cluster-ca" not in argv and option(argv, "--apiserver-endpoint") == JOIN["endpoint"]
    assert "cluster-certificate" not in tomllib.loads(bottlerocket_user_data(**{**JOIN, "ca_bundle": None}))["settings"]["kubernetes"]


def test_the_flag_comes_first_and_must_be_a_base64_certificate(tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(generate(["other"]).ca_crt)
    found = resolve_ca_bundle(flag=CA_B64, ca_file=str(ca_file), eks=None, cluster_name=CLUSTER)
    assert (found.data, found.source) == (CA_B64, "--cluster-ca-bundle")
    with pytest.raises(AwsConfigError, match="--cluster-ca-bundle: not base64"):
        resolve_ca_bundle(flag="not base64!", ca_file=None, eks=None, cluster_name=CLUSTER)
    with pytest.raises(AwsConfigError, match="--cluster-ca-bundle: decodes to no PEM certificate"):
        resolve_ca_bundle(flag=base64.b64encode(b"hello").decode(), ca_file=None, eks=None, cluster_name=CLUSTER)


def test_the_ca_the_kubeconfig_names_is_used_without_asking_eks(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "eks",
        "clusters": [{"name": "eks", "cluster": {"server": "https://api.example", "certificate-authority-data": CA_B64}}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    configuration = kubernetes.client.Configuration()
    load_configuration(str(kubeconfig), configuration)       # as the controller loads its connection
    found = resolve_ca_bundle(flag=None, ca_file=configuration.ssl_ca_cert, eks=None, cluster_name=CLUSTER)
    assert base64.b64decode(found.data or "") == CA_PEM and "CA file" in found.source


def test_eks_describe_cluster_is_the_last_source(moto: Moto) -> None:
    eks = boto3.client("eks", region_name=REGION, endpoint_url=moto.url)
    assert resolve_ca_bundle(flag=None, ca_file=None, eks=eks, cluster_name=CLUSTER).data is None   # no such cluster
    eks.create_cluster(name=CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})
    described = eks.describe_cluster(name=CLUSTER)["cluster"]["certificateAuthority"]["data"]
    found = resolve_ca_bundle(flag=None, ca_file=None, eks=eks, cluster_name=CLUSTER)
    assert (found.data, found.source) == (described, f"EKS DescribeCluster {CLUSTER}")
