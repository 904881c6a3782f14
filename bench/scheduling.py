"""Karpenter's scheduling benchmark, ported: the core and `karpy plan` on fake-400.

The workload is Karpenter's `makeDiversePods` (scheduling_benchmark_test.go):
a fifth each of generic pods, zone-spread pods, hostname-spread pods, zone
self-affinity pods and hostname anti-affinity pods, with random cpu (100m ..
1500m), memory (100Mi .. 4Gi) and labels (a..g), seed 42, against the 400
fake instance types and one unconstrained provisioner. For each size it
prints, for the greedy packer alone, for the core (greedy, then the optimiser)
and for the whole `karpy plan` process: seconds,
pods/s, new nodes, unschedulable pods, list $/h, and the ratio of the true cost
(docs/cost.md) to a lower bound: the LP relaxation over the provisioner's instance types'
allocatable cpu, memory and pods (after overhead), each type at its cheapest
allowed offering plus the per-node costs, with the hostname anti-affinity pods each on a node of their
own (bench/bound.py). No packing can cost less.

The realistic mix (212 pods of ten shapes, one on-demand amd64 provisioner, the
`aws` catalog) is also judged against the pattern bound, the LP over packing
patterns priced exactly (bound.pattern_bound): its pods have no constraint but
their requests, and the resource LP above is loose where the cheapest types are
lopsided (cpu from one type, memory from another).

    python3 bench/scheduling.py [--sizes 100,1000,5000,20000] [--no-process]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bound import lower_bound, pattern_bound
from karpy.controller.cloudprovider.catalog import built_in
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.controller.provisioning.scheduling.scheduler import Scheduler
from karpy.plan.inputs import load

CPUS = ["100m", "250m", "500m", "1000m", "1500m"]
MEMORIES = ["100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"]
VALUES = ["a", "b", "c", "d", "e", "f", "g"]


class Random:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def choice(self, items: list[str]) -> str:
        return items[self.r.randrange(len(items))]


def pod(name: str, r: Random, *, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "bench", "controller": True}]},
        "spec": {"containers": [{"name": "app", "image": "pause",
                                 "resources": {"requests": {"cpu": r.choice(CPUS), "memory": r.choice(MEMORIES)}}}], **spec},
    }


def diverse_pods(count: int, seed: int = 42) -> list[dict[str, Any]]:
    r = Random(seed)
    per = count // 5
    pods = []
    n = 0

    def name() -> str:
        nonlocal n
        n += 1
        return f"pod-{n}"

    def generic(k: int) -> None:
        for _ in range(k):
            labels = {"my-label": r.choice(VALUES)}
            pods.append(pod(name(), r, labels=labels))

    generic(per)
    for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname"):
        for _ in range(per):
            labels = {"my-label": r.choice(VALUES)}
            spread = {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": {"matchLabels": {"my-label": r.choice(VALUES)}}}
            pods.append(pod(name(), r, labels=labels, topologySpreadConstraints=[spread]))
    for _ in range(per):
        labels = {"my-affininity": r.choice(VALUES)}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "topology.kubernetes.io/zone"}
        pods.append(pod(name(), r, labels=labels, affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}))
    for _ in range(per):
        labels = {"app": "nginx"}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
        pods.append(pod(name(), r, labels=labels, affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}))
    generic(count - len(pods))
    return pods


PROVISIONER = {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {}}


def bound_of(snapshot: Any) -> float:
    """The LP lower bound (bound.py) over the first provisioner's types, for every pod of the batch."""
    scheduler = Scheduler(snapshot)
    return lower_bound(scheduler.templates[0], scheduler.pending)


def run_core(path: Path, pods: list[dict[str, Any]], *, optimize: bool = True, catalog: str = "fake-400") -> dict[str, Any]:
    loaded = load([str(path)], catalog=catalog)
    started = time.perf_counter()
    results = Scheduler(loaded.snapshot, packing=PackingOptions(optimize=optimize)).solve()
    seconds = time.perf_counter() - started
    price = sum(n.offering.price_per_hour for n in results.new_nodes)
    return {"seconds": seconds, "nodes": len(results.new_nodes), "unschedulable": len(results.unschedulable),
            "price": price, "cost": sum(n.cost_per_hour for n in results.new_nodes), "bound": bound_of(loaded.snapshot)}


# The realistic mix: ten shapes from 250m/512Mi to 2 cpu/8Gi, 212 pods, one on-demand amd64 provisioner, `aws` catalog.
SHAPES = [("250m", "512Mi"), ("250m", "1Gi"), ("500m", "1Gi"), ("500m", "2Gi"), ("1", "2Gi"), ("1", "4Gi"),
          ("1500m", "3Gi"), ("1500m", "6Gi"), ("2", "4Gi"), ("2", "8Gi")]


def realistic_mix() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [{
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
        "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                                  {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}]
    for i, (cpu, memory) in enumerate(SHAPES):
        for k in range(22 if i < 2 else 21):
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"mix-{i}-{k}", "namespace": "default"},
                         "spec": {"containers": [{"name": "app", "image": "pause",
                                                  "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}})
    return docs


def run_process(path: Path) -> dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "--catalog", "fake-400", "-o", "json"],
                         capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - started
    summary = json.loads(out.stdout)["summary"]
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": seconds, "nodes": summary["newNodes"], "unschedulable": summary["pods"] - summary["scheduled"],
            "price": summary["pricePerHour"], "cost": summary["costPerHour"], "peak_mib": peak}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,5000,20000")
    parser.add_argument("--no-process", action="store_true", help="measure the core only")
    args = parser.parse_args()
    built_in("fake-400")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mix.yaml"
        path.write_text(yaml.safe_dump_all(realistic_mix(), sort_keys=False))
        greedy, best = run_core(path, [], optimize=False, catalog="aws"), run_core(path, [], catalog="aws")
        mix = Scheduler(load([str(path)], catalog="aws").snapshot)
        patterns = pattern_bound(mix.templates[0], mix.pending)
        print(f"realistic mix (212 pods, aws, on-demand amd64): greedy ${greedy['price']:.2f}/h on {greedy['nodes']} node(s), "
              f"optimiser ${best['price']:.2f}/h on {best['nodes']} node(s) in {best['seconds']:.2f} s, "
              f"true cost ${greedy['cost']:.2f}/h and ${best['cost']:.2f}/h, "
              f"bound ${best['bound']:.2f}/h, ratio {best['cost'] / best['bound']:.3f}; "
              f"pattern bound ${patterns:.2f}/h, ratio {best['cost'] / patterns:.3f}")
    print(f"{'pods':>6} {'what':<8} {'seconds':>8} {'pods/s':>8} {'nodes':>6} {'unsched':>7} {'$/h':>10} "
          f"{'$/h/pod':>8} {'bound':>10} {'ratio':>6} {'peak MiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            pods = diverse_pods(size)
            path = Path(tmp) / f"pods-{size}.yaml"
            path.write_text(yaml.safe_dump_all([PROVISIONER] + pods, sort_keys=False))
            core = run_core(path, pods)
            rows = [("greedy", run_core(path, pods, optimize=False)), ("core", core)]
            if not args.no_process:
                rows.append(("process", run_process(path)))
            for what, r in rows:
                print(f"{size:>6} {what:<8} {r['seconds']:>8.2f} {size / r['seconds']:>8.0f} {r['nodes']:>6} "
                      f"{r['unschedulable']:>7} {r['price']:>10.2f} {r['price'] / size:>8.4f} {core['bound']:>10.2f} "
                      f"{r['cost'] / core['bound']:>6.3f} {r.get('peak_mib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024):>9.0f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
