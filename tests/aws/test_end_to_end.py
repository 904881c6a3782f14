"""`karpy controller --cloud-provider aws` on the local cluster, EC2 played by a moto server on loopback:
pending pods -> CreateFleet -> the instance joins as its Node -> pods bound and Running -> deleting the
Node terminates the instance. The controller reaches moto through a proxy that reports the cheapest
instance type out of capacity: the pods are told so in an Event, and the next cheapest is launched. The
cluster's CA, which the local cluster (plain HTTP) cannot give, comes from EKS DescribeCluster into the
node's user data."""

from __future__ import annotations

import base64
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import boto3
import kubernetes
import pytest

from tests.aws.conftest import CLUSTER, DISCOVERY, REGION, Moto
from tests.aws.faults import FaultProxy, out_of_capacity
from tests.builders import deployment
from tests.conftest import free_port
from tests.expectations import eventually
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts a moto server on loopback

ROOT = Path(__file__).resolve().parents[2]


def test_pending_pods_launch_an_ec2_instance_that_joins_and_runs_them(moto: Moto, proxy: FaultProxy, tmp_path: Path) -> None:
    proxy.on("CreateFleet", out_of_capacity(), times=1)
    kubeconfig = tmp_path / "kubeconfig"
    env = {**os.environ}
    eks = boto3.client("eks", region_name=REGION, endpoint_url=moto.url)
    eks.create_cluster(name=CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={})
    ca = eks.describe_cluster(name=CLUSTER)["cluster"]["certificateAuthority"]["data"]
    processes = [subprocess.Popen(
        [sys.executable, "-m", "karpy.main", "sim", "--port", str(free_port()), "--kubeconfig-out", str(kubeconfig),
         "--system-nodes", "0", "--boot-delay", "0.5", "--aws-endpoint-url", moto.url, "--cluster-name", CLUSTER],
        stdout=open(tmp_path / "sim.log", "wb"), stderr=subprocess.STDOUT, env=env)]
    try:
        eventually(kubeconfig.exists, timeout=20)
        kube = Kube(None, kubeconfig)  # type: ignore[arg-type]  # the cluster runs as its own process here
        eventually(lambda: kube.kubectl("get", "--raw", "/version", check=False).returncode == 0, timeout=20)
        kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
        kube.custom.create_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", {
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
            "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                                      {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                     "provider": {"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                  "instanceProfile": "KarpenterNodeInstanceProfile"}}})
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "aws",
             "--cluster-name", CLUSTER, "--cluster-endpoint", "https://cluster.example", "--metrics-port", "0",
             "--health-port", "0",
             # a per-node cost favours one larger node over several small ones: one instance to follow below
             "--node-cost-per-hour", "1"], stdout=open(tmp_path / "controller.log", "wb"), stderr=subprocess.STDOUT,
            env=env))
        kube.apps.create_namespaced_deployment("default", deployment("inflate", replicas=3, cpu="1"))

        def running() -> list[kubernetes.client.V1Pod]:
            pods = kube.core.list_namespaced_pod("default", label_selector="app=inflate").items
            return pods if len(pods) == 3 and all(p.status.phase == "Running" for p in pods) else []
        pods = eventually(running, timeout=60)
        (launched,) = moto.instances("running")
        assert {p.spec.node_name for p in pods} == {launched["PrivateDnsName"]}
        node = kube.core.read_node(launched["PrivateDnsName"])
        assert node.spec.provider_id == f"aws:///{launched['Placement']['AvailabilityZone']}/{launched['InstanceId']}"
        assert node.metadata.labels["node.kubernetes.io/instance-type"] == launched["InstanceType"]
        assert any(a.type == "InternalIP" for a in node.status.addresses)       # adopted by the registrar

        (template,) = moto.ec2.describe_launch_templates()["LaunchTemplates"]
        data = moto.ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
            "LaunchTemplateVersions"][0]["LaunchTemplateData"]
        argv = shlex.split(base64.b64decode(data["UserData"]).decode().replace("\\\n", " ").splitlines()[-1])
        assert argv[argv.index("--b64-cluster-ca") + 1] == ca

        ice = proxy.sent("CreateFleet")[0].overrides()[0]["InstanceType"]
        assert launched["InstanceType"] != ice
        events = kube.core.list_namespaced_event("default", field_selector=f"involvedObject.name={pods[0].metadata.name}").items
        assert any(e.reason == "LaunchRetried" and e.type == "Warning" and f"EC2 has no on-demand {ice} capacity" in e.message
                   for e in events), [e.message for e in events]

        kube.kubectl("delete", "node", launched["PrivateDnsName"], "--wait=false")
        eventually(lambda: moto.instances("running") == [], timeout=60)
        eventually(lambda: launched["PrivateDnsName"] not in [n.metadata.name for n in kube.core.list_node().items], timeout=60)
        # the instance karpy launched is the one it terminated: nothing else was launched, nothing leaked
        assert [i["InstanceId"] for i in moto.instances("shutting-down", "terminated")] == [launched["InstanceId"]]
    finally:
        for p in reversed(processes):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        time.sleep(0)
