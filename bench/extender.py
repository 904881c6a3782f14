"""Latency of `karpy extender` on filter and prioritize calls as kube-scheduler makes them.

Starts `karpy sim` (API only) holding N ready Nodes (half of them karpy's,
some due for removal, some launched for pending pods) and pods bound to them,
then `karpy extender --kubeconfig` watching it. One client (kube-scheduler
calls an extender one pod at a time) sends filter and prioritize calls for
--seconds each, in three modes: N names (`NodeNames`, nodeCacheCapable:
true), N full Node objects (`Nodes`, nodeCacheCapable: false) as
kube-scheduler resends them while they do not change, and N full Nodes of
which one changed since the previous call (`Nodes~1`). It prints calls/s,
p50, p99 and max latency, the request size, the extender's CPU time per call
(which, unlike latency, does not grow with what else runs on the machine),
and the machine's load average (1 min) at the end of each row: client and
server share the machine's cores with whatever else runs, so read the
latencies with the load.

    python3 bench/extender.py [--nodes 100,1000,5000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cluster_with_crds, cpu_seconds, free_port, stop_all
from karpy.kubeclient.raw import path_of


def node(i: int) -> dict[str, Any]:
    """A Node as big as a real one: labels, taints, addresses, conditions, images."""
    ours = i % 2 == 0
    labels = {"kubernetes.io/hostname": f"ip-10-0-{i // 250}-{i % 250}.ec2.internal", "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.2xlarge",
              "topology.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}", "topology.kubernetes.io/region": "us-east-1",
              "karpenter.sh/capacity-type": "on-demand", "karpenter.k8s.aws/instance-family": "m5",
              "karpenter.k8s.aws/instance-cpu": "8", "karpenter.k8s.aws/instance-memory": "32768"}
    annotations = {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    if ours:
        labels.update({"karpenter.sh/provisioner-name": "default", "karpenter.sh/initialized": "true"})
        if i % 10 == 0:
            annotations["karpenter.sh/emptiness-timestamp"] = "2020-01-01T00:00:00Z"     # due for removal
        if i % 10 == 2:
            annotations["karpy.dev/launched-for"] = f"default/waiting-{i}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": f"node-{i}", "labels": labels, "annotations": annotations},
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32386148Ki", "pods": "58", "ephemeral-storage": "83873772Ki"},
            "allocatable": {"cpu": "7910m", "memory": "31369316Ki", "pods": "58", "ephemeral-storage": "76224326324"},
            "conditions": [{"type": t, "status": "True" if t == "Ready" else "False", "reason": f"Kubelet{t}",
                            "lastHeartbeatTime": "2026-11-23T10:00:00Z", "lastTransitionTime": "2026-11-23T09:00:00Z",
                            "message": f"kubelet reports {t}"} for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                          {"type": "Hostname", "address": labels["kubernetes.io/hostname"]},
                          {"type": "InternalDNS", "address": labels["kubernetes.io/hostname"]}],
            "nodeInfo": {"machineID": f"{i:032x}", "systemUUID": f"ec2{i:029x}", "bootID": f"{i:032x}",
                         "kernelVersion": "5.10.198-187.748.amzn2.x86_64", "osImage": "Amazon Linux 2",
                         "containerRuntimeVersion": "containerd://1.6.19", "kubeletVersion": "v1.29.0-eks-5e0fdde",
                         "kubeProxyVersion": "v1.29.0-eks-5e0fdde", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [f"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/image-{k}@sha256:{k:064x}",
                                  f"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/image-{k}:v1.{k}"],
                        "sizeBytes": 10_000_000 + k} for k in range(6)],
        },
    }


def pod(name: str, node_name: str | None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"schedulerName": "none", **({"nodeName": node_name} if node_name else {}),
                     "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}


def measure(port: int, path: str, bodies: itertools.cycle[bytes] | list[bytes], seconds: float) -> tuple[int, list[float]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    for body in itertools.cycle(bodies) if isinstance(bodies, list) else bodies:
        if time.monotonic() >= deadline:
            break
        started = time.perf_counter()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            raise SystemExit(f"{path}: HTTP {response.status}: {data[:200]!r}")
    conn.close()
    return len(latencies), latencies


def changing(body: bytes, marker: bytes) -> itertools.cycle[bytes]:
    """The same request again and again with one Node's label different each time (a Node that changed)."""
    variants = [body.replace(marker, f"{k:0{len(marker)}d}".encode()) for k in range(64)]
    return itertools.cycle(variants)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="karpy-extender-bench-"))
    kubeconfig, api_port, ext_port = work / "kubeconfig", free_port(), free_port()
    processes = [subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(api_port), "--kubeconfig-out",
                                   str(kubeconfig), "--system-nodes", "0", "--no-controllers"],
                                  stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)]
    try:
        client = cluster_with_crds(kubeconfig)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), {
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
            "spec": {"ttlSecondsAfterEmpty": 30, "ttlSecondsUntilExpired": 2592000}})
        nodes = [node(i) for i in range(max(sizes))]
        for i, n in enumerate(nodes):
            client.create(path_of("v1", "nodes"), n)
            if i % 10 == 2:
                client.create(path_of("v1", "pods", "default"), pod(f"waiting-{i}", None))
            for k in range(2):
                client.create(path_of("v1", "pods", "default"), pod(f"app-{i}-{k}", n["metadata"]["name"]))
        processes.append(subprocess.Popen([sys.executable, "-m", "karpy.main", "extender", "--port", str(ext_port),
                                           "--kubeconfig", str(kubeconfig)],
                                          stdout=open(work / "extender.log", "w"), stderr=subprocess.STDOUT))
        for _ in range(300):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", ext_port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        incoming = pod("incoming", None)
        print(f"karpy extender, 1 worker x 32 threads, watching {len(nodes)} nodes and {len(nodes) * 2} bound pods; "
              f"one client, {args.seconds:.0f} s per row, {os.cpu_count()} core(s)")
        print(f"{'nodes':>6} {'mode':>9} {'verb':>10} {'body MB':>8} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'max ms':>7} {'cpu ms':>7} {'load':>5}")
        marker = b"9" * 12
        for size in sizes:
            subset = nodes[:size]
            for mode in ("NodeNames", "Nodes", "Nodes~1"):
                full = mode != "NodeNames"
                items = [dict(n) for n in subset]
                if mode == "Nodes~1":
                    items[0] = json.loads(json.dumps(items[0]))
                    items[0]["metadata"]["labels"]["bench/version"] = marker.decode()
                extender_args = {"Pod": incoming,
                                 "Nodes": {"apiVersion": "v1", "kind": "NodeList", "items": items} if full else None,
                                 "NodeNames": [n["metadata"]["name"] for n in subset] if not full else None}
                body = json.dumps(extender_args).encode()
                for verb in ("filter", "prioritize"):
                    bodies = changing(body, marker) if mode == "Nodes~1" else [body]
                    cpu_before = cpu_seconds(processes[-1].pid)
                    count, latencies = measure(ext_port, f"/scheduler/{verb}", bodies, args.seconds)
                    cpu_ms = (cpu_seconds(processes[-1].pid) - cpu_before) / count * 1000
                    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
                    print(f"{size:6d} {mode:>9} {verb:>10} {len(body) / 1e6:8.2f} {count / args.seconds:8.1f} "
                          f"{cuts[49]:7.2f} {cuts[98]:7.2f} {max(latencies):7.2f} {cpu_ms:7.2f} {os.getloadavg()[0]:5.1f}",
                          flush=True)
        print(json.dumps({"logs": str(work)}))
        return 0
    finally:
        stop_all(processes)


if __name__ == "__main__":
    sys.exit(main())
