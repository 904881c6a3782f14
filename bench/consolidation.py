"""Consolidation on the local cluster: grow for a peak, scale down by 70%, and see what it costs after.

`karpy sim` (1 system node, 1 s boot delay) and `karpy controller` (fake
provider, aws catalog, a provisioner with consolidation enabled, on-demand)
run as processes; instance types have at most 16 vCPUs. Three Deployments of mixed shapes, two of them under
PodDisruptionBudgets, scale up to --pods pods; once every pod is bound, each
Deployment is scaled down by 70%. Printed: $/h of karpy's nodes at the peak,
right after the scale-down and once consolidation has converged (nothing
changed for --quiet seconds); the time to converge; the evictions and
actions the controller counted; PDB violations (a budget's healthy pods
below its desired count at any sample: must be 0); and the ratio of the
converged cost to the cost of the same pods packed from scratch by the
scheduling core `karpy plan` uses (target at most 1.15).

    python3 bench/consolidation.py [--pods 300] [--stabilization 5] [--min-node-age 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e import deployment
from bench.measure import cluster_with_crds, free_port, metric, stop_all
from karpy.apis import labels as wk
from karpy.apis.provisioner_validation import decode_provisioner
from karpy.controller.cloudprovider.catalog import built_in
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, Scheduler
from karpy.kubeclient.raw import Informer, path_of

SHAPES = [("web", "500m", "1Gi", 0.5), ("api", "1", "2Gi", 0.3), ("batch", "2", "4Gi", 0.2)]   # name, cpu, memory, share
PDBS: dict[str, dict[str, Any]] = {"web": {"maxUnavailable": 1}, "api": {"minAvailable": "80%"}}
PROVISIONER = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
               "spec": {"requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                         {"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
                                         # at most 16 vCPUs, so the peak needs many nodes, as sized clusters do
                                         {"key": wk.AWS_INSTANCE_CPU, "operator": "Lt", "values": ["17"]}],
                        "consolidation": {"enabled": True}}}


def price_of(nodes: list[dict[str, Any]]) -> float:
    return sum(float((n["metadata"].get("annotations") or {}).get(wk.PRICE_PER_HOUR, 0)) for n in nodes
               if wk.PROVISIONER_NAME in (n["metadata"].get("labels") or {}))


def fresh_cost(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> float:
    """What the same pods cost packed from scratch: the non-karpy nodes as they are, every other pod pending."""
    provisioner, _ = decode_provisioner(PROVISIONER)
    assert provisioner is not None
    system = [n for n in nodes if wk.PROVISIONER_NAME not in (n["metadata"].get("labels") or {})]
    names = {n["metadata"]["name"] for n in system}
    infos = []
    for p in pods:
        raw = {**p, "spec": dict(p["spec"])}
        if raw["spec"].get("nodeName") not in names:
            raw["spec"].pop("nodeName", None)
        infos.append(PodInfo.parse(raw))
    results = Scheduler(ClusterSnapshot([provisioner], built_in("aws"), system, infos)).solve()
    assert not results.unschedulable, results.unschedulable
    return sum(n.offering.price_per_hour for n in results.new_nodes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--stabilization", type=float, default=5.0, help="the controller's --consolidation-stabilization")
    parser.add_argument("--min-node-age", type=float, default=5.0, help="the controller's --consolidation-min-node-age")
    parser.add_argument("--quiet", type=float, default=45.0, help="seconds without a change that count as converged")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="karpy-consolidation-"))
    kubeconfig = work / "kubeconfig"
    port, metrics_port = free_port(), free_port()
    processes = [subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out",
                                   str(kubeconfig), "--system-nodes", "1", "--boot-delay", "1"],
                                  stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)]
    try:
        client = cluster_with_crds(kubeconfig)
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), PROVISIONER)
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "fake",
             "--metrics-port", str(metrics_port), "--health-port", "0",
             "--consolidation-stabilization", str(args.stabilization), "--consolidation-min-node-age", str(args.min_node_age)],
            stdout=open(work / "controller.log", "w"), stderr=subprocess.STDOUT))
        pods_seen, nodes_seen = Informer(client, "v1", "pods").start(), Informer(client, "v1", "nodes").start()
        pdbs_seen = Informer(client, "policy/v1", "poddisruptionbudgets").start()
        for informer in (pods_seen, nodes_seen, pdbs_seen):
            informer.synced.wait(10)
        peak = {name: max(1, int(args.pods * share)) for name, _, _, share in SHAPES}
        for name, cpu, memory, _ in SHAPES:
            d = deployment(name, cpu, memory, {}, peak[name])
            client.create(path_of("apps/v1", "deployments", "default"), d)
            if name in PDBS:
                client.create(path_of("policy/v1", "poddisruptionbudgets", "default"), {
                    "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
                    "spec": {**PDBS[name], "selector": {"matchLabels": {"app": name}}}})
        total = sum(peak.values())

        def all_bound() -> bool:
            pods = [p for p in pods_seen.items() if not p["metadata"].get("deletionTimestamp")]
            return len(pods) >= total and all(p["spec"].get("nodeName") for p in pods)
        deadline = time.monotonic() + 300
        while not all_bound() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not all_bound():
            print("the peak was never fully bound within 300 s")
            return 1
        time.sleep(3)
        peak_nodes = [n for n in nodes_seen.items() if wk.PROVISIONER_NAME in n["metadata"].get("labels", {})]
        peak_price = price_of(nodes_seen.items())

        violations: list[str] = []
        stop = threading.Event()

        def watch_budgets() -> None:
            while not stop.is_set():
                for pdb in pdbs_seen.items():
                    status = pdb.get("status") or {}
                    if status.get("currentHealthy", 0) < status.get("desiredHealthy", 0):
                        violations.append(f"{pdb['metadata']['name']}: {status}")
                time.sleep(0.1)
        threading.Thread(target=watch_budgets, daemon=True).start()

        scaled_down = time.monotonic()
        left = {name: max(1, round(count * 0.3)) for name, count in peak.items()}
        for name, count in left.items():
            client.patch(path_of("apps/v1", "deployments", "default", name, "scale"), {"spec": {"replicas": count}})
        remaining = sum(left.values())
        time.sleep(3)
        after_scale_down = price_of(nodes_seen.items())
        last_change, signature = time.monotonic(), None
        while time.monotonic() - last_change < args.quiet and time.monotonic() - scaled_down < 900:
            nodes = nodes_seen.items()
            now = (tuple(sorted(n["metadata"]["name"] for n in nodes)),
                   sum(1 for n in nodes if n["metadata"].get("deletionTimestamp")))
            pods = [p for p in pods_seen.items() if not p["metadata"].get("deletionTimestamp")]
            settled = len(pods) == remaining and all(p["spec"].get("nodeName") for p in pods) and not now[1]
            if now != signature or not settled:
                signature, last_change = now, time.monotonic()
            time.sleep(0.5)
        stop.set()
        converged = last_change - scaled_down
        final_nodes = nodes_seen.items()
        final_price = price_of(final_nodes)
        pods = [p for p in pods_seen.items() if not p["metadata"].get("deletionTimestamp")]
        fresh = fresh_cost(final_nodes, pods)
        evictions = metric(metrics_port, "karpy_evictions_total")
        actions = metric(metrics_port, "karpy_consolidation_actions_performed_total")
        cancelled = metric(metrics_port, "karpy_consolidation_actions_cancelled_total")
        karpy_final = [n for n in final_nodes if wk.PROVISIONER_NAME in n["metadata"].get("labels", {})]
        print(f"peak: {total} pods in 3 deployments (PDBs: web maxUnavailable 1, api minAvailable 80%); "
              f"scale-down to {remaining} pods; stabilization {args.stabilization:g} s, min node age {args.min_node_age:g} s")
        print(f"karpy nodes $/h at peak        {peak_price:8.3f}   ({len(peak_nodes)} nodes)")
        print(f"  right after scale-down       {after_scale_down:8.3f}")
        print(f"  after consolidation          {final_price:8.3f}   ({len(karpy_final)} nodes)")
        print(f"time to converge               {converged:8.1f} s after the scale-down (then {args.quiet:g} s without change)")
        evicted, blocked = (int(evictions.get(f'{{result="{r}"}}', 0)) for r in ("evicted", "blocked"))
        print(f"evictions                      {evicted:8d}   (blocked by a PDB and retried: {blocked})")
        print(f"actions                        {', '.join(f'{k} {int(v)}' for k, v in sorted(actions.items())) or 'none'}"
              f"; cancelled on re-validation: {int(sum(cancelled.values()))}")
        print(f"PDB violations                 {len(violations):8d}")
        print(f"packed from scratch $/h        {fresh:8.3f}")
        print(f"ratio after / from scratch     {final_price / fresh if fresh else float('inf'):8.3f}   (target at most 1.15)")
        for line in violations[:5]:
            print("  violation:", line)
        return 0
    finally:
        stop_all(processes)


if __name__ == "__main__":
    sys.exit(main())
