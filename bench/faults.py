"""The faults a production cluster sees, each run against real processes on loopback, with its figures and targets.

    python3 bench/faults.py [--only kill,leader,poison,slow,malformed,outage] [--pods 6] [--providers fake aws] ...

kill       A controller killed at each point of a launch, then started again. Fake provider and AWS provider (EC2
           played by a moto server on loopback). Per run: a fresh `karpy sim` (with the AWS registrar in aws mode),
           the CRDs, a Provisioner that allows only m5.large on-demand, and a Deployment of --pods pods of 1500m cpu
           (one node each). `karpy controller` starts with KARPY_LAUNCH_FAULT=<point> and exits there (os._exit, as
           kill -9 would leave it); a second controller starts without it and must finish the job. Printed:
           duplicates (instances launched beyond one per pod; aws: every instance moto ever ran, fake: distinct
           provider ids in the `Launched instance` lines of both runs), leaked (instances launched that no Node holds
           once the pods run; aws: still running), pending (pods not Running at the end), seconds (from the second
           controller's start until every pod runs). Targets: 0 duplicates, 0 leaked, 0 pending.
leader     Two `karpy controller --leader-elect` replicas; the leader is paused (SIGSTOP) until the other holds the
           Lease, --pods pods that each need a node of their own are created, and the old leader resumes (SIGCONT).
           Printed: takeover (seconds from the pause until the Lease changed hands), old-exit (the resumed leader's
           exit code; `running` if it did not stand down), nodes, duplicates (nodes and launched instances beyond one
           per pod), seconds (from the pods' creation until all run). Targets: 0 duplicates, the old leader exits.
poison     A healthy 500m pod alone, then next to a pod requesting memory "1e30", each on a fresh cluster and
           controller: seconds until the healthy pod runs, and whether the poison pod stayed Pending with a
           FailedScheduling Event. Target: as fast with the poison pod (within 1.5x + 1 s of alone).
slow       --slow-clients connections announcing `Content-Length: 100000`, then one byte every 2 s, against
           `karpy webhook` and `karpy extender` with their default settings; meanwhile --requests normal requests,
           one every --request-every seconds, each with a 2 s timeout. Printed: answered (share of normal requests answered 200). Target: >= 90%.
malformed  Non-UTF-8 bytes, non-JSON, wrong shapes, an empty body, deep nesting, an oversized Content-Length,
           bad chunked encoding and conflicting framing, posted to every path of both servers. Printed: requests,
           answers by class (2xx, 4xx, 5xx) and none (connection closed without an answer). Target: 0 5xx.
outage     A controller whose local cluster is stopped for --outage seconds and started again on the same port
           (empty: the CRDs and the Provisioner are applied again), then a pod of its own node is created. Printed:
           log lines from the stop until that pod runs, the lines among them of the outage logger (target: one when
           it goes, one a minute while it stays down, one when it is back), tracebacks, whether a pod created after the restart got its node, seconds
           from its creation until it runs. Targets: a few outage lines (not one per request), the pod placed.

Every process the benchmark starts is stopped before it exits; servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import requests  # noqa: E402

from bench.aws import CLUSTER, REGION, prepare  # noqa: E402
from bench.measure import free_port, wait_for  # noqa: E402
from bench.slow_clients import SlowClients  # noqa: E402
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
        args = [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(self.kubeconfig), "--metrics-port", "0",
                "--health-port", "0", "--batch-idle-duration", "0.3", "--cluster-name", CLUSTER, *extra]
        if self.aws:
            args += ["--cloud-provider", "aws", "--cluster-endpoint", "https://cluster.example"]
        env = {k: v for k, v in self.env.items() if k != FAULT_ENV} | ({FAULT_ENV: fault} if fault else {})
        p = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
        self.processes.append(p)
        return p

    def stop(self) -> None:
        clusters = [p for p in self.processes if p.args[3] == "sim"]     # last, so controllers do not see them go
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
        return {"takeover": takeover if taken else float("nan"), "old_exit": old_exit, "new_alive": new.poll() is None,
                "nodes": nodes, "duplicates": max(nodes, launched) - pods,
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


# --- slow clients and malformed requests against both servers --------------------------------------------------

WEBHOOK_PATHS = ["/validate-karpenter-sh-v1alpha5-provisioner", "/mutate-karpenter-sh-v1alpha5-provisioner",
                 "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate", "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate"]
EXTENDER_PATHS = ["/scheduler/filter", "/scheduler/prioritize", "/scheduler/bind"]
READ_ONLY = ["/healthz", "/readyz", "/metrics", "/capacity-gaps", "/no-such-path", "/scheduler/%ff"]


def admission_review() -> dict[str, Any]:
    obj = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "bench", "kind": {"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"},
                        "operation": "CREATE", "object": obj}}


SERVERS: dict[str, tuple[str, list[str], Callable[[], Any]]] = {
    "webhook": ("webhook", WEBHOOK_PATHS, admission_review),
    "extender": ("extender", EXTENDER_PATHS, lambda: {"Pod": {"metadata": {"name": "web"}}, "NodeNames": ["n1", "n2"]}),
}


class Server:
    """`karpy webhook` or `karpy extender` on 127.0.0.1 over TLS, with its default settings."""

    def __init__(self, command: str, certs: Path, work: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base_url, self.ca = f"https://127.0.0.1:{self.port}", certs / "ca.crt"
        env = {k: v for k, v in env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "karpy.main", command, "--cert-dir", str(certs), "--host", "127.0.0.1",
             "--port", str(self.port)], stdout=open(work / f"{command}.log", "wb"), stderr=subprocess.STDOUT, env=env)
        wait_for(lambda: requests.get(self.base_url + "/healthz", verify=str(self.ca), timeout=2).status_code == 200, 30,
                 f"karpy {command}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def certificates(work: Path) -> Path:
    out = work / "certs"
    subprocess.run([sys.executable, "-m", "karpy.main", "certs", "generate", "--out-dir", str(out), "--dns-name", "localhost",
                    "--dns-name", "127.0.0.1"], check=True, capture_output=True)
    return out


def slow_clients(name: str, *, clients: int, normal: int, every: float, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"karpy-fault-slow-{name}-"))
    command, paths, body = SERVERS[name]
    server = Server(command, certificates(work), work, env)
    try:
        with SlowClients(server.base_url, server.ca, paths[0], count=clients, every=2.0):
            answered, spent = 0, []
            for _ in range(normal):
                began = time.monotonic()
                try:
                    answered += requests.post(server.base_url + paths[0], json=body(), verify=str(server.ca),
                                              timeout=2).status_code == 200
                except requests.RequestException:
                    pass
                spent.append(time.monotonic() - began)
                time.sleep(max(0.0, every - spent[-1]))
        return {"answered": answered, "requests": normal, "slowest": max(spent)}
    finally:
        server.stop()


def malformed_requests(oversize: int) -> list[tuple[str, str, bytes | None, bytes]]:
    """(label, content type, body, raw request tail) for each malformed request; a raw tail goes out as written."""
    good = b'{"Pod": {"metadata": {"name": "web"}}, "NodeNames": ["n1"]}'
    bodies = {
        "not-utf8": b'{"Pod": "\xff\xfe"}', "binary": b"\xff\xfe\x00garbage", "surrogate": good.replace(b'"n1"', b'"n\xed\xa0\x80"'),
        "not-json": b"{not json", "empty": b"", "a-list": b"[1, 2, 3]", "a-string": b'"just a string"', "empty-object": b"{}",
        "wrong-types": b'{"Pod": 5, "NodeNames": "n1", "Nodes": [1], "request": "x", "kind": 7}',
        "deep-nesting": b"[" * 5000 + b"]" * 5000,
    }
    out = [(label, "application/json", body, b"") for label, body in bodies.items()]
    out.append(("wrong-content-type", "text/plain", good, b""))
    out += [
        ("oversized", "", None, f"Content-Type: application/json\r\nContent-Length: {oversize}\r\n\r\n".encode() + b"[" * 4096),
        ("bad-chunk-size", "", None, b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        ("truncated-chunk", "", None, b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{}\r\n0\r\n\r\n"),
        ("chunked-not-utf8", "", None, b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n\xff\xfe\xfd\xfc\r\n0\r\n\r\n"),
        ("length-and-chunked", "", None,
         b"Content-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
        ("bad-length", "", None, b"Content-Type: application/json\r\nContent-Length: -5\r\n\r\n{}"),
    ]
    return out


RAW_TIMEOUT = 40.0                         # past the servers' default 30 s body deadline


def raw_status(server: Server, path: str, tail: bytes) -> int | None:
    """The status of a hand-framed request, or None when the server closed without answering."""
    context = ssl.create_default_context(cafile=str(server.ca))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=RAW_TIMEOUT) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode() + tail)
            answer = b""
            while b"\r\n" not in answer and (chunk := tls.recv(4096)):
                answer += chunk
    except OSError:
        return None
    match = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    return int(match.group(1)) if match else None


def malformed(name: str, *, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"karpy-fault-malformed-{name}-"))
    command, paths, _ = SERVERS[name]
    server = Server(command, certificates(work), work, env)
    classes: Counter[str] = Counter()
    failures: list[str] = []
    def send(path: str, label: str, content_type: str, body: bytes | None, tail: bytes) -> tuple[str, int | None]:
        if body is None:
            return f"{path} {label}", raw_status(server, path, tail)
        try:
            return f"{path} {label}", requests.post(server.base_url + path + "?x=%ff", data=body, verify=str(server.ca),
                                                    headers={"Content-Type": content_type}, timeout=RAW_TIMEOUT).status_code
        except requests.RequestException:
            return f"{path} {label}", None
    try:
        # side by side: a truncated body is answered only at the server's body deadline
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda a: send(*a), [(path, *m) for path in [*paths, *READ_ONLY]
                                                          for m in malformed_requests(oversize=128 * 1024 * 1024)]))
        for what, status in answers:
            kind = "none" if status is None else f"{status // 100}xx"
            classes[kind] += 1
            if kind in ("5xx", "none"):
                failures.append(f"{what}: {status}")
        alive = requests.get(server.base_url + "/healthz", verify=str(server.ca), timeout=5).status_code == 200
        return {"requests": sum(classes.values()), **{k: classes[k] for k in ("2xx", "4xx", "5xx", "none")},
                "alive": alive, "failures": failures}
    finally:
        server.stop()


# --- an API server outage --------------------------------------------------------------------------------------

def api_outage(*, down: float, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="karpy-fault-outage-"))
    run = Run(work, aws=False, moto_url=None, env=env)
    try:
        port = free_port()
        client = run.start_cluster(port)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(False))
        log = work / "controller.log"
        run.controller(log, None)
        started(log)
        before = len(log_text(log).splitlines())
        run.cluster.terminate()
        run.cluster.wait(timeout=10)
        time.sleep(down)
        client = run.start_cluster(port)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(False))
        created = time.monotonic()
        client.create(path_of("v1", "pods", "default"), bare_pod("after", {"cpu": "1500m"}))
        ran = until(lambda: phases(client).get("after") == "Running", timeout)
        seconds = time.monotonic() - created
        during = log_text(log).splitlines()[before:]          # from the stop until the pod ran
        return {"lines": len(during), "outage_lines": sum("kubeclient.outage" in line for line in during),
                "tracebacks": sum("Traceback" in line for line in during), "placed": bool(ran),
                "seconds": seconds if ran else float("nan"), "alive": run.processes[1].poll() is None}
    finally:
        run.stop()


# --- the report --------------------------------------------------------------------------------------------------

FAULTS = ["kill", "leader", "poison", "slow", "malformed", "outage"]


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def run_kill(args: argparse.Namespace, env: dict[str, str]) -> None:
    moto: subprocess.Popen[bytes] | None = None
    refusing = socket.socket()             # moto has no Pricing API: refuse it at once, the shipped table stands in
    refusing.bind(("127.0.0.1", 0))
    moto_url = None
    env = dict(env)
    if "aws" in args.providers:
        port = free_port()
        moto_url = f"http://127.0.0.1:{port}"
        moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
        env.update({"AWS_ENDPOINT_URL": moto_url, "AWS_ENDPOINT_URL_PRICING": f"http://127.0.0.1:{refusing.getsockname()[1]}"})
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
    try:
        if moto_url:
            wait_for(lambda: urllib.request.urlopen(moto_url + "/moto-api/", timeout=2).status == 200, 30, "the moto server")
        print(f"\n## kill: {args.pods} pods of 1500m cpu (one m5.large each); the first controller dies at the point, "
              "a second finishes (targets: 0 duplicates, 0 leaked, 0 pending)")
        print(f"{'provider':>8} {'kill point':>13} {'exit':>5} {'duplicates':>11} {'leaked':>7} {'pending':>8} {'seconds':>8} {'verdict':>7}")
        for provider in args.providers:
            for point in args.points:
                r = kill_point(point, aws=provider == "aws", pods=args.pods, timeout=args.timeout, moto_url=moto_url, env=env)
                ok = r["duplicates"] <= 0 and r["leaked"] == 0 and r["pending"] == 0
                print(f"{provider:>8} {point:>13} {r['exit']:>5} {r['duplicates']:>11} {r['leaked']:>7} {r['pending']:>8} "
                      f"{r['seconds']:>8.1f} {verdict(ok):>7}", flush=True)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(timeout=10)
        refusing.close()


def run_leader(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"\n## leader: the leader paused until the other replica holds the Lease, {args.pods} pods of 1500m cpu "
          "(one m5.large each), then resumed (targets: 0 duplicates, the old leader exits)")
    r = leader_pause(pods=args.pods, timeout=args.timeout, env=env)
    ok = r["duplicates"] <= 0 and r["old_exit"] not in ("running", 0) and r["pending"] == 0
    print(f"{'takeover s':>10} {'old exit':>9} {'new alive':>9} {'nodes':>6} {'duplicates':>11} {'pending':>8} {'seconds':>8} {'verdict':>7}")
    print(f"{r['takeover']:>10.1f} {r['old_exit']!s:>9} {r['new_alive']!s:>9} {r['nodes']:>6} {r['duplicates']:>11} "
          f"{r['pending']:>8} {r['seconds']:>8.1f} {verdict(ok):>7}", flush=True)


def run_poison(args: argparse.Namespace, env: dict[str, str]) -> None:
    print('\n## poison: seconds until a healthy 500m pod runs, alone and next to a pod requesting memory "1e30" '
          "(target: within 1.5x + 1 s of alone)")
    alone = healthy_pod_seconds(poison=False, timeout=args.timeout, env=env)
    beside = healthy_pod_seconds(poison=True, timeout=args.timeout, env=env)
    ok = beside["seconds"] <= 1.5 * alone["seconds"] + 1.0 and beside["poison_pending"]
    print(f"{'alone s':>8} {'with poison s':>14} {'poison pending':>15} {'event':>6} {'tracebacks':>11} {'verdict':>7}")
    print(f"{alone['seconds']:>8.1f} {beside['seconds']:>14.1f} {beside['poison_pending']!s:>15} {beside['flagged']!s:>6} "
          f"{beside['tracebacks']:>11} {verdict(ok):>7}", flush=True)


def run_slow(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"\n## slow: {args.slow_clients} clients send headers with Content-Length: 100000, then a byte every 2 s; "
          f"{args.requests} normal requests meanwhile, one every {args.request_every:g} s, 2 s timeout each (target: >= 90% answered)")
    print(f"{'server':>9} {'answered':>9} {'share':>6} {'slowest s':>10} {'verdict':>7}")
    for name in SERVERS:
        r = slow_clients(name, clients=args.slow_clients, normal=args.requests, every=args.request_every, env=env)
        share = r["answered"] / r["requests"]
        print(f"{name:>9} {r['answered']:>4}/{r['requests']:<4} {share:>6.0%} {r['slowest']:>10.2f} {verdict(share >= 0.9):>7}",
              flush=True)


def run_malformed(args: argparse.Namespace, env: dict[str, str]) -> None:
    print("\n## malformed: bad bytes, bad JSON, wrong shapes, oversized, bad chunked encoding to every path (target: 0 5xx)")
    print(f"{'server':>9} {'requests':>9} {'2xx':>5} {'4xx':>5} {'5xx':>5} {'none':>5} {'alive':>6} {'verdict':>7}")
    for name in SERVERS:
        r = malformed(name, env=env)
        print(f"{name:>9} {r['requests']:>9} {r['2xx']:>5} {r['4xx']:>5} {r['5xx']:>5} {r['none']:>5} {r['alive']!s:>6} "
              f"{verdict(r['5xx'] == 0 and r['alive']):>7}", flush=True)
        for failure in r["failures"]:
            print(f"{'':>9} {failure}")


def run_outage(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"\n## outage: the controller's API server stopped for {args.outage:g} s and started again on the same port "
          "(targets: a few outage lines, not one per request; the next pod placed)")
    r = api_outage(down=args.outage, timeout=args.timeout, env=env)
    ok = r["placed"] and r["tracebacks"] == 0 and r["outage_lines"] <= 2 + args.outage // 60   # down, each minute, back
    print(f"{'log lines':>10} {'outage lines':>13} {'tracebacks':>11} {'pod placed':>11} {'seconds':>8} {'verdict':>7}")
    print(f"{r['lines']:>10} {r['outage_lines']:>13} {r['tracebacks']:>11} {r['placed']!s:>11} {r['seconds']:>8.1f} "
          f"{verdict(ok):>7}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(FAULTS), help=f"comma-separated faults to run, of {','.join(FAULTS)}")
    parser.add_argument("--pods", type=int, default=6, help="kill, leader: pods of one node each")
    parser.add_argument("--providers", nargs="+", default=["fake", "aws"], choices=["fake", "aws"], help="kill: providers")
    parser.add_argument("--points", nargs="+", default=list(KILL_POINTS), choices=list(KILL_POINTS), help="kill: points")
    parser.add_argument("--slow-clients", type=int, default=20, help="slow: connections held open")
    parser.add_argument("--requests", type=int, default=10, help="slow: normal requests sent meanwhile")
    parser.add_argument("--request-every", type=float, default=1.0, help="slow: seconds between normal requests")
    parser.add_argument("--outage", type=float, default=10.0, help="outage: seconds the API server is down")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds any one wait may take")
    args = parser.parse_args()
    chosen = [f.strip() for f in args.only.split(",") if f.strip()]
    if unknown := set(chosen) - set(FAULTS):
        parser.error(f"--only: unknown fault(s) {', '.join(sorted(unknown))}; choose from {','.join(FAULTS)}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": REGION}
    runners = {"kill": run_kill, "leader": run_leader, "poison": run_poison, "slow": run_slow, "malformed": run_malformed,
               "outage": run_outage}
    for fault in FAULTS:
        if fault in chosen:
            runners[fault](args, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
