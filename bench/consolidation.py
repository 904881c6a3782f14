"""Consolidation on the local cluster: a 300-node cluster scaled in by 70%, and how soon it costs what it should.

`karpy sim` (1 system node, 1 s boot delay) and `karpy controller` (fake
provider, aws catalog) run as processes. The cluster is grown in the shape
of the consolidation-at-scale benchmark: on-demand m5.xlarge, m5.2xlarge,
c5.2xlarge and r5.xlarge across three zones. It grows in waves, one per
instance type and zone, the provisioner narrowed to that type and zone and
consolidation off, each wave adding pods of three Deployments (web 1 cpu/2Gi
under a PDB maxUnavailable 10%, api 1 cpu/6Gi under a PDB minAvailable 80%,
batch 3 cpu/4Gi) for about --nodes/12 nodes. Then the provisioner is opened
to all four types in all three zones with consolidation on, and every
Deployment is scaled in by --scale-in (70%).

Printed: $/h of karpy's nodes every few seconds after the scale-in, with its
ratio to the same pods packed from scratch by `karpy plan` (the provisioner
as it is after the scale-in, the same --node-cost-per-hour, the system node
as it is); the time until the ratio is at most 1.05 with no pod pending (a pod
without a node is capacity still to be paid for; target: 300 s); the
actions and evictions the controller counted; the nodes it launched after
the scale-in (consolidation's replacements, and nodes for pods that drains
left without room: kube-scheduler places evicted pods by its own scores, not
where consolidation planned them); and PDB violations.

PDB violations are counted by an observer of its own, not from the PDBs'
status (which the local cluster's disruption controller writes and its
Eviction API reads, so it could not see its own mistakes): it follows every
pod event of one watch, in order, and keeps for each PDB the pods it selects
that are healthy (Running, Ready, not being deleted), as the disruption
controller counts them. The expected pods are the Deployment's replicas,
which only this benchmark changes (the observer learns the new count before
the scale-in is sent, so the pods the scale-in removes are not counted as
disrupted). desiredHealthy follows from the PDB's spec as Kubernetes
computes it; any event after which healthy < desiredHealthy (disruptionsAllowed
would be negative: more pods down than the budget allows) starts a
violation. Pods evicted and not yet replaced count as down, so a drain that
evicts past the budget, a node deleted under its pods, or a pod deleted
instead of evicted all show. The smallest margin (healthy - desired) seen
is printed too.

With --steering the local cluster's scheduler calls `karpy extender`
(manifests/extender/scheduler-config.yaml, as a real kube-scheduler would be
configured) and the controller runs with --consolidation-steering: drained
pods land where consolidation planned them.

    python3 bench/consolidation.py [--nodes 300] [--scale-in 0.7] [--stabilization 15] [--min-node-age 60] [--steering]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.e2e import deployment
from bench.measure import cluster_with_crds, free_port, metric, stop_all, wait_for
from karpy.apis import disruption
from karpy.apis import labels as wk
from karpy.controller.cloudprovider.catalog import built_in
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, path_of

TYPES = ("m5.xlarge", "m5.2xlarge", "c5.2xlarge", "r5.xlarge")
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SHAPES = [("web", 1000, 2, 5), ("api", 1000, 6, 3), ("batch", 3000, 4, 2)]   # name, millicpu, GiB, pods per 10
PDBS = {"web": {"maxUnavailable": "10%"}, "api": {"minAvailable": "80%"}}
TARGET_RATIO, TARGET_SECONDS = 1.05, 300.0


def provisioner(types: tuple[str, ...], zones: tuple[str, ...], consolidate: bool) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
            "spec": {"requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                      {"key": wk.INSTANCE_TYPE, "operator": "In", "values": list(types)},
                                      {"key": wk.ZONE, "operator": "In", "values": list(zones)}],
                     "consolidation": {"enabled": consolidate}}}


def ours(node: dict[str, Any]) -> bool:
    return wk.PROVISIONER_NAME in (node["metadata"].get("labels") or {})


def price_of(nodes: list[dict[str, Any]]) -> float:
    return sum(float((n["metadata"].get("annotations") or {}).get(wk.PRICE_PER_HOUR, 0)) for n in nodes if ours(n))


def wave_pods(instance_type: str, nodes: int) -> dict[str, int]:
    """Pods of each Deployment that fill about `nodes` nodes of `instance_type` (85% of cpu or memory)."""
    t = next(t for t in built_in("aws").instance_types() if t.name == instance_type)
    cpu, gib = t.allocatable["cpu"] * nodes * 0.85, t.allocatable["memory"] / 1000 / 2 ** 30 * nodes * 0.85
    unit_cpu = sum(c * k for _, c, _, k in SHAPES)
    unit_gib = sum(g * k for _, _, g, k in SHAPES)
    units = min(cpu / unit_cpu, gib / unit_gib)
    return {name: max(1, round(units * k)) for name, _, _, k in SHAPES}


def fresh_cost(work: Path, spec: dict[str, Any], nodes: list[dict[str, Any]], replicas: dict[str, int],
               node_cost: float) -> tuple[float, int]:
    """$/h and node count of the Deployments' pods (`replicas` of each) packed from scratch by `karpy plan`:
    the system nodes as they are (empty: pods may go to them), every pod pending."""
    system = [n for n in nodes if not ours(n)]
    docs: list[dict[str, Any]] = [spec, *system]
    for name, cpu, gib, _ in SHAPES:
        template = deployment(name, f"{cpu}m", f"{gib}Gi", {}, 0)["spec"]["template"]
        for i in range(replicas[name]):
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-{i}", "namespace": "default", "labels": template["metadata"]["labels"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": name,
                                     "controller": True}]}, "spec": template["spec"]})
    path = work / "from-scratch.json"
    path.write_text("\n---\n".join(json.dumps(d) for d in docs))
    done = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "-o", "json",
                           "--node-cost-per-hour", str(node_cost)], capture_output=True, text=True, check=True)
    summary = json.loads(done.stdout)["summary"]
    assert summary["scheduled"] == summary["pods"], summary
    return float(summary["pricePerHour"]), int(summary["newNodes"])


def launches(port: int) -> tuple[int, int]:
    """Nodes the controller has launched so far, and how many of them were consolidation's replacements:
    after the scale-in no pod waits, so the others were launched for pods that drains left without room."""
    return (int(sum(metric(port, "karpenter_nodes_created").values())),
            int(sum(metric(port, "karpenter_consolidation_nodes_created").values())))


def offline_plan(work: Path, spec: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]], *,
                 steering: bool) -> dict[str, Any]:
    """What `karpy plan --consolidate` would still do with the cluster as it is (min node age 0)."""
    path = work / "final.json"
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")]
    path.write_text("\n---\n".join(json.dumps(d) for d in [spec, *nodes, *live]))
    done = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "--consolidate", "-f", str(path), "-o", "json",
                           *(["--consolidation-steering"] if steering else [])],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


class BudgetObserver:
    """Counts moments when a PDB has fewer healthy pods than it requires, from one pod watch, event by event."""

    def __init__(self, pdbs: dict[str, dict[str, Any]]) -> None:
        self.pdbs = {name: {"metadata": {"name": name, "namespace": "default"},
                            "spec": {**spec, "selector": {"matchLabels": {"app": name}}}} for name, spec in pdbs.items()}
        self.expected: dict[str, int] = {}
        self.healthy: dict[str, set[str]] = {name: set() for name in pdbs}
        self.violations: list[str] = []
        self.margin: dict[str, int] = {}
        self.armed = False
        self._violating: set[str] = set()
        self._lock = threading.Lock()

    def desired(self, name: str) -> int:
        expected, spec = self.expected[name], self.pdbs[name]["spec"]
        if "maxUnavailable" in spec:
            return max(0, expected - scaled(spec["maxUnavailable"], expected))
        return scaled(spec["minAvailable"], expected)

    def expect(self, replicas: dict[str, int]) -> None:
        with self._lock:
            self.expected.update({k: v for k, v in replicas.items() if k in self.pdbs})

    def arm(self) -> None:
        with self._lock:
            self.armed = True

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        with self._lock:
            for name, pdb in self.pdbs.items():
                if not disruption.selects(pdb, pod):
                    continue
                if kind != "DELETED" and disruption.healthy(pod):
                    self.healthy[name].add(key)
                else:
                    self.healthy[name].discard(key)
                if not self.armed:
                    continue
                margin = len(self.healthy[name]) - self.desired(name)
                self.margin[name] = min(self.margin.get(name, margin), margin)
                if margin < 0 and name not in self._violating:
                    self._violating.add(name)
                    self.violations.append(f"pdb {name}: {len(self.healthy[name])} healthy, {self.desired(name)} "
                                           f"required ({kind} {key})")
                elif margin >= 0:
                    self._violating.discard(name)


def scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def scale(client: RawClient, to: dict[str, int]) -> None:
    """Set each named Deployment's replicas."""
    for name, count in to.items():
        client.patch(path_of("apps/v1", "deployments", "default", name, "scale"), {"spec": {"replicas": count}})


def all_running(pods_seen: Informer, replicas: dict[str, int]) -> bool:
    """At least `replicas` pods in all, none being deleted, and every one of them healthy."""
    pods = [p for p in pods_seen.items() if not p["metadata"].get("deletionTimestamp")]
    return len(pods) >= sum(replicas.values()) and all(disruption.healthy(p) for p in pods)


def grow(client: RawClient, prov_path: str, replicas: dict[str, int], *, pods_seen: Informer, nodes_seen: Informer,
         nodes: int) -> bool:
    """Grow the cluster to about `nodes` karpy nodes, a wave per instance type and zone (the provisioner narrowed
    to that one, the Deployments scaled up by the wave's pods, counted into `replicas`); False when a wave's pods
    were not all Running within 300 s."""
    started = time.monotonic()
    per_wave = nodes / (len(TYPES) * len(ZONES))
    for zone in ZONES:
        for t in TYPES:
            spec = provisioner((t,), (zone,), False)
            client.patch(prov_path, {"spec": {"requirements": spec["spec"]["requirements"]}}, "application/merge-patch+json")
            time.sleep(1.5)                    # the controller's watch sees the narrowed provisioner first
            for name, count in wave_pods(t, round(per_wave)).items():
                replicas[name] += count
            scale(client, replicas)
            deadline = time.monotonic() + 300
            while not all_running(pods_seen, replicas) and time.monotonic() < deadline:
                time.sleep(0.5)
            if not all_running(pods_seen, replicas):
                print(f"wave {t} in {zone}: pods not all Running within 300 s")
                return False
            counts = sum(1 for n in nodes_seen.items() if ours(n))
            print(f"  wave {t:10s} {zone}: {sum(replicas.values()):5d} pods, {counts:4d} karpy nodes, "
                  f"{time.monotonic() - started:6.1f} s", flush=True)
    return True


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=300, help="karpy nodes at the peak (about)")
    parser.add_argument("--scale-in", type=float, default=0.7, help="share of every Deployment's pods removed")
    parser.add_argument("--stabilization", type=float, default=15.0, help="the controller's --consolidation-stabilization")
    parser.add_argument("--min-node-age", type=float, default=60.0, help="the controller's --consolidation-min-node-age")
    parser.add_argument("--max-disrupted", default="10%", help="the controller's --consolidation-max-disrupted")
    parser.add_argument("--node-cost-per-hour", type=float, default=0.0, help="the controller's and karpy plan's")
    parser.add_argument("--watch", type=float, default=420.0, help="seconds to follow the cluster after the scale-in")
    parser.add_argument("--steering", action="store_true",
                        help="run karpy's extender in the scheduler and the controller with --consolidation-steering")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between the $/h lines printed")
    return parser.parse_args()


@dataclasses.dataclass
class Convergence:
    """Follows the samples taken after the scale-in (seconds after it, $/h, nodes, being deleted, pending): when
    the price first came within TARGET_RATIO of `fresh` (the from-scratch packing), and since when nothing
    changed. It only decides; the caller prints and waits."""

    fresh: float
    every: float                                   # seconds between the lines shown
    reached: float | None = None
    quiet_since: float = 0.0
    signature: tuple[float, int, int, int] | None = None
    last_shown: float = -1e9

    def take(self, at: float, cost: float, count: int, deleting: int, pending: int) -> bool:
        """Record one sample; returns whether it is a line to show (every `every` s, and the first within target)."""
        ratio = cost / self.fresh if self.fresh else float("inf")
        first = self.reached is None and ratio <= TARGET_RATIO and not pending   # pending pods still need nodes
        if first:
            self.reached = at
        show = at - self.last_shown >= self.every or first
        if show:
            self.last_shown = at
        if (cost, count, deleting, pending) != self.signature:
            self.signature, self.quiet_since = (cost, count, deleting, pending), at
        return show

    def settled(self, now: float) -> bool:
        """Within target, nothing being deleted or pending, and no change for a minute (`now`: s after the scale-in)."""
        return self.reached is not None and self.signature is not None and not self.signature[2] \
            and not self.signature[3] and now - self.quiet_since > 60


def main() -> int:
    args = arguments()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))    # stop the cluster and controller on the way out
    work = Path(tempfile.mkdtemp(prefix="karpy-consolidation-"))
    kubeconfig = work / "kubeconfig"
    port, metrics_port, extender_port = free_port(), free_port(), free_port()
    sim = [sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out", str(kubeconfig),
           "--system-nodes", "1", "--boot-delay", "1"]
    if args.steering:
        sim += ["--scheduler-config", str(ROOT / "manifests" / "extender" / "scheduler-config.yaml"),
                "--extender-url", f"http://127.0.0.1:{extender_port}/scheduler"]
    processes = [subprocess.Popen(sim, stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)]
    try:
        client = cluster_with_crds(kubeconfig)
        if args.steering:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "karpy.main", "extender", "--port", str(extender_port), "--kubeconfig", str(kubeconfig)],
                stdout=open(work / "extender.log", "w"), stderr=subprocess.STDOUT))
            wait_for(lambda: urllib.request.urlopen(f"http://127.0.0.1:{extender_port}/healthz", timeout=1).status == 200,
                     30, "the extender")
        prov_path = path_of("karpenter.sh/v1alpha5", "provisioners", name="default")
        client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), provisioner(TYPES[:1], ZONES[:1], False))
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "fake",
             "--metrics-port", str(metrics_port), "--health-port", "0",
             "--node-cost-per-hour", str(args.node_cost_per_hour),
             "--consolidation-stabilization", str(args.stabilization), "--consolidation-min-node-age", str(args.min_node_age),
             "--consolidation-max-disrupted", args.max_disrupted, *(["--consolidation-steering"] if args.steering else [])],
            stdout=open(work / "controller.log", "w"), stderr=subprocess.STDOUT))
        observer = BudgetObserver(PDBS)
        pods_seen = Informer(client, "v1", "pods")
        pods_seen.handlers.append(observer.on_pod)
        nodes_seen = Informer(client, "v1", "nodes")
        for informer in (pods_seen.start(), nodes_seen.start()):
            informer.synced.wait(10)
        replicas = {name: 0 for name, *_ in SHAPES}
        for name, cpu, gib, _ in SHAPES:
            client.create(path_of("apps/v1", "deployments", "default"), deployment(name, f"{cpu}m", f"{gib}Gi", {}, 0))
            if name in PDBS:
                client.create(path_of("policy/v1", "poddisruptionbudgets", "default"), {
                    "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
                    "spec": {**PDBS[name], "selector": {"matchLabels": {"app": name}}}})

        grow_started = time.monotonic()
        if not grow(client, prov_path, replicas, pods_seen=pods_seen, nodes_seen=nodes_seen, nodes=args.nodes):
            return 1
        held = time.monotonic()
        while time.monotonic() - held < args.min_node_age + 2:
            time.sleep(1.0)                        # the peak lasts: every node is past the minimum node age
        peak_nodes = [n for n in nodes_seen.items() if ours(n)]
        peak_price = price_of(peak_nodes)
        by_type: dict[str, int] = {}
        for n in peak_nodes:
            key = n["metadata"]["labels"].get(wk.INSTANCE_TYPE, "?")
            by_type[key] = by_type.get(key, 0) + 1

        # the scale-in: the provisioner as the cluster runs it, then every Deployment down by --scale-in
        final_spec = provisioner(TYPES, ZONES, True)
        client.patch(prov_path, {"spec": final_spec["spec"]}, "application/merge-patch+json")
        left = {name: max(1, round(count * (1 - args.scale_in))) for name, count in replicas.items()}
        observer.expect(replicas)
        observer.arm()
        observer.expect(left)                      # before the scale-in is sent: its removals are not disruptions
        launched_before = launches(metrics_port)
        scaled_in = time.monotonic()
        scale(client, left)
        peak_pods, replicas = sum(replicas.values()), left
        samples: list[tuple[float, float, int, int, int]] = []   # t, $/h, karpy nodes, being deleted, pods pending
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                nodes = nodes_seen.items()
                pods = [p for p in pods_seen.items() if not p["metadata"].get("deletionTimestamp")]
                samples.append((time.monotonic() - scaled_in, price_of(nodes), sum(1 for n in nodes if ours(n)),
                                sum(1 for n in nodes if ours(n) and n["metadata"].get("deletionTimestamp")),
                                sum(1 for p in pods if not p["spec"].get("nodeName"))))
                stop.wait(1.0)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        def scaled_in_done() -> bool:
            pods = [p for p in pods_seen.items() if not p["metadata"].get("deletionTimestamp")]
            return len(pods) == sum(left.values()) and all_running(pods_seen, left)
        fresh, fresh_nodes = fresh_cost(work, final_spec, nodes_seen.items(), left, args.node_cost_per_hour)
        while time.monotonic() - scaled_in < 300 and not scaled_in_done():
            time.sleep(0.2)
        done_in = time.monotonic() - scaled_in
        print(f"peak: {sum(1 for _ in peak_nodes)} karpy nodes ({', '.join(f'{k} {v}' for k, v in sorted(by_type.items()))}), "
              f"{peak_pods} pods; grown in {held - grow_started:.0f} s, held {scaled_in - held:.0f} s")
        print(f"scale-in to {sum(left.values())} pods ({', '.join(f'{k} {v}' for k, v in left.items())}); "
              f"stabilization {args.stabilization:g} s, min node age {args.min_node_age:g} s, "
              f"max disrupted {args.max_disrupted}")
        print(f"the scale-in's pods were gone {done_in:.0f} s after it")
        print(f"packed from scratch by karpy plan: ${fresh:.3f}/h ({fresh_nodes} nodes)")
        print(f"{'t (s)':>6} {'$/h':>9} {'ratio':>6} {'nodes':>6} {'deleting':>8} {'pending':>7}", flush=True)
        convergence, shown = Convergence(fresh=fresh, every=args.every), 0
        while time.monotonic() - scaled_in < args.watch:
            for at, cost, count, deleting, pending in samples[shown:]:
                if convergence.take(at, cost, count, deleting, pending):
                    ratio = cost / fresh if fresh else float("inf")
                    print(f"{at:6.0f} {cost:9.3f} {ratio:6.3f} {count:6d} {deleting:8d} {pending:7d}", flush=True)
            shown = len(samples)
            if convergence.settled(time.monotonic() - scaled_in):
                break
            time.sleep(1.0)
        reached = convergence.reached
        stop.set()
        final_nodes = [n for n in nodes_seen.items() if ours(n)]
        final = price_of(final_nodes)
        offline = offline_plan(work, final_spec, nodes_seen.items(), pods_seen.items(), steering=args.steering)
        actions = metric(metrics_port, "karpenter_consolidation_actions_performed")
        cancelled = metric(metrics_port, "karpy_consolidation_actions_cancelled_total")
        evictions = metric(metrics_port, "karpy_evictions_total")
        evicted, blocked = (int(evictions.get(f'{{result="{r}"}}', 0)) for r in ("evicted", "blocked"))
        launched, replacements = (after - before for after, before in zip(launches(metrics_port), launched_before))
        print(f"karpy nodes $/h at peak        {peak_price:9.3f}   ({len(peak_nodes)} nodes)")
        print(f"  at the end                   {final:9.3f}   ({len(final_nodes)} nodes), "
              f"{time.monotonic() - scaled_in:.0f} s after the scale-in")
        print(f"packed from scratch            {fresh:9.3f}   ratio at the end {final / fresh:.3f}")
        reached_text = f"{reached:.0f} s" if reached is not None else f"not within {args.watch:.0f} s"
        print(f"time to ratio <= {TARGET_RATIO}         {reached_text:>9}   (target {TARGET_SECONDS:.0f} s)")
        print(f"actions                        {', '.join(f'{kind} {int(n)}' for kind, n in sorted(actions.items())) or 'none'}"
              f"; cancelled on re-validation: {int(sum(cancelled.values()))}")
        print(f"evictions                      {evicted:9d}   (refused by a PDB and retried: {blocked})")
        print(f"nodes launched after scale-in  {launched:9d}   (consolidation's replacements {replacements}, "
              f"for pods the drains left without room {launched - replacements})")
        print(f"plan --consolidate on the end  {offline['summary']['actions']:9d}   actions more "
              f"({offline['summary']['actionsByKind']}), $/h after {offline['summary']['pricePerHourAfter']:.3f}")
        print(f"PDB violations (observer)      {len(observer.violations):9d}   smallest margin healthy - required: "
              f"{', '.join(f'{k} {v}' for k, v in sorted(observer.margin.items()))}")
        for line in observer.violations[:5]:
            print("  violation:", line)
        print(f"logs in {work}")
        for informer in (pods_seen, nodes_seen):
            informer.stop()                  # before the cluster goes, or they report it unreachable
        return 0
    finally:
        stop_all(processes)


if __name__ == "__main__":
    sys.exit(main())
