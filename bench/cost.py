"""What default plans cost under the cost model (docs/cost.md), and how near the bound the optimiser gets.

Part 1, realistic inputs on the `aws` catalog with default flags: the seeds' `inflate` (10 pods of 1 cpu / 1Gi),
a mix (a DaemonSet of 200m/256Mi, 30 zone-spread web pods, 3 anti-affine db pods, 2 GPU pods), 10,000 pods
of 100m/128Mi and 500 pods of 71 distinct shapes (deployments of random requests). Each is planned three ways
and reported with nodes, list $/h and true $/h:

- default: `karpy plan` as shipped (the first fit, then the optimiser);
- greedy: Karpenter v0.16's packing alone (the first fit, no optimiser);
- dense: the plan with the fewest nodes (planned with a large per-node cost, then priced without it).

The default plan's true cost must be no more than either (`ok`).

Part 2, Karpenter's diverse benchmark (bench/scheduling.py's generator) over several draws (seeds) and sizes on
fake-400: each draw's true cost over the LP bound (bound.py), the mean and worst ratio, and the whole
`karpy plan` process's seconds (target: at most 1.05 on every draw, 15 s).

Part 3, the controller's way: a batch planned in chunks (Scheduler.solve with on_decided, the first chunk of
FIRST_CHUNK_PODS), each chunk's nodes handed over before the next is planned, against the same batch planned at
once: 1,000 pods of the diverse benchmark over the draws, and 1,000 pods of deployments of random requests
(`aws`), with the mean and worst ratio of chunked to whole. Neither has `--packing-budget-seconds`, but the first
chunk keeps its own cap (FIRST_CHUNK_SECONDS, 0.2 s), so these figures move a little with the machine's load.

    python3 bench/cost.py [--sizes 1000,5000,20000] [--seeds 10] [--skip-mixes] [--skip-diverse] [--skip-chunks]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scheduling import PROVISIONER, bound_of, diverse_pods
from karpy.commands import native_stdout_to_stderr
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.controller.provisioning.scheduling.scheduler import PlannedNode, Scheduler
from karpy.plan.inputs import load
from karpy.plan.render import plan_json

DENSE_NODE_COST = 10.0                  # $/h per node: far above any saving from splitting a node


def workload(name: str, replicas: int, cpu: str, memory: str, **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": name, "image": "pause", "resources": {
                                      "requests": {"cpu": cpu, "memory": memory, **spec.pop("extra", {})}}}], **spec}}}}


def inflate() -> list[dict[str, Any]]:
    return [PROVISIONER, workload("inflate", 10, "1", "1Gi")]


def mix() -> list[dict[str, Any]]:
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
                  "metadata": {"labels": {"app": "agent"}},
                  "spec": {"containers": [{"name": "agent", "image": "pause",
                                           "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}}}]}}}}
    return [PROVISIONER, daemon, workload("web", 30, "500m", "512Mi", topologySpreadConstraints=spread),
            workload("db", 3, "2", "8Gi", affinity=apart),
            workload("train", 2, "4", "16Gi", extra={"nvidia.com/gpu": "1"})]


def small_pods() -> list[dict[str, Any]]:
    return [PROVISIONER, workload("small", 10000, "100m", "128Mi")]


def many_shapes(size: int = 500, seed: int = 1) -> list[dict[str, Any]]:
    """`size` pods in deployments of 1 to 20 replicas, each of its own cpu (50m steps) and memory (64Mi steps): as
    many distinct shapes as a real cluster's workloads have (500 pods: 71)."""
    rng = random.Random(seed)
    docs, left = [PROVISIONER], size
    while left:
        replicas = min(left, rng.choice([1, 2, 3, 5, 10, 20]))
        docs.append(workload(f"w{len(docs)}", replicas, f"{rng.randrange(50, 4000, 50)}m", f"{rng.randrange(64, 8192, 64)}Mi"))
        left -= replicas
    return docs


def plan(path: Path, *, optimize: bool = True, node_cost: float = 0.0) -> tuple[dict[str, Any], float]:
    loaded = load([str(path)], catalog="aws")
    started = time.perf_counter()
    results = Scheduler(loaded.snapshot, packing=PackingOptions(optimize=optimize, node_cost_per_hour=node_cost)).solve()
    return plan_json(results), time.perf_counter() - started


def mixes() -> bool:
    print(f"{'input':<22} {'plan':<8} {'nodes':>6} {'list $/h':>10} {'true $/h':>10} {'seconds':>8}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, docs in (("inflate (10 x 1 cpu)", inflate()), ("mix (35 pods + DS)", mix()),
                           ("10,000 x 100m/128Mi", small_pods()), ("500 pods, 71 shapes", many_shapes())):
            path = Path(tmp) / "input.yaml"
            path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
            default, seconds = plan(path)
            greedy, greedy_seconds = plan(path, optimize=False)
            dense, dense_seconds = plan(path, node_cost=DENSE_NODE_COST)
            costs = {}
            for label, doc, took, extra in (("default", default, seconds, 0.0), ("greedy", greedy, greedy_seconds, 0.0),
                                            ("dense", dense, dense_seconds, DENSE_NODE_COST)):
                s = doc["summary"]
                costs[label] = s["costPerHour"] - extra * s["newNodes"]
                left = s["pods"] - s["scheduled"]
                print(f"{name:<22} {label:<8} {s['newNodes']:>6} {s['pricePerHour']:>10.4f} {costs[label]:>10.4f} {took:>8.2f}"
                      + (f"  ({left} unschedulable)" if left else ""))
            fine = costs["default"] <= min(costs["greedy"], costs["dense"]) + 1e-6
            ok = ok and fine
            print(f"{name:<22} {'ok' if fine else 'DEARER than greedy or dense'}")
            sys.stdout.flush()
    return ok


def diverse(sizes: list[int], seeds: int) -> bool:
    print(f"{'pods':>6} {'seed':>5} {'nodes':>6} {'true $/h':>10} {'bound':>10} {'ratio':>6} {'seconds':>8}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            ratios, times = [], []
            for seed in range(1, seeds + 1):
                path = Path(tmp) / "pods.yaml"
                path.write_text(yaml.safe_dump_all([PROVISIONER] + diverse_pods(size, seed), sort_keys=False))
                started = time.perf_counter()
                out = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "--catalog", "fake-400",
                                      "-o", "json"], capture_output=True, text=True, check=True)
                seconds = time.perf_counter() - started
                summary = json.loads(out.stdout)["summary"]
                bound = bound_of(load([str(path)], catalog="fake-400").snapshot)
                ratio = summary["costPerHour"] / bound
                ratios.append(ratio)
                times.append(seconds)
                print(f"{size:>6} {seed:>5} {summary['newNodes']:>6} {summary['costPerHour']:>10.2f} {bound:>10.2f} "
                      f"{ratio:>6.3f} {seconds:>8.2f}")
                sys.stdout.flush()
            ok = ok and max(ratios) <= 1.05
            print(f"{size:>6} draws {len(ratios)}: ratio mean {sum(ratios) / len(ratios):.3f}, worst {max(ratios):.3f}; "
                  f"seconds mean {sum(times) / len(times):.1f}, worst {max(times):.1f}")
    return ok


def shapes(seed: int, size: int) -> list[dict[str, Any]]:
    """`size` pods in deployments of 5 to 100 replicas, each of its own random cpu and memory."""
    rng = random.Random(seed)
    docs, left = [PROVISIONER], size
    while left:
        replicas = min(left, rng.choice([5, 10, 20, 50, 100]))
        docs.append(workload(f"w{len(docs)}", replicas, f"{rng.choice([100, 250, 500, 1000, 2000])}m",
                             f"{rng.choice([128, 256, 512, 1024, 4096])}Mi"))
        left -= replicas
    return docs


def hand_over(handed: list[list[PlannedNode]], nodes: list[PlannedNode]) -> bool:
    handed.append(nodes)
    return True


def chunks(seeds: int) -> None:
    print(f"{'input':<22} {'seed':>5} {'whole $/h':>10} {'chunked $/h':>12} {'ratio':>6} {'chunks':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, catalog, draw in (("diverse 1,000", "fake-400", lambda seed: [PROVISIONER] + diverse_pods(1000, seed)),
                                    ("shapes 1,000", "aws", lambda seed: shapes(seed, 1000))):
            ratios = []
            for seed in range(1, seeds + 1):
                path = Path(tmp) / "pods.yaml"
                path.write_text(yaml.safe_dump_all(draw(seed), sort_keys=False))
                handed: list[list[PlannedNode]] = []
                with native_stdout_to_stderr():          # HiGHS's stray debug line (see karpy plan)
                    whole = Scheduler(load([str(path)], catalog=catalog).snapshot).solve()
                    chunked = Scheduler(load([str(path)], catalog=catalog).snapshot).solve(
                        on_decided=functools.partial(hand_over, handed))
                assert not whole.unschedulable and not chunked.unschedulable
                at_once = sum(n.cost_per_hour for n in whole.new_nodes)
                in_chunks = sum(n.cost_per_hour for n in chunked.new_nodes)
                ratios.append(in_chunks / at_once)
                print(f"{name:<22} {seed:>5} {at_once:>10.2f} {in_chunks:>12.2f} {ratios[-1]:>6.3f} {len(handed):>7}")
                sys.stdout.flush()
            print(f"{name:<22} draws {len(ratios)}: chunked/whole mean {sum(ratios) / len(ratios):.3f}, worst {max(ratios):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--seeds", type=int, default=10, help="draws of the diverse benchmark per size (seeds 1..N)")
    parser.add_argument("--skip-mixes", action="store_true")
    parser.add_argument("--skip-diverse", action="store_true")
    parser.add_argument("--skip-chunks", action="store_true")
    args = parser.parse_args()
    ok = True
    if not args.skip_mixes:
        ok = mixes() and ok
    if not args.skip_diverse:
        ok = diverse([int(s) for s in args.sizes.split(",")], args.seeds) and ok
    if not args.skip_chunks:
        chunks(args.seeds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
