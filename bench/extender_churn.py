"""The scheduler extender on the local cluster: churn with nodes expiring, with and without the extender.

Each run starts `karpy sim` (boot delay 1 s) and `karpy controller` (fake
provider, aws catalog) as processes; with the extender, the local cluster's
scheduler reads manifests/extender/scheduler-config.yaml and calls
`karpy extender --kubeconfig` over HTTP. The provisioner launches on-demand
nodes of at most 4 vCPUs that expire after --ttl seconds (and go 10 s after
they empty). Deployment `churn` (cpu 1) swings between 10 and 30 pods, two
pods a second up then down, for --seconds seconds: scale-downs leave room on
nodes late in their life and scale-ups fill it, while nodes keep expiring
and draining. Printed per run:

- pods that landed on a node being removed: bound to a node less than 30 s
  (the extender's removal horizon) before the node's deletion began, and
  still on it then, so drained soon after they started;
- time from pod creation to the controller's launch decision: for every node
  karpy launched, the node's creation minus the creation of the earliest pod
  it was launched for (its NodeClaim's `karpy.dev/pods`); p50 and max;
- nodes launched and evictions.

    python3 bench/extender_churn.py [--seconds 90] [--ttl 45]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e import deployment
from bench.measure import cluster_with_crds, free_port, metric, stop_all, wait_for
from karpy.apis import labels as wk
from karpy.apis import launch_record as rec
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import path_of

ROOT = Path(__file__).resolve().parent.parent
HORIZON = 30.0


def run(*, extender: bool, seconds: int, ttl: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="karpy-churn-"))
    kubeconfig = work / "kubeconfig"
    port, extender_port, metrics_port = free_port(), free_port(), free_port()
    sim = [sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out", str(kubeconfig),
           "--system-nodes", "0", "--boot-delay", "1"]
    if extender:
        sim += ["--scheduler-config", str(ROOT / "manifests" / "extender" / "scheduler-config.yaml"),
                "--extender-url", f"http://127.0.0.1:{extender_port}/scheduler"]
    processes = [subprocess.Popen(sim, stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)]
    try:
        client = cluster_with_crds(kubeconfig, timeout=10)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), {
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
            "spec": {"requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                      {"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
                                      {"key": wk.AWS_INSTANCE_CPU, "operator": "Lt", "values": ["5"]}],
                     "ttlSecondsUntilExpired": ttl, "ttlSecondsAfterEmpty": 10}})
        if extender:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "karpy.main", "extender", "--port", str(extender_port), "--kubeconfig", str(kubeconfig)],
                stdout=open(work / "extender.log", "w"), stderr=subprocess.STDOUT))
            wait_for(lambda: urllib.request.urlopen(f"http://127.0.0.1:{extender_port}/healthz", timeout=1).status == 200,
                     30, "the extender")
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "fake",
             "--metrics-port", str(metrics_port), "--health-port", "0"],
            stdout=open(work / "controller.log", "w"), stderr=subprocess.STDOUT))
        pods, nodes = Informer(client, "v1", "pods").start(), Informer(client, "v1", "nodes").start()
        claims = Informer(client, "karpenter.sh/v1", "nodeclaims").start()
        for informer in (pods, nodes, claims):
            informer.synced.wait(10)
        created: dict[str, float] = {}          # pod "ns/name" -> first seen
        bound: list[tuple[str, str, float]] = []  # (pod uid, node, when)
        pod_gone: dict[str, float] = {}           # pod uid -> when it began to go
        node_created: dict[str, float] = {}
        node_deleting: dict[str, float] = {}
        launched_for: dict[str, list[str]] = {}
        seen_bound: set[str] = set()

        def on_pod(kind: str, pod: dict[str, Any]) -> None:
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            created.setdefault(key, time.monotonic())
            uid = pod["metadata"]["uid"]
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                pod_gone.setdefault(uid, time.monotonic())
            node = (pod.get("spec") or {}).get("nodeName")
            if node and uid not in seen_bound:
                seen_bound.add(uid)
                bound.append((uid, node, time.monotonic()))

        def on_node(kind: str, node: dict[str, Any]) -> None:
            name = node["metadata"]["name"]
            node_created.setdefault(name, time.monotonic())
            if node["metadata"].get("deletionTimestamp"):
                node_deleting.setdefault(name, time.monotonic())

        def on_claim(kind: str, claim: dict[str, Any]) -> None:
            name = (claim.get("status") or {}).get("nodeName")
            if name and rec.binds(claim) and rec.pods_of(claim):
                launched_for.setdefault(name, [p.key for p in rec.pods_of(claim)])
        pods.handlers.append(on_pod)
        nodes.handlers.append(on_node)
        claims.handlers.append(on_claim)
        wait_for(lambda: urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).status == 200,
                 30, "the controller")
        client.create(path_of("apps/v1", "deployments", "default"), deployment("churn", "1", "1Gi", {}, 0))
        for i in range(seconds):
            step = i % 20
            replicas = 10 + 2 * (step if step < 10 else 20 - step)
            client.patch(path_of("apps/v1", "deployments", "default", "churn", "scale"), {"spec": {"replicas": replicas}})
            time.sleep(1)
        time.sleep(HORIZON)                       # let the last bindings meet their nodes' removal, if they do
        # on the node when its removal began (not scaled away before), and bound less than HORIZON before
        landed = sum(1 for uid, node, when in bound if node in node_deleting and 0 <= node_deleting[node] - when < HORIZON
                     and pod_gone.get(uid, float("inf")) >= node_deleting[node])
        latencies = sorted(node_created[n] - min(created[p] for p in promised if p in created)
                           for n, promised in launched_for.items() if any(p in created for p in promised))
        figures = {"bindings": len(bound), "landed": landed, "latencies": latencies, "nodes": len(launched_for),
                   "evictions": int(metric(metrics_port, "karpy_evictions_total").get('{result="evicted"}', 0))}
        for informer in (pods, nodes, claims):
            informer.stop()
        return figures
    finally:
        stop_all(processes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120, help="seconds of churn")
    parser.add_argument("--ttl", type=int, default=60, help="the provisioner's ttlSecondsUntilExpired")
    args = parser.parse_args()
    print(f"churn: 10..30 pods (cpu 1), two a second up and down, for {args.seconds} s; "
          f"nodes of at most 4 vCPUs expire after {args.ttl} s")
    print(f"{'':12s} {'bindings':>9s} {'landed on a node being removed':>31s} {'launch decision p50 / max (s)':>30s} "
          f"{'nodes':>6s} {'evictions':>10s}")
    for with_extender in (False, True):
        f = run(extender=with_extender, seconds=args.seconds, ttl=args.ttl)
        lat = f["latencies"]
        shown = f"{lat[len(lat) // 2]:.2f} / {lat[-1]:.2f}" if lat else "-"
        print(f"{'extender' if with_extender else 'no extender':12s} {f['bindings']:9d} {f['landed']:31d} {shown:>30s} "
              f"{f['nodes']:6d} {f['evictions']:10d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
