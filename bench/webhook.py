"""Admission throughput and latency of `karpy webhook` over TLS on this machine.

Starts `karpy webhook` (gunicorn, TLS) on a free loopback port, then runs
concurrent HTTPS clients (several processes, each with keep-alive
connections, as the API server holds them) for --seconds against the
admission paths (Provisioner and AWSNodeTemplate, validate and mutate), and
prints requests/s and latency percentiles per path, the server's CPU time
per request (which, unlike latency, does not grow with what else runs on
the machine), and the machine's load average (1 min) at the end of each
row. The clients share the machine's cores with the server (and with
whatever else runs: read the figures with the load), so the figures are a
floor for what the server alone would do.

    python3 bench/webhook.py [--seconds 20] [--clients 8] [--workers 2] [--threads 32]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cpu_seconds, stop_all

PATHS = {
    "validate": "/validate-karpenter-sh-v1alpha5-provisioner",
    "mutate": "/mutate-karpenter-sh-v1alpha5-provisioner",
    "validate-ant": "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate",
    "mutate-ant": "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate",
}
AWSNODETEMPLATE = {
    "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate",
    "metadata": {"name": "default", "uid": "5b0c3d1e-2f4a-4c8b-9e6d-7a1f2b3c4d5e", "resourceVersion": "99"},
    "spec": {"subnetSelector": {"karpenter.sh/discovery": "my-cluster"},
             "securityGroupSelector": {"karpenter.sh/discovery": "my-cluster"},
             "tags": {"team": "payments"}, "amiFamily": "AL2"},
}
PROVISIONER = {
    "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
    "metadata": {"name": "default", "uid": "0f8e6f64-7a55-4a43-9d6f-1b0d6c1c2e11", "resourceVersion": "1234"},
    "spec": {
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                         {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}],
        "labels": {"team": "payments"},
        "taints": [{"key": "dedicated", "value": "payments", "effect": "NoSchedule"}],
        "limits": {"resources": {"cpu": 1000, "memory": "1000Gi"}},
        "kubeletConfiguration": {"maxPods": 110, "evictionHard": {"memory.available": "5%"}},
        "providerRef": {"name": "default"},
        "ttlSecondsAfterEmpty": 30,
    },
}


def review_body(path: str = PATHS["validate"]) -> bytes:
    if "awsnodetemplate" in path:
        obj, group, version, kind, plural = AWSNODETEMPLATE, "karpenter.k8s.aws", "v1alpha1", "AWSNodeTemplate", "awsnodetemplates"
    else:
        obj, group, version, kind, plural = PROVISIONER, "karpenter.sh", "v1alpha5", "Provisioner", "provisioners"
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "object": obj,
                    "kind": {"group": group, "version": version, "kind": kind},
                    "resource": {"group": group, "version": version, "resource": plural},
                    "userInfo": {"username": "kubernetes-admin"}},
    }).encode()


def client(port: int, ca: str, path: str, deadline: float, out: mp.Queue[tuple[str, list[float], int]]) -> None:
    """One keep-alive HTTPS connection posting reviews until `deadline`; reports latencies."""
    context = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    body = review_body(path)
    headers = {"Content-Type": "application/json"}
    latencies, errors = [], 0
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            ok = response.status == 200 and b'"allowed":true' in data
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        if ok:
            latencies.append(time.perf_counter() - started)
        else:
            errors += 1
    conn.close()
    out.put((path, latencies, errors))


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1] if len(values) > 1 else values[0]


def start_server(workers: int, threads: int) -> tuple[subprocess.Popen[bytes], int, str]:
    certs = Path(tempfile.mkdtemp(prefix="karpy-bench-"))
    subprocess.run([sys.executable, "-m", "karpy.main", "certs", "generate", "--out-dir", str(certs)],
                   check=True, stdout=subprocess.DEVNULL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "karpy.main", "webhook", "--port", str(port), "--cert-dir", str(certs),
         "--workers", str(workers), "--threads", str(threads)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    ca = str(certs / "ca.crt")
    context = ssl.create_default_context(cafile=ca)
    for _ in range(200):
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return server, port, ca
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("karpy webhook did not start")


def run(args: argparse.Namespace, path_name: str, port: int, ca: str, server_pid: int, *, warmup: bool = False) -> None:
    out: mp.Queue[tuple[str, list[float], int]] = mp.Queue()
    cpu_before = cpu_seconds(server_pid)
    deadline = time.monotonic() + (2 if warmup else args.seconds)
    procs = [mp.Process(target=client, args=(port, ca, PATHS[path_name], deadline, out)) for _ in range(args.clients)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    cpu = cpu_seconds(server_pid) - cpu_before
    if warmup:
        return
    latencies = sorted(x for _, lat, _ in results for x in lat)
    errors = sum(e for _, _, e in results)
    rate = len(latencies) / args.seconds
    print(f"{path_name:<12} {rate:>9.0f} {percentile(latencies, 50) * 1000:>9.2f} {percentile(latencies, 99) * 1000:>9.2f} "
          f"{latencies[-1] * 1000:>9.2f} {len(latencies):>9} {errors:>7} {cpu / len(latencies) * 1e6:>7.0f} "
          f"{os.getloadavg()[0]:>5.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=8, help="concurrent keep-alive connections (one process each)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args()
    server, port, ca = start_server(args.workers, args.threads)
    try:
        print(f"karpy webhook: {args.workers} gunicorn worker(s) x {args.threads} thread(s), TLS; "
              f"{args.clients} client connection(s), {args.seconds:.0f} s per path, {os.cpu_count()} core(s)")
        print(f"{'path':<12} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'requests':>9} {'errors':>7} {'cpu us':>7} {'load':>5}")
        run(args, "validate", port, ca, server.pid, warmup=True)  # connections, caches, first-request imports
        for name in PATHS:
            run(args, name, port, ca, server.pid)
    finally:
        stop_all([server])
    return 0


if __name__ == "__main__":
    sys.exit(main())
