"""The cluster faults of bench/faults.py: a controller killed at a launch point, a paused leader, a poison pod, an
API server outage. Each runs a fresh `karpy sim` and `karpy controller` processes and returns its figures."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import boto3

from bench.aws import CLUSTER, REGION, prepare
from bench.measure import free_port, wait_for
from bench.tcp_gate import Gate
from karpy.controller.launch.launcher import FAULT_ENV
from karpy.kubeclient.raw import RawClient, api_client, path_of
from karpy.simulator.kubeconfig import write_kubeconfig

ROOT = Path(__file__).resolve().parent.parent

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
        self.controller_kubeconfig = self.kubeconfig          # the outage puts a Gate between them
        self.processes: list[subprocess.Popen[bytes]] = []

    def start_cluster(self, port: int = 0) -> RawClient:
        """A fresh `karpy sim` (on `port`, or a free one) with the CRDs applied."""
        args = [sys.executable, "-m", "karpy.main", "sim", "--port", str(port or free_port()), "--kubeconfig-out", str(self.kubeconfig),
                "--system-nodes", "0", "--boot-delay", "0.5"]
        if self.aws:
            args += ["--aws-endpoint-url", str(self.moto_url), "--cluster-name", CLUSTER]
        self.kubeconfig.unlink(missing_ok=True)
        self.cluster = subprocess.Popen(args, stdout=open(self.work / "sim.log", "ab"), stderr=subprocess.STDOUT, env=self.env)
        self.processes.append(self.cluster)
        wait_for(lambda: self.kubeconfig.exists() and RawClient(api_client(str(self.kubeconfig))).get("/version"), 30,
                 "the local cluster")
        subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), "apply", "-f", str(ROOT / "manifests" / "crds")],
                       check=True, capture_output=True)
        return RawClient(api_client(str(self.kubeconfig)))

    def controller(self, log: Path, fault: str | None, *extra: str) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(self.controller_kubeconfig), "--metrics-port", "0",
                "--health-port", "0", "--batch-idle-duration", "0.3", "--cluster-name", CLUSTER, *extra]
        if self.aws:
            args += ["--cloud-provider", "aws", "--cluster-endpoint", "https://cluster.example"]
        env = {k: v for k, v in self.env.items() if k != FAULT_ENV} | ({FAULT_ENV: fault} if fault else {})
        p = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
        self.processes.append(p)
        return p

    def stop(self) -> None:
        clusters = [p for p in self.processes if p.args[3] == "sim"]  # type: ignore[index]  # args is run()'s list; clusters go last, so controllers do not see them go
        for p in [p for p in reversed(self.processes) if p not in clusters] + clusters:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)      # a paused process cannot act on SIGTERM
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


def kill_point(point: str, *, aws: bool, pods: int, timeout: float, moto_url: str | None, env: dict[str, str]) -> dict[str, Any]:
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
        placed = running()
        pending = pods - len(placed)
        per_node = Counter((p.get("spec") or {}).get("nodeName") for p in placed)
        shared = sum(1 for count in per_node.values() if count > 1)    # each pod needs a node of its own
        nodes = client.get(path_of("v1", "nodes"))["items"]
        held = {n["spec"]["providerID"] for n in nodes if (n.get("spec") or {}).get("providerID")}
        logs = "".join((work / f"controller-{i}.log").read_text(errors="replace") for i in (1, 2))
        launched = set(LAUNCHED.findall(logs))
        if aws:
            instances = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
            duplicates = len(instances) - pods
            leaked = sum(1 for i in instances if i["State"]["Name"] in ("pending", "running")
                         and f"aws:///{i['Placement']['AvailabilityZone']}/{i['InstanceId']}" not in held)
        else:
            duplicates = len(launched | held) - pods      # a Node adopted after the kill may have no launch line
            leaked = len(launched - held)
        return {"duplicates": duplicates, "leaked": leaked, "pending": pending, "shared": shared,
                "seconds": seconds if pending == 0 else float("nan"), "exit": dying.returncode}
    finally:
        run.stop()


def bare_pod(name: str, requests_: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench"}},
            "spec": {"containers": [{"name": "app", "image": "pause", "resources": {"requests": requests_}}]}}


def phases(client: RawClient) -> dict[str, str]:
    return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "")
            for p in client.get(path_of("v1", "pods", "default"))["items"]}


def until(check: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """`check()` until it is truthy or `timeout` seconds pass (errors count as not yet); its last value."""
    deadline, value = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(every)
    return value


def log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def started(log: Path, timeout: float = 30) -> None:
    """Until the controller has said it is starting, and a moment for its informers to list."""
    wait_for(lambda: "Starting karpy controller" in log_text(log), timeout, f"the controller ({log})")
    time.sleep(1.0)


# --- a paused and resumed leader -------------------------------------------------------------------------------

LEASE = path_of("coordination.k8s.io/v1", "leases", "default", "karpy-leader-election")
BECAME = re.compile(r"Became leader as (\S+)")


def leader_pause(*, pods: int, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="karpy-fault-leader-"))
    run = Run(work, aws=False, moto_url=None, env=env)
    try:
        client = run.start_cluster()
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(False))
        logs = [work / f"replica-{i}.log" for i in range(2)]
        replicas = [run.controller(log, None, "--leader-elect", "--batch-max-duration", "2") for log in logs]

        def holder() -> str:
            return (client.get(LEASE).get("spec") or {}).get("holderIdentity") or ""
        first = until(holder, 30)
        leading = until(lambda: [i for i, log in enumerate(logs) if f"Became leader as {first}" in log_text(log)], 15)
        if not first or not leading:
            raise SystemExit("leader: no replica became leader")
        old, new = replicas[leading[0]], replicas[1 - leading[0]]
        paused = time.monotonic()
        os.kill(old.pid, signal.SIGSTOP)
        try:
            taken = until(lambda: holder() not in ("", first), timeout)
            takeover = time.monotonic() - paused
            for i in range(pods):
                client.create(path_of("v1", "pods", "default"), bare_pod(f"web-{i}", {"cpu": "1500m"}))
            created = time.monotonic()
        finally:
            os.kill(old.pid, signal.SIGCONT)
        try:
            old_exit: Any = old.wait(timeout=15)
        except subprocess.TimeoutExpired:
            old_exit = "running"
        placed = until(lambda: sum(phase == "Running" for phase in phases(client).values()) >= pods, timeout)
        seconds = time.monotonic() - created
        time.sleep(3.0)                    # a late launch by the resumed leader would show by now
        nodes = len(client.get(path_of("v1", "nodes"))["items"])
        launched = len(set(LAUNCHED.findall("".join(log_text(log) for log in logs))))
        per_node = Counter((p.get("spec") or {}).get("nodeName")
                           for p in client.get(path_of("v1", "pods", "default"))["items"] if (p.get("spec") or {}).get("nodeName"))
        return {"takeover": takeover if taken else float("nan"), "old_exit": old_exit, "new_alive": new.poll() is None,
                "nodes": nodes, "duplicates": max(nodes, launched) - pods,
                "shared": sum(1 for count in per_node.values() if count > 1),
                "pending": sum(phase != "Running" for phase in phases(client).values()),
                "seconds": seconds if placed else float("nan")}
    finally:
        run.stop()


# --- a poison pod next to a healthy one ------------------------------------------------------------------------

def healthy_pod_seconds(*, poison: bool, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """Seconds until a healthy 500m pod runs, created (with the poison pod, if asked) on a fresh cluster."""
    work = Path(tempfile.mkdtemp(prefix="karpy-fault-poison-"))
    run = Run(work, aws=False, moto_url=None, env=env)
    try:
        client = run.start_cluster()
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), {
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}})
        log = work / "controller.log"
        run.controller(log, None)
        started(log)
        if poison:
            client.create(path_of("v1", "pods", "default"), bare_pod("poison", {"cpu": "100m", "memory": "1e30"}))
        created = time.monotonic()
        client.create(path_of("v1", "pods", "default"), bare_pod("healthy", {"cpu": "500m"}))
        ran = until(lambda: phases(client).get("healthy") == "Running", timeout, every=0.05)
        seconds = time.monotonic() - created
        flagged = False
        if poison:
            flagged = bool(until(lambda: any(
                e.get("reason") == "FailedScheduling" and e["involvedObject"].get("name") == "poison"
                for e in client.get(path_of("v1", "events", "default"))["items"]), 10))
        return {"seconds": seconds if ran else float("nan"), "poison_pending": phases(client).get("poison") == "Pending",
                "flagged": flagged, "tracebacks": log_text(log).count("Traceback")}
    finally:
        run.stop()


# --- an API server outage --------------------------------------------------------------------------------------

def api_outage(*, down: float, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """The controller reaches its cluster through a Gate. The Gate shuts (refused connections, resets), the cluster
    behind it is stopped, and `down` seconds later a fresh one is started on the same port with the CRDs and the
    Provisioner applied before the Gate opens again: as a restarted API server, never half set up."""
    work = Path(tempfile.mkdtemp(prefix="karpy-fault-outage-"))
    run = Run(work, aws=False, moto_url=None, env=env)
    gate: Gate | None = None
    try:
        port = free_port()
        client = run.start_cluster(port)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(False))
        gate = Gate(("127.0.0.1", port)).open()
        run.controller_kubeconfig = work / "gated-kubeconfig"
        write_kubeconfig(str(run.controller_kubeconfig), f"http://127.0.0.1:{gate.port}")
        log = work / "controller.log"
        controller = run.controller(log, None)
        started(log)
        before = len(log_text(log).splitlines())
        gate.shut()
        stopped = time.monotonic()
        run.cluster.terminate()
        run.cluster.wait(timeout=10)
        client = run.start_cluster(port)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(False))
        time.sleep(max(0.0, down - (time.monotonic() - stopped)))
        gate.open()
        created = time.monotonic()
        client.create(path_of("v1", "pods", "default"), bare_pod("after", {"cpu": "1500m"}))
        ran = until(lambda: phases(client).get("after") == "Running", timeout)
        seconds = time.monotonic() - created
        during = log_text(log).splitlines()[before:]          # from the stop until the pod ran
        return {"lines": len(during), "outage_lines": sum("kubeclient.outage" in line for line in during),
                "tracebacks": sum("Traceback" in line for line in during), "placed": bool(ran),
                "seconds": seconds if ran else float("nan"), "alive": controller.poll() is None}
    finally:
        run.stop()
        if gate is not None:
            gate.shut()
