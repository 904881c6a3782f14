"""Launches per second through the AWS provider against a moto server, with and without CreateFleet batching.

A moto server (EC2 over HTTP on loopback) and `karpy sim` (where the provider
creates the Nodes) run as processes. The provider launches --launches nodes
that ask for the same thing (m5.large or m5.xlarge, on-demand), --parallel at
a time, as the provisioner does; once with Karpenter's batching window (35 ms
idle, 1 s at most) and once with every launch its own CreateFleet. moto is
reset between the runs. Printed per run: launches/s, CreateFleet calls,
p50/p99 of one launch, instances running afterwards.

    python3 bench/aws.py [--launches 200] [--parallel 8 32]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3

from bench.measure import free_port, stop_all, wait_for
from karpy.apis import labels as wk
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.v1alpha1 import AWSNodeTemplateSpec
from karpy.controller.cloudprovider.aws.provider import AwsCloudProvider, AwsSettings
from karpy.controller.cloudprovider.types import NodeRequest
from karpy.kubeclient.raw import RawClient, api_client

REGION = "us-east-1"
CLUSTER = "bench"
DISCOVERY = {"karpenter.sh/discovery": CLUSTER}


def prepare(url: str) -> AWSNodeTemplateSpec:
    """A fresh moto: a VPC with two tagged subnets, a tagged security group; the template selects an image by id."""
    urllib.request.urlopen(urllib.request.Request(url + "/moto-api/reset", method="POST"), timeout=10).read()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    tags = [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in DISCOVERY.items()]} for kind in ("subnet", "security-group")]
    for i, zone in enumerate(("us-east-1a", "us-east-1b")):
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i * 16}.0/20", AvailabilityZone=zone, TagSpecifications=tags[:1])
    ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc, TagSpecifications=tags[1:])
    image = next(i["ImageId"] for i in ec2.describe_images(Owners=["amazon"])["Images"] if i.get("Architecture") == "x86_64")
    return AWSNodeTemplateSpec.model_validate({"subnetSelector": DISCOVERY, "securityGroupSelector": DISCOVERY,
                                               "amiSelector": {"aws-ids": image}})


def run(url: str, kubeconfig: Path, *, launches: int, parallel: int, batch: bool) -> dict[str, float]:
    template = prepare(url)
    settings = AwsSettings(region=REGION, cluster_name=CLUSTER, cluster_endpoint="https://cluster.example", kubernetes_minor="1.31",
                           launch_batch_idle_seconds=0.035 if batch else 0.0)
    cloud = AwsCloudProvider(boto3.session.Session(), settings, lambda _: template)
    options = tuple(sorted((t for t in cloud.instance_types() if t.name in ("m5.large", "m5.xlarge")),
                           key=lambda t: min(o.price_per_hour for o in t.offerings)))
    requirements = Requirements([Requirement.exactly(wk.CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND)])
    prefix = "b" if batch else "s"
    cloud.create(NodeRequest(node_name=f"{prefix}-warm-{parallel}", provisioner="default", requirements=requirements,
                             instance_type_options=options))          # the launch template and AMI are made once, not timed
    calls_before = cloud.fleet.calls
    latencies: list[float] = []

    def launch(i: int) -> None:
        started = time.perf_counter()
        cloud.create(NodeRequest(node_name=f"{prefix}-{parallel}-{i}", provisioner="default", requirements=requirements,
                                 instance_type_options=options))
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(launch, range(launches)))
    elapsed = time.perf_counter() - started
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
    running = sum(len(r["Instances"]) for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["running"]}]) for r in page["Reservations"])
    latencies.sort()
    return {"launches/s": launches / elapsed, "seconds": elapsed, "CreateFleet calls": cloud.fleet.calls - calls_before,
            "p50 ms": statistics.median(latencies) * 1000, "p99 ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
            "running": running - 1}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--parallel", type=int, nargs="+", default=[8, 32])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="karpy-aws-"))
    moto_port, sim_port = free_port(), free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}
    url = f"http://127.0.0.1:{moto_port}"
    refusing = socket.socket()            # moto has no Pricing API: refuse it at once, the shipped table stands in
    refusing.bind(("127.0.0.1", 0))
    os.environ.update({**env, "AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_PRICING": f"http://127.0.0.1:{refusing.getsockname()[1]}"})
    kubeconfig = work / "kubeconfig"
    processes = [
        subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
                         stdout=open(work / "moto.log", "w"), stderr=subprocess.STDOUT, env=env),
        subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(sim_port), "--kubeconfig-out", str(kubeconfig),
                          "--system-nodes", "0"], stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT),
    ]
    try:
        wait_for(lambda: urllib.request.urlopen(url + "/moto-api/", timeout=2).status == 200, 30, "the moto server")
        wait_for(lambda: kubeconfig.exists() and RawClient(api_client(str(kubeconfig))).get("/version"), 30, "the local cluster")
        print(f"{args.launches} launches of identical nodes (m5.large | m5.xlarge, on-demand) against moto on loopback")
        print(f"{'parallel':>8} {'batching':>9} {'launches/s':>11} {'seconds':>8} {'CreateFleet':>12} {'p50 ms':>8} {'p99 ms':>8} {'running':>8}")
        for parallel in args.parallel:
            for batch in (True, False):
                r = run(url, kubeconfig, launches=args.launches, parallel=parallel, batch=batch)
                print(f"{parallel:>8} {'yes' if batch else 'no':>9} {r['launches/s']:>11.1f} {r['seconds']:>8.2f} "
                      f"{r['CreateFleet calls']:>12.0f} {r['p50 ms']:>8.0f} {r['p99 ms']:>8.0f} {r['running']:>8.0f}", flush=True)
    finally:
        stop_all(processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
