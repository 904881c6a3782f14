"""The whole autoscaler on the local cluster: a burst of pending pods, then scale-down; and memory at scale.

Phase 1: `karpy sim` (1 system node, 2 s boot delay) and `karpy controller`
(fake provider, aws catalog) run as processes; five Deployments of mixed
shapes (cpu 250m..2, memory 256Mi..4Gi, one spread over zones, and 2% with
hostname anti-affinity) scale from 0 to --pods pods at once. Printed: time
from the scale-up to the first node karpy launched, to every pod bound (karpy
binds at launch, so the boot delay is not in it), nodes launched and their
$/h; then, after the Deployments are deleted, the time until every empty node
is gone (ttlSecondsAfterEmpty 5).

Phase 2: 1,000 ready nodes and 10,000 pods bound to them are written to the
cluster while the controller watches; the controller's peak memory is
printed.

    python3 bench/e2e.py [--pods 1000] [--memory-pods 10000] [--memory-nodes 1000]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from karpy.apis import labels as wk  # noqa: E402
from karpy.apis.crds import definitions  # noqa: E402
from bench.measure import free_port, peak_rss_mib  # noqa: E402
from karpy.kubeclient.raw import Informer, RawClient, api_client, path_of  # noqa: E402

SHAPES = [
    ("small", "250m", "256Mi", {}),
    ("medium", "500m", "1Gi", {}),
    ("large", "2", "4Gi", {}),
    ("spread", "1", "2Gi", {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                          "whenUnsatisfiable": "DoNotSchedule",
                                                          "labelSelector": {"matchLabels": {"app": "spread"}}}]}),
    ("solo", "1", "1Gi", {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "solo"}}}]}}}),
]


def karpy_nodes(client: RawClient) -> list[dict[str, Any]]:
    return [n for n in client.get(path_of("v1", "nodes"))["items"] if "karpenter.sh/provisioner-name" in (n["metadata"].get("labels") or {})]


def deployment(name: str, cpu: str, memory: str, extra: dict[str, Any], replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 0, **extra,
                         "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--memory-pods", type=int, default=10_000)
    parser.add_argument("--memory-nodes", type=int, default=1000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="karpy-e2e-"))
    kubeconfig = work / "kubeconfig"
    port = free_port()
    processes = [subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out", str(kubeconfig),
                                   "--system-nodes", "1", "--boot-delay", "2"], stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)]
    try:
        for _ in range(100):
            if kubeconfig.exists():
                break
            time.sleep(0.1)
        api = api_client(str(kubeconfig))
        client = RawClient(api)
        for _ in range(100):
            try:
                client.get("/version")
                break
            except Exception:
                time.sleep(0.1)
        for crd in definitions().values():
            client.create(path_of("apiextensions.k8s.io/v1", "customresourcedefinitions"), crd)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), {
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
            "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                                      {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                     "ttlSecondsAfterEmpty": 5}})
        controller = subprocess.Popen([sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig),
                                       "--cloud-provider", "fake", "--metrics-port", "0", "--health-port", "0"],
                                      stdout=open(work / "controller.log", "w"), stderr=subprocess.STDOUT)
        processes.append(controller)
        time.sleep(2)
        solo = max(1, args.pods // 50)              # pods that each need a node of their own
        per = (args.pods - solo) // (len(SHAPES) - 1)
        for name, cpu, memory, extra in SHAPES:
            client.create(path_of("apps/v1", "deployments", "default"), deployment(name, cpu, memory, extra, 0))
        pods_seen, nodes_seen = Informer(client, "v1", "pods").start(), Informer(client, "v1", "nodes").start()
        pods_seen.synced.wait(10)
        nodes_seen.synced.wait(10)
        marks: list[float] = []            # when each pod was first seen PodScheduled=False

        def on_pod(kind: str, pod: dict[str, Any]) -> None:
            uid = pod["metadata"]["uid"]
            if uid not in marked and any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                         for c in (pod.get("status") or {}).get("conditions") or []):
                marked.add(uid)
                marks.append(time.monotonic())
        marked: set[str] = set()
        pods_seen.handlers.append(on_pod)
        started = time.monotonic()
        for i, (name, *_rest) in enumerate(SHAPES):
            replicas = solo if name == "solo" else per if i < len(SHAPES) - 2 else args.pods - solo - per * (len(SHAPES) - 2)
            client.patch(path_of("apps/v1", "deployments", "default", name, "scale"), {"spec": {"replicas": replicas}})
        first_launch = None
        all_bound = None
        deadline = started + 180
        while time.monotonic() < deadline:
            if first_launch is None and any("karpenter.sh/provisioner-name" in (n["metadata"].get("labels") or {})
                                            for n in nodes_seen.items()):
                first_launch = time.monotonic()
            pods = pods_seen.items()
            if len(pods) >= args.pods and all(p["spec"].get("nodeName") for p in pods):
                all_bound = time.monotonic() - started
                break
            time.sleep(0.02)
        pods_seen.stop()
        nodes_seen.stop()
        nodes = karpy_nodes(client)
        price = sum(float((n["metadata"].get("annotations") or {}).get(wk.PRICE_PER_HOUR, 0)) for n in nodes)
        types: dict[str, int] = {}
        for n in nodes:
            t = n["metadata"]["labels"].get("node.kubernetes.io/instance-type", "?")
            types[t] = types.get(t, 0) + 1
        pods = client.get(path_of("v1", "pods", "default"))["items"]
        on_system = sum(1 for p in pods if p["spec"].get("nodeName") == "system-0")
        print(f"burst of {args.pods} pending pods in 5 deployments (mixed shapes, zone spread, {solo} with hostname anti-affinity)")
        if marks:
            print(f"pods marked Unschedulable {len(marks):7d}   first {marks[0] - started:.2f} s, last {marks[-1] - started:.2f} s after the scale-up")
        if first_launch and marks:
            print(f"first node launched      {first_launch - started:8.2f} s after the scale-up; "
                  f"{first_launch - marks[0]:.2f} s after the first pending pod, {first_launch - marks[-1]:.2f} s after the last "
                  "(batch idle 1 s, max 10 s)")
        else:
            print("first node launched   never")
        print(f"all pods bound           {all_bound:8.2f} s" if all_bound else "all pods bound        not within 180 s")
        print(f"nodes launched           {len(nodes):8d}   ({', '.join(f'{c} {t}' for t, c in sorted(types.items()))})")
        print(f"pods on the system node  {on_system:8d}")
        print(f"karpy nodes $/h          {price:8.3f}")
        deleted = time.monotonic()
        for name, *_rest in SHAPES:
            client.delete(path_of("apps/v1", "deployments", "default", name))
        gone = None
        while time.monotonic() < deleted + 180:
            if not karpy_nodes(client):
                gone = time.monotonic() - deleted
                break
            time.sleep(0.2)
        print(f"empty nodes gone         {gone:8.2f} s after deleting the deployments (ttlSecondsAfterEmpty 5)" if gone
              else "empty nodes gone      not within 180 s")
        print(f"controller peak memory   {peak_rss_mib(controller.pid):8.0f} MiB (phase 1)")

        # phase 2: memory with many objects
        def make_node(i: int) -> None:
            client.create(path_of("v1", "nodes"), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"static-{i}",
                          "labels": {"kubernetes.io/hostname": f"static-{i}"}},
                          "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                                     "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                                     "conditions": [{"type": "Ready", "status": "True"}]}})

        def make_pod(i: int) -> None:
            client.create(path_of("v1", "pods", "default"), {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": f"bound-{i}", "namespace": "default", "labels": {"app": f"a{i % 100}"}},
                          "spec": {"nodeName": f"static-{i % args.memory_nodes}", "containers": [
                              {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})

        t = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(make_node, range(args.memory_nodes)))
            list(pool.map(make_pod, range(args.memory_pods)))
        time.sleep(5)                       # let the controller's caches take it all in
        print(f"controller peak memory   {peak_rss_mib(controller.pid):8.0f} MiB with {args.memory_pods} pods and "
              f"{args.memory_nodes} nodes (written in {time.monotonic() - t:.1f} s)")
        api.close()
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
    print(json.dumps({"logs": str(work)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
