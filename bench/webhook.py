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
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
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


# The earlier version (commit 1870b78, an http.client load generator: 8 client processes, 2 workers x 8
# threads): path -> (requests/s, p99 ms, load average when measured)
BEFORE = {"validate": (1432, 19.4, None), "mutate": (1610, 18.0, None)}


def run(args: argparse.Namespace, path_name: str, port: int, ca: str, server_pid: int, *, warmup: bool = False) -> None:
    requests = [load.request_bytes(PATHS[path_name], review_body(PATHS[path_name])) for _ in range(16)]
    cpu_before = cpu_seconds(server_pid)
    result = load.run(port, requests, clients=args.clients, seconds=1 if warmup else args.seconds, ca=ca,
                      expect=b'"allowed":true')
    cpu = cpu_seconds(server_pid) - cpu_before
    if warmup:
        return
    if not result.latencies:
        raise SystemExit(f"{path_name}: no answer; {result.errors} error(s), first: {result.first_error}")
    row = result.summary(args.seconds)
    met = row["rate"] >= 3000 and row["p99"] <= 10
    count = len(result.latencies)
    before = BEFORE.get(path_name)
    print(f"{path_name:<12} {row['rate']:>9.0f} {row['p50']:>9.2f} {row['p99']:>9.2f} {row['max']:>9.2f} {count:>9} "
          f"{result.errors:>7} {cpu / count * 1e6:>7.0f} {result.cpu / count * 1e6:>7.0f} {os.getloadavg()[0]:>5.1f} "
          f"{f'{before[0]}/s {before[1]}' if before else '':>13} {'met' if met else 'MISSED':>7}", flush=True)


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
        print("srv/cli cpu: CPU microseconds per request of the webhook (all its processes) and of the load generator;"
              " before: the earlier version's requests/s and p99 ms (BEFORE in this file); target: >= 3,000/s with p99 <= 10 ms")
        print(f"{'path':<12} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'requests':>9} {'errors':>7} "
              f"{'srv cpu':>7} {'cli cpu':>7} {'load':>5} {'before':>13} {'target':>7}")
        run(args, "validate", port, ca, server.pid, warmup=True)  # connections, caches, first-request imports
        for name in PATHS:
            run(args, name, port, ca, server.pid)
    finally:
        stop_all([server])
    return 0


if __name__ == "__main__":
    sys.exit(main())
