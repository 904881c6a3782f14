"""Consolidation at scale, offline: how fast `karpy plan --consolidate` decides, and how close it gets.

Generates clusters of on-demand nodes (m5.xlarge, m5.2xlarge, c5.2xlarge,
r5.xlarge across three zones) left about 30% used after a scale-in: each
node keeps a random share (0-60%) of the pods it had, every pod owned by a
ReplicaSet so it may move. For each size, `karpy plan --consolidate -o json`
runs as a process; printed: its wall time (reading the input included) and
the decision time it reports, the actions by kind, nodes removed and
launched, the pods moved (a pod moved twice counts twice; packing from
scratch moves every pod once) and their disruption cost, $/h before and
after at list prices and as the cost model costs them (docs/cost.md), and
the true cost of packing the same pods from scratch with `karpy plan`
(its `costPerHour`); the ratio compares true costs, the same objective on
both sides (its target is at most 1.05). Targets for
the decision: 1,000 nodes in at most 5 s, 5,000 in at most 30 s.

--steering judges as the controller does with --consolidation-steering
(the drained pods land as planned, not where kube-scheduler's own scores
would put them).

--min-savings-per-pod sets --consolidation-min-savings-per-pod (0 takes
every action that saves anything, moving more pods).

    python3 bench/consolidation_scale.py [--nodes 1000 5000] [--seed 1] [--steering] [--min-savings-per-pod D]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.catalog import built_in

TYPES = ("m5.xlarge", "m5.2xlarge", "c5.2xlarge", "r5.xlarge")
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SHAPES = ((250, 512), (500, 1024), (1000, 2048), (1000, 4096), (2000, 4096), (500, 4096))   # millicpu, MiB
PROVISIONER = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
               "spec": {"requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                         {"key": wk.INSTANCE_TYPE, "operator": "In", "values": list(TYPES)}],
                        "consolidation": {"enabled": True}}}


def cluster(n: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`n` nodes and their bound pods, about 30% used."""
    rng = random.Random(seed)
    types = {t.name: t for t in built_in("aws").instance_types()}
    nodes, pods = [], []
    for i in range(n):
        t = types[TYPES[i % len(TYPES)]]
        zone = ZONES[(i // len(TYPES)) % len(ZONES)]
        name = f"ip-10-{i // 250}-{i % 250}"
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {wk.PROVISIONER_NAME: "default", wk.INSTANCE_TYPE: t.name, wk.ZONE: zone,
                       wk.CAPACITY_TYPE: "on-demand", wk.INITIALIZED: "true", wk.HOSTNAME: name}},
            "status": {"allocatable": t.allocatable.to_manifest(), "capacity": t.capacity.to_manifest()}})
        cpu, memory = t.allocatable["cpu"], t.allocatable["memory"] // 1000 // 2 ** 20
        share = rng.uniform(0.0, 0.6)
        used_cpu = used_memory = 0
        j = misses = 0
        while misses < 8:                      # a few shapes that do not fit: the node is as full as its share
            c, m = rng.choice(SHAPES)
            if (used_cpu + c) > share * cpu or (used_memory + m) > share * memory:
                misses += 1
                continue
            used_cpu, used_memory = used_cpu + c, used_memory + m
            app = f"app-{SHAPES.index((c, m))}"
            pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-{j}", "namespace": "default", "labels": {"app": app},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app, "controller": True,
                                     "uid": app}]},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x", "resources": {
                    "requests": {"cpu": f"{c}m", "memory": f"{m}Mi"}}}]}})
            j += 1
    return nodes, pods


def run_plan(path: Path, *extra: str) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "-o", "json", *extra],
                          capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"karpy plan failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout), elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=None, help="pass --consolidation-budget-seconds")
    parser.add_argument("--steering", action="store_true", help="pass --consolidation-steering")
    parser.add_argument("--min-savings-per-pod", type=float, default=None, help="pass --consolidation-min-savings-per-pod")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="karpy-consolidation-scale-"))
    for n in args.nodes:
        nodes, pods = cluster(n, args.seed)
        path = work / f"cluster-{n}.json"
        path.write_text("\n---\n".join(json.dumps(d) for d in [PROVISIONER, *nodes, *pods]))
        extra = [*(("--consolidation-budget-seconds", str(args.budget)) if args.budget else ()),
                 *(("--consolidation-steering",) if args.steering else ()),
                 *(("--consolidation-min-savings-per-pod", str(args.min_savings_per_pod))
                   if args.min_savings_per_pod is not None else ())]
        plan, wall = run_plan(path, "--consolidate", *extra)
        fresh_path = work / f"fresh-{n}.json"
        for p in pods:
            del p["spec"]["nodeName"]
        fresh_path.write_text("\n---\n".join(json.dumps(d) for d in [PROVISIONER, *pods]))
        fresh, _ = run_plan(fresh_path)
        s = plan["summary"]
        scratch = fresh["summary"]["costPerHour"]
        used = sum(int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"][:-1]) for p in pods) / 1000
        print(f"{n} nodes, {len(pods)} pods, {used:.0f} vCPU requested")
        print(f"  plan --consolidate: {wall:.1f} s wall (decision {s.get('decisionSeconds', float('nan')):.1f} s), "
              f"complete={s['complete']}")
        print(f"  actions: {s['actions']} {s['actionsByKind']}; nodes removed {s['nodesRemoved']}, launched {s['nodesLaunched']}")
        print(f"  pods moved {s['podsMoved']} of {len(pods)} (a full repack moves all), disruption cost {s['disruptionCost']:g}")
        print(f"  list $/h before {s['pricePerHourBefore']:.2f}, after {s['pricePerHourAfter']:.2f}; "
              f"true cost $/h before {s['costPerHourBefore']:.2f}, after {s['costPerHourAfter']:.2f}")
        print(f"  packed from scratch: true cost {scratch:.2f} $/h (list {fresh['summary']['pricePerHour']:.2f}, "
              f"{fresh['summary']['newNodes']} nodes); ratio {s['costPerHourAfter'] / scratch:.3f} (target <= 1.05)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
