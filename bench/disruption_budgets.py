"""Disruption budgets on the local cluster: a 200-node NodePool scaled down under budgets of "1", "10%" and a
closed schedule.

For each budget, a fresh `karpy sim` (1 system node, 1 s boot delay) and `karpy controller` (fake provider,
aws catalog, --consolidation-max-disrupted 100% so the NodePool's budgets are what bounds it) run as
processes. A NodePool of on-demand m5.xlarge nodes (consolidationPolicy WhenEmptyOrUnderutilized,
consolidateAfter 0s) is grown, its budget closed meanwhile, by a Deployment of two pods per node (1.5 cpu
each) to --nodes nodes. Then the Deployment is scaled in to --keep (30%) of its pods, which leaves nodes
empty and nodes half used, and the NodePool's budgets are set to the one measured:

- `1`: `[{nodes: "1"}]`;
- `10%`: `[{nodes: "10%"}]`;
- `closed`: `[{nodes: "10%"}, {nodes: "0", schedule: <a minute ago, daily>, duration: 2h}]`, a window
  that is open now: the most restrictive active budget wins, so nothing may be disrupted.

Printed per budget: the most nodes ever being disrupted at once (NodePool nodes with a deletionTimestamp,
from a watch of every node event), the time from the scale-in until the last node went with none left
being deleted and no pod pending (or that it had not converged within --window seconds, and how many
nodes were left), the nodes before and after, and the pods moved (evictions and forced deletes the
controller counted).

    python3 bench/disruption_budgets.py [--nodes 200] [--keep 0.3] [--window 900] [--budgets 1 10% closed]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e import deployment
from bench.measure import cluster_with_crds, free_port, metric, stop_all, wait_for
from karpy.apis import labels as wk
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, path_of

POOL = "default"
NODEPOOLS = path_of("karpenter.sh/v1", "nodepools")
CLOSED: list[dict[str, Any]] = [{"nodes": "0"}]
QUIET_SECONDS = 45.0         # no node change for this long, nothing deleting, nothing pending: converged


def budgets_for(name: str, now: dt.datetime) -> list[dict[str, Any]]:
    if name == "closed":
        start = now - dt.timedelta(minutes=1)
        return [{"nodes": "10%"}, {"nodes": "0", "schedule": f"{start.minute} {start.hour} * * *", "duration": "2h"}]
    return [{"nodes": name}]


def nodepool(budgets: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": POOL},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                                 {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.xlarge"]}]}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                               "budgets": budgets}}}


class Disruptions:
    """From a watch of every node event: the NodePool's nodes, those being deleted, the most at once, and
    when the node set last changed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, bool] = {}           # name -> being deleted
        self.most = 0
        self.changed = time.monotonic()
        self.last_gone: float | None = None

    def on_node(self, kind: str, node: dict[str, Any]) -> None:
        if (node["metadata"].get("labels") or {}).get(wk.NODEPOOL) != POOL:
            return
        name = node["metadata"]["name"]
        with self.lock:
            before = dict(self.nodes)
            if kind == "DELETED":
                self.nodes.pop(name, None)
                self.last_gone = time.monotonic()
            else:
                self.nodes[name] = bool(node["metadata"].get("deletionTimestamp"))
            if self.nodes != before:
                self.changed = time.monotonic()
            self.most = max(self.most, sum(self.nodes.values()))

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return len(self.nodes), sum(self.nodes.values())


@dataclasses.dataclass
class Result:
    budget: str
    before: int
    after: int
    most_at_once: int
    converged_seconds: float | None
    pods_moved: int


def pending(pods: Informer) -> int:
    return sum(1 for p in pods.items() if not (p.get("spec") or {}).get("nodeName"))


def run(budget: str, *, nodes: int, keep: float, window: float) -> Result:
    work = Path(tempfile.mkdtemp(prefix="karpy-budgets-"))
    kubeconfig = work / "kubeconfig"
    sim = subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(free_port()), "--kubeconfig-out",
                            str(kubeconfig), "--system-nodes", "1", "--boot-delay", "1"],
                           stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)
    processes: list[subprocess.Popen[Any]] = [sim]
    client: RawClient | None = None
    informers: list[Informer] = []
    try:
        client = cluster_with_crds(kubeconfig)
        wait_for(lambda: client is not None and client.get(NODEPOOLS), 30, "the NodePool API")
        client.create(NODEPOOLS, nodepool(CLOSED))
        metrics_port = free_port()
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "fake",
             "--metrics-port", str(metrics_port), "--health-port", "0", "--consolidation-max-disrupted", "100%",
             "--consolidation-min-node-age", "0"],
            stdout=open(work / "controller.log", "w"), stderr=subprocess.STDOUT))
        seen = Disruptions()
        node_watch = Informer(client, "v1", "nodes")
        node_watch.handlers.append(seen.on_node)
        pods = Informer(client, "v1", "pods")
        informers = [node_watch, pods]
        for informer in informers:
            informer.start()
        replicas = 2 * nodes
        client.create(path_of("apps/v1", "deployments", "default"), deployment("work", "1500m", "1Gi", {}, replicas))
        wait_for(lambda: seen.counts()[0] >= nodes and pending(pods) == 0 and len(pods.items()) >= replicas,
                 900, f"{nodes} nodes for {replicas} pods")
        before = seen.counts()[0]
        print(f"  [{budget}] grown to {before} nodes in {work}", flush=True)
        moved_before = sum(metric(metrics_port, "karpy_evictions_total").values())
        client.patch(path_of("apps/v1", "deployments", "default", "work"), {"spec": {"replicas": math.ceil(replicas * keep)}})
        client.patch(path_of("karpenter.sh/v1", "nodepools", name=POOL),
                     {"spec": {"disruption": {"budgets": budgets_for(budget, dt.datetime.now(dt.timezone.utc))}}})
        started = time.monotonic()
        with seen.lock:
            seen.most, seen.last_gone = 0, None
        converged: float | None = None
        while time.monotonic() - started < window:
            time.sleep(1)
            count, deleting = seen.counts()
            quiet = time.monotonic() - seen.changed
            if deleting == 0 and pending(pods) == 0 and quiet >= QUIET_SECONDS and seen.last_gone is not None:
                converged = seen.last_gone - started
                break
            if budget == "closed" and time.monotonic() - started >= min(window, 120):
                break                                   # nothing may go: two minutes of nothing is the figure
        moved = sum(metric(metrics_port, "karpy_evictions_total").values()) - moved_before
        return Result(budget, before, seen.counts()[0], seen.most, converged, int(moved))
    finally:
        for informer in informers:
            informer.stop()
        stop_all(processes)
        if client is not None:
            client.api_client.close()


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200, help="NodePool nodes before the scale-in")
    parser.add_argument("--keep", type=float, default=0.3, help="share of the pods the scale-in keeps")
    parser.add_argument("--window", type=float, default=900.0, help="seconds to wait for each budget to converge")
    parser.add_argument("--budgets", nargs="+", default=["1", "10%", "closed"])
    return parser.parse_args()


def main() -> int:
    args = arguments()
    results = []
    for budget in args.budgets:
        print(f"budget {budget}: {args.nodes} nodes, scaled in to {args.keep:.0%} of the pods", flush=True)
        r = run(budget, nodes=args.nodes, keep=args.keep, window=args.window)
        results.append(r)
        converged = f"{r.converged_seconds:.0f} s" if r.converged_seconds is not None else \
            f"not within {args.window:.0f} s" if r.budget != "closed" else "held (nothing may go)"
        print(f"  most disrupted at once {r.most_at_once}, nodes {r.before} -> {r.after}, converged {converged}, "
              f"pods moved {r.pods_moved}", flush=True)
    print("\nbudget   most at once   nodes before -> after   converged        pods moved")
    for r in results:
        converged = f"{r.converged_seconds:.0f} s" if r.converged_seconds is not None else "-"
        print(f"{r.budget:<8} {r.most_at_once:>12}   {r.before:>12} -> {r.after:<5}   {converged:<15}  {r.pods_moved:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
