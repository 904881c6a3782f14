"""A controller killed at each point of a launch, then started again: duplicates, leaks, pods left pending,
seconds to converge. Fake provider and AWS provider (EC2 played by a moto server on loopback).

Per run: a fresh `karpy sim` (with the AWS registrar in aws mode), the CRDs, a Provisioner that allows only
m5.large on-demand, and a Deployment of --pods pods of 1500m cpu (one node each). `karpy controller` starts
with KARPY_LAUNCH_FAULT=<point> and exits there (os._exit, as kill -9 would leave it); a second controller
starts without it and must finish the job. Printed per fault:

- duplicates: instances launched beyond one per pod (aws: every instance moto ever ran; fake: distinct
  provider ids in the `Launched instance` lines of both runs);
- leaked: instances launched that no Node holds once the pods run (aws: still running);
- pending: pods not Running when the run ends (after --timeout seconds at most);
- seconds: from the second controller's start until every pod runs.

    python3 bench/faults.py [--pods 6] [--providers fake aws] [--points before-create after-create ...]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402

from bench.aws import CLUSTER, DISCOVERY, REGION, prepare  # noqa: E402
from bench.measure import free_port, wait_for  # noqa: E402
from karpy.controller.launch.launcher import FAULT_ENV, KILL_POINTS  # noqa: E402
from karpy.kubeclient.raw import RawClient, api_client, path_of  # noqa: E402

LAUNCHED = re.compile(r"Launched instance: (\S+),")


def deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": "inflate"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "inflate", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                         {"name": "app", "image": "pause", "resources": {"requests": {"cpu": "1500m"}}}]}}}}


def provisioner(aws: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"requirements": [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}
    if aws:
        spec["providerRef"] = {"name": "default"}
    return {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": spec}


class Run:
    def __init__(self, work: Path, *, aws: bool, moto_url: str | None, env: dict[str, str]) -> None:
        self.work, self.aws, self.moto_url, self.env = work, aws, moto_url, env
        self.kubeconfig = work / "kubeconfig"
        self.processes: list[subprocess.Popen[bytes]] = []

    def start_cluster(self) -> RawClient:
        args = [sys.executable, "-m", "karpy.main", "sim", "--port", str(free_port()), "--kubeconfig-out", str(self.kubeconfig),
                "--system-nodes", "0", "--boot-delay", "0.5"]
        if self.aws:
            args += ["--aws-endpoint-url", str(self.moto_url), "--cluster-name", CLUSTER]
        self.processes.append(subprocess.Popen(args, stdout=open(self.work / "sim.log", "wb"), stderr=subprocess.STDOUT,
                                               env=self.env))
        wait_for(lambda: self.kubeconfig.exists() and RawClient(api_client(str(self.kubeconfig))).get("/version"), 30,
                 "the local cluster")
        subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), "apply", "-f", str(ROOT / "manifests" / "crds")],
                       check=True, capture_output=True)
        return RawClient(api_client(str(self.kubeconfig)))

    def controller(self, log: Path, fault: str | None) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(self.kubeconfig), "--metrics-port", "0",
                "--health-port", "0", "--batch-idle-duration", "0.3", "--cluster-name", CLUSTER]
        if self.aws:
            args += ["--cloud-provider", "aws", "--cluster-endpoint", "https://cluster.example"]
        env = {k: v for k, v in self.env.items() if k != FAULT_ENV} | ({FAULT_ENV: fault} if fault else {})
        p = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
        self.processes.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.processes):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


def one(point: str, *, aws: bool, pods: int, timeout: float, moto_url: str | None, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"karpy-fault-{point}-"))
    run = Run(work, aws=aws, moto_url=moto_url, env=env)
    try:
        if aws:
            template = prepare(str(moto_url))
            ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)
        client = run.start_cluster()
        if aws:
            client.create(path_of("karpenter.k8s.aws/v1alpha1", "awsnodetemplates"), {
                "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "default"},
                "spec": template.model_dump(by_alias=True, exclude_none=True)})
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(aws))
        client.create(path_of("apps/v1", "deployments", "default"), deployment(pods))
        dying = run.controller(work / "controller-1.log", point)
        try:
            dying.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            dying.kill()                   # the point was never reached: stop it there anyway
            dying.wait()
        restarted = time.monotonic()
        run.controller(work / "controller-2.log", None)

        def running() -> list[dict[str, Any]]:
            return [p for p in client.get(path_of("v1", "pods", "default"), labelSelector="app=inflate")["items"]
                    if (p.get("status") or {}).get("phase") == "Running"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(running()) < pods:
            time.sleep(0.2)
        seconds = time.monotonic() - restarted
        pending = pods - len(running())
        nodes = client.get(path_of("v1", "nodes"))["items"]
        held = {(n.get("spec") or {}).get("providerID") for n in nodes}
        logs = "".join((work / f"controller-{i}.log").read_text(errors="replace") for i in (1, 2))
        launched = set(LAUNCHED.findall(logs))
        if aws:
            instances = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
            duplicates = len(instances) - pods
            leaked = sum(1 for i in instances if i["State"]["Name"] in ("pending", "running")
                         and f"aws:///{i['Placement']['AvailabilityZone']}/{i['InstanceId']}" not in held)
        else:
            duplicates = len(launched) - pods
            leaked = len(launched - held)
        return {"duplicates": duplicates, "leaked": leaked, "pending": pending,
                "seconds": seconds if pending == 0 else float("nan"), "exit": dying.returncode}
    finally:
        run.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=6)
    parser.add_argument("--providers", nargs="+", default=["fake", "aws"], choices=["fake", "aws"])
    parser.add_argument("--points", nargs="+", default=list(KILL_POINTS), choices=list(KILL_POINTS))
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": REGION}
    moto: subprocess.Popen[bytes] | None = None
    refusing = socket.socket()             # moto has no Pricing API: refuse it at once, the shipped table stands in
    refusing.bind(("127.0.0.1", 0))
    moto_url = None
    if "aws" in args.providers:
        port = free_port()
        moto_url = f"http://127.0.0.1:{port}"
        moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
        env.update({"AWS_ENDPOINT_URL": moto_url, "AWS_ENDPOINT_URL_PRICING": f"http://127.0.0.1:{refusing.getsockname()[1]}"})
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
        wait_for(lambda: urllib.request.urlopen(moto_url + "/moto-api/", timeout=2).status == 200, 30, "the moto server")
    try:
        print(f"{args.pods} pods of 1500m cpu (one m5.large each); the first controller dies at the point, a second finishes")
        print(f"{'provider':>8} {'kill point':>13} {'exit':>5} {'duplicates':>11} {'leaked':>7} {'pending':>8} {'seconds':>8}")
        for provider in args.providers:
            for point in args.points:
                r = one(point, aws=provider == "aws", pods=args.pods, timeout=args.timeout, moto_url=moto_url, env=env)
                print(f"{provider:>8} {point:>13} {r['exit']:>5} {r['duplicates']:>11} {r['leaked']:>7} {r['pending']:>8} "
                      f"{r['seconds']:>8.1f}", flush=True)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(timeout=10)
        refusing.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
