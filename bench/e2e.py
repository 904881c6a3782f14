"""The whole autoscaler on the local cluster: bursts of pending pods until all Running; mixed shapes and
scale-down; memory at scale.

Burst (one run per --sizes entry, each on a fresh `karpy sim --boot-delay 0` and
`karpy controller --cloud-provider fake`): one Deployment of pods asking 100m
cpu / 128Mi scales from 0 to N at once. Printed: the machine's load average
before and after (timings on a shared machine mean little without it), seconds
from the scale-up until every pod is Running, and the split of that time as the
watches and the controller's log saw it (pods created, marked Unschedulable,
batches closed, solve (a large batch is planned and launched chunk by
chunk: the plans' chunks, the longest plan, how soon a plan's first chunk
was decided), each batch's first Node after the batch closed, launches, binds, Running), nodes launched and their $/h, the controller's peak
RSS and CPU seconds, the local cluster's CPU seconds, and the API requests the
controller made and the local cluster's own scheduler, kubelets and
controllers made (its /metrics count requests by client). With --profile DIR,
py-spy samples both processes (threads holding the GIL: their CPU) into DIR.

Mixed (--mixed-pods N): five Deployments of mixed shapes (cpu 250m..2, memory
256Mi..4Gi, one spread over zones, 2% with hostname anti-affinity), boot delay
2 s; time to every pod bound, then, after the Deployments are deleted, until
every empty node is gone (ttlSecondsAfterEmpty 5).

Memory (--memory-pods N): 1,000 ready nodes and N pods bound to them are
written while the controller watches; its peak memory is printed.

    python3 bench/e2e.py [--sizes 1000,10000,30000] [--mixed-pods 1000] [--memory-pods 10000] [--profile DIR]

py-spy is not a dependency: `pip install py-spy` to profile.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import cluster_with_crds, free_port, peak_rss_mib, stop_all
from karpy.apis import labels as wk
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, path_of

BENCH_AGENT = "karpy-bench"
SIMULATOR_AGENT = "karpy-simulator"
SHAPES: list[tuple[str, str, str, dict[str, Any]]] = [
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


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process and its reaped children so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The live children of a process (`karpy sim` runs its controllers in one)."""
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def load_average() -> str:
    """The machine's 1/5/15-minute load averages (as `uptime` prints them): timings on a shared machine mean
    little without them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def requests_by_client(port: int) -> dict[str, int]:
    """`apiserver_request_total` of the local cluster, summed by client."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, int] = {}
    for m in re.finditer(r'^apiserver_request_total\{client="([^"]*)",verb="([^"]*)",resource="([^"]*)"\} (\d+)$', text, re.M):
        out[f"{m[1]} {m[2]} {m[3]}"] = int(m[4])
    return out


@dataclasses.dataclass
class Cluster:
    work: Path
    port: int
    client: RawClient
    sim: subprocess.Popen[bytes]
    controller: subprocess.Popen[bytes]
    processes: list[subprocess.Popen[bytes]]

    def stop(self) -> None:
        stop_all(self.processes)
        self.client.api_client.close()


def start(*, boot_delay: float, ttl_after_empty: int | None) -> Cluster:
    """`karpy sim` and `karpy controller` (fake provider) as processes, with the CRDs and a default Provisioner."""
    work = Path(tempfile.mkdtemp(prefix="karpy-e2e-"))
    kubeconfig = work / "kubeconfig"
    port = free_port()
    sim_cmd = [sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out", str(kubeconfig),
               "--system-nodes", "1", "--boot-delay", str(boot_delay)]
    sim = subprocess.Popen(sim_cmd, stdout=open(work / "sim.log", "w"), stderr=subprocess.STDOUT)
    processes = [sim]
    client = cluster_with_crds(kubeconfig, user_agent=BENCH_AGENT)
    spec: dict[str, Any] = {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                                             {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
    if ttl_after_empty is not None:
        spec["ttlSecondsAfterEmpty"] = ttl_after_empty
    client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), {
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": spec})
    controller = subprocess.Popen([sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kubeconfig),
                                   "--cloud-provider", "fake", "--metrics-port", "0", "--health-port", "0"],
                                  stdout=open(work / "controller.log", "w"), stderr=subprocess.STDOUT)
    processes.append(controller)
    for _ in range(200):         # the controller is up once it holds the lease
        if "Became leader" in (work / "controller.log").read_text():
            break
        time.sleep(0.05)
    time.sleep(0.5)
    return Cluster(work, port, client, sim, controller, processes)


class Progress:
    """When pods reached each state, from a watch: the first time each pod was seen created, marked
    Unschedulable, bound and Running."""

    STATES = ("created", "unschedulable", "bound", "running")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, set[str]] = {s: set() for s in self.STATES}
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def _mark(self, state: str, uid: str, now: float) -> None:
        if uid not in self.seen[state]:
            self.seen[state].add(uid)
            self.first.setdefault(state, now)
            self.last[state] = now

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        now = time.time()
        uid = pod["metadata"]["uid"]
        status = pod.get("status") or {}
        with self.lock:
            self._mark("created", uid, now)
            if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in status.get("conditions") or []):
                self._mark("unschedulable", uid, now)
            if (pod.get("spec") or {}).get("nodeName"):
                self._mark("bound", uid, now)
            if status.get("phase") == "Running":
                self._mark("running", uid, now)

    def count(self, state: str) -> int:
        with self.lock:
            return len(self.seen[state])


def log_times(path: Path, pattern: str) -> list[tuple[float, re.Match[str]]]:
    """(wall-clock time, match) of the controller's log lines matching `pattern`."""
    out = []
    regex = re.compile(pattern)
    for line in path.read_text(errors="replace").splitlines():
        stamp, _, rest = line.partition("\t")
        m = regex.search(rest)
        if m is None:
            continue
        try:
            when = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()
        except ValueError:
            continue
        out.append((when, m))
    return out


def burst(size: int, *, timeout: float, profile: Path | None) -> dict[str, Any]:
    cluster = start(boot_delay=0, ttl_after_empty=None)
    client = cluster.client
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        client.create(path_of("apps/v1", "deployments", "default"), deployment("burst", "100m", "128Mi", {}, 0))
        progress = Progress()
        pods_seen = Informer(client, "v1", "pods")
        pods_seen.handlers.append(progress.on_pod)
        pods_seen.start().synced.wait(10)
        node_created: dict[str, float] = {}         # karpy node -> when the watch first showed it

        def on_node(kind: str, node: dict[str, Any]) -> None:
            if "karpenter.sh/provisioner-name" in (node["metadata"].get("labels") or {}):
                node_created.setdefault(node["metadata"]["name"], time.time())

        nodes_seen = Informer(client, "v1", "nodes")
        nodes_seen.handlers.append(on_node)
        nodes_seen.start().synced.wait(10)
        requests_before = requests_by_client(cluster.port)
        sim_children = child_pids(cluster.sim.pid)      # the cluster's scheduler, kubelets and workload controllers
        cpu_before, sim_cpu_before = cpu_seconds(cluster.controller.pid), cpu_seconds(cluster.sim.pid)
        children_cpu_before = sum(cpu_seconds(pid) for pid in sim_children)
        if profile is not None:           # sampled without stopping it (--nonblocking), so it runs at its own pace; only threads holding the GIL (--gil): its CPU, not its waits
            profile.mkdir(parents=True, exist_ok=True)
            profilers = [subprocess.Popen(["py-spy", "record", "--nonblocking", "--gil", "--rate", "20", "--format", "raw",
                                           "--pid", str(pid), "-o", str(profile / f"{name}-{size}.txt")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                         for name, pid in [("sim", cluster.sim.pid), ("controller", cluster.controller.pid),
                                           *((f"sim-controllers-{i}" if i else "sim-controllers", child) for i, child in enumerate(sim_children))]]
        load_before = load_average()
        started = time.time()
        client.patch(path_of("apps/v1", "deployments", "default", "burst", "scale"), {"spec": {"replicas": size}})
        all_running = None
        deadline = started + timeout
        while time.time() < deadline:
            if progress.count("running") >= size:
                all_running = progress.last["running"] - started
                break
            time.sleep(0.05)
        load_after = load_average()
        controller_cpu = cpu_seconds(cluster.controller.pid) - cpu_before
        sim_cpu = cpu_seconds(cluster.sim.pid) - sim_cpu_before
        children_cpu = sum(cpu_seconds(pid) for pid in sim_children) - children_cpu_before
        peak = peak_rss_mib(cluster.controller.pid)
        requests_after = requests_by_client(cluster.port)
        pods_seen.stop()
        nodes_seen.stop()
        nodes = karpy_nodes(client)
        price = sum(float((n["metadata"].get("annotations") or {}).get(wk.PRICE_PER_HOUR, 0)) for n in nodes)
        log = cluster.work / "controller.log"
        found = [(t, int(m[1])) for t, m in log_times(log, r"Found (\d+) provisionable pod") if t >= started]
        solved = [(t, int(m[1]), int(m[2])) for t, m in log_times(log, r"Computed packing of (\d+) node\(s\) for (\d+) pod") if t >= started]
        launched = [t for t, _ in log_times(log, r"Launched instance") if t >= started]
        created = sorted(node_created.values())
        bound = [(t, int(m[1])) for t, m in log_times(log, r"Bound (\d+) pod\(s\) to node") if t >= started]
        by_controller = {k: v - requests_before.get(k, 0) for k, v in requests_after.items()
                         if not k.startswith((BENCH_AGENT + " ", SIMULATOR_AGENT + " "))}
        by_controller = {k: v for k, v in by_controller.items() if v}
        by_cluster = {k: v - requests_before.get(k, 0) for k, v in requests_after.items() if k.startswith(SIMULATOR_AGENT + " ")}
        return {"size": size, "all_running": all_running, "started": started, "progress": progress, "found": found,
                "solved": solved, "launched": launched, "bound": bound, "nodes": len(nodes), "price": price,
                "peak_rss": peak, "controller_cpu": controller_cpu, "sim_cpu": sim_cpu, "sim_children_cpu": children_cpu, "requests": by_controller,
                "cluster_requests": {k: v for k, v in by_cluster.items() if v}, "created": created,
                "load": (load_before, load_after), "running": progress.count("running"), "logs": str(cluster.work)}
    finally:
        for profiler in profilers:
            profiler.send_signal(signal.SIGINT)        # py-spy writes what it sampled on ^C
        for profiler in profilers:
            try:
                profiler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                profiler.kill()
        cluster.stop()


def report_burst(r: dict[str, Any], timeout: float) -> None:
    started, p = r["started"], r["progress"]

    def span(first: float | None, last: float | None, n: int | None = None) -> str:
        if first is None:
            return "never"
        text = f"{first - started:7.2f} .. {last - started:7.2f} s"
        return text + (f"   ({n})" if n is not None else "")

    print(f"\nburst of {r['size']} pods (100m cpu, 128Mi), boot delay 0, fake provider; "
          f"machine load {r['load'][0]} before, {r['load'][1]} after ({os.cpu_count()} cores)")
    print("  all Running            " + (f"{r['all_running']:8.2f} s after the scale-up" if r["all_running"] is not None
                                         else f"not within {timeout:g} s ({r['running']} Running)"))
    for state, title in (("created", "pods created"), ("unschedulable", "marked Unschedulable")):
        print(f"  {title:22s} {span(p.first.get(state), p.last.get(state), p.count(state))}")
    found, solved = r["found"], r["solved"]
    print(f"  batches closed         {span(found[0][0] if found else None, found[-1][0] if found else None, len(found))} "
          f"batches of {', '.join(str(n) for _, n in found[:8])}{' ...' if len(found) > 8 else ''} pods")
    # a batch's plan is logged chunk by chunk (a batch with nothing to launch logs none): each chunk belongs to
    # the batch closed last before it; a plan is timed from its batch's close to its last chunk
    plans: dict[float, list[float]] = {}
    for s in solved:
        plans.setdefault(max((f[0] for f in found if f[0] <= s[0]), default=s[0]), []).append(s[0])
    solves = [chunks[-1] - closed for closed, chunks in plans.items()]
    first_chunks = [chunks[0] - closed for closed, chunks in plans.items()]
    print(f"  solved                 {span(solved[0][0] if solved else None, solved[-1][0] if solved else None, len(solved))} "
          f"chunks in {len(plans)} plans; solve total {sum(solves):.2f} s, longest {max(solves, default=0):.2f} s, "
          f"first chunk {max(first_chunks, default=0):.2f} s after its batch closed at most")
    launched, bound, created = r["launched"], r["bound"], r["created"]
    # the first Node the watch showed after each plan's first chunk: how soon a batch's first node exists
    waits = [next((c - closed for c in created if c >= chunks[0]), None) for closed, chunks in plans.items()]
    after_close: list[float] = [d for d in waits if d is not None]
    print(f"  first node of a batch  {span(created[0] if created else None, created[-1] if created else None, len(created))} "
          f"nodes created; a batch's first node {min(after_close, default=float('nan')):.2f}.."
          f"{max(after_close, default=float('nan')):.2f} s after the batch closed "
          f"({', '.join(f'{d:.2f}' for d in after_close)})")
    print(f"  launches               {span(launched[0] if launched else None, launched[-1] if launched else None, len(launched))}")
    print(f"  binds (per node)       {span(bound[0][0] if bound else None, bound[-1][0] if bound else None, sum(n for _, n in bound))}")
    print(f"  pods bound (watch)     {span(p.first.get('bound'), p.last.get('bound'), p.count('bound'))}")
    print(f"  pods Running (watch)   {span(p.first.get('running'), p.last.get('running'), p.count('running'))}")
    print(f"  nodes launched         {r['nodes']:8d}   $/h {r['price']:.3f}")
    print(f"  controller             peak RSS {r['peak_rss']:.0f} MiB, CPU {r['controller_cpu']:.1f} s; local cluster CPU {r['sim_cpu']:.1f} s "
          f"(API server) + {r['sim_children_cpu']:.1f} s (its scheduler, kubelets, controllers)")
    total = sum(r["requests"].values())
    top = sorted(r["requests"].items(), key=lambda kv: -kv[1])[:6]
    print(f"  controller API requests {total:7d}   (" + ", ".join(f"{k.split(' ', 1)[1]} {v}" for k, v in top) + ")")
    cluster_total = sum(r["cluster_requests"].values())
    top = sorted(r["cluster_requests"].items(), key=lambda kv: -kv[1])[:6]
    print(f"  local cluster's own    {cluster_total:7d}   (" + ", ".join(f"{k.split(' ', 1)[1]} {v}" for k, v in top) + ")")
    print(f"  logs                   {r['logs']}")


def mixed(pods: int) -> None:
    cluster = start(boot_delay=2, ttl_after_empty=5)
    client = cluster.client
    try:
        solo = max(1, pods // 50)              # pods that each need a node of their own
        per = (pods - solo) // (len(SHAPES) - 1)
        for name, cpu, memory, extra in SHAPES:
            client.create(path_of("apps/v1", "deployments", "default"), deployment(name, cpu, memory, extra, 0))
        progress = Progress()
        pods_seen, nodes_seen = Informer(client, "v1", "pods"), Informer(client, "v1", "nodes").start()
        pods_seen.handlers.append(progress.on_pod)
        pods_seen.start().synced.wait(10)
        nodes_seen.synced.wait(10)
        started = time.time()
        for i, (name, *_rest) in enumerate(SHAPES):
            replicas = solo if name == "solo" else per if i < len(SHAPES) - 2 else pods - solo - per * (len(SHAPES) - 2)
            client.patch(path_of("apps/v1", "deployments", "default", name, "scale"), {"spec": {"replicas": replicas}})
        first_launch = None
        all_bound = None
        deadline = started + 180
        while time.time() < deadline:
            if first_launch is None and any("karpenter.sh/provisioner-name" in (n["metadata"].get("labels") or {})
                                            for n in nodes_seen.items()):
                first_launch = time.time()
            if progress.count("bound") >= pods:
                all_bound = progress.last["bound"] - started
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
        on_system = sum(1 for p in client.get(path_of("v1", "pods", "default"))["items"] if p["spec"].get("nodeName") == "system-0")
        marks = (progress.first.get("unschedulable"), progress.last.get("unschedulable"))
        print(f"\nmixed burst of {pods} pending pods in 5 deployments (zone spread, {solo} with hostname anti-affinity), boot delay 2 s")
        if marks[0] is not None and marks[1] is not None:
            print(f"  pods marked Unschedulable {progress.count('unschedulable'):7d}   first {marks[0] - started:.2f} s, "
                  f"last {marks[1] - started:.2f} s after the scale-up")
        if first_launch and marks[0] is not None and marks[1] is not None:
            print(f"  first node launched      {first_launch - started:8.2f} s after the scale-up; "
                  f"{first_launch - marks[0]:.2f} s after the first pending pod, {first_launch - marks[1]:.2f} s after the last")
        else:
            print("  first node launched   never")
        print(f"  all pods bound           {all_bound:8.2f} s" if all_bound else "  all pods bound        not within 180 s")
        print(f"  nodes launched           {len(nodes):8d}   ({', '.join(f'{c} {t}' for t, c in sorted(types.items()))})")
        print(f"  pods on the system node  {on_system:8d}")
        print(f"  karpy nodes $/h          {price:8.3f}")
        deleted = time.time()
        for name, *_rest in SHAPES:
            client.delete(path_of("apps/v1", "deployments", "default", name))
        gone = None
        while time.time() < deleted + 180:
            if not karpy_nodes(client):
                gone = time.time() - deleted
                break
            time.sleep(0.2)
        print(f"  empty nodes gone         {gone:8.2f} s after deleting the deployments (ttlSecondsAfterEmpty 5)" if gone
              else "  empty nodes gone      not within 180 s")
        print(f"  controller peak memory   {peak_rss_mib(cluster.controller.pid):8.0f} MiB")
    finally:
        cluster.stop()


def memory(pods: int, nodes: int) -> None:
    cluster = start(boot_delay=2, ttl_after_empty=None)
    client = cluster.client
    try:
        def make_node(i: int) -> None:
            client.create(path_of("v1", "nodes"), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"static-{i}",
                          "labels": {"kubernetes.io/hostname": f"static-{i}"}},
                          "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                                     "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                                     "conditions": [{"type": "Ready", "status": "True"}]}})

        def make_pod(i: int) -> None:
            client.create(path_of("v1", "pods", "default"), {"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": f"bound-{i}", "namespace": "default", "labels": {"app": f"a{i % 100}"}},
                          "spec": {"nodeName": f"static-{i % nodes}", "containers": [
                              {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})

        t = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(make_node, range(nodes)))
            list(pool.map(make_pod, range(pods)))
        time.sleep(5)                       # let the controller's caches take it all in
        print(f"\ncontroller peak memory   {peak_rss_mib(cluster.controller.pid):8.0f} MiB with {pods} pods and "
              f"{nodes} nodes (written in {time.monotonic() - t:.1f} s)")
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000", help="comma-separated burst sizes (pods); empty for none")
    parser.add_argument("--timeout", type=float, default=0, help="seconds to wait for all Running (default 60 + size/50)")
    parser.add_argument("--mixed-pods", type=int, default=0, help="pods in the mixed-shape burst (0: skip)")
    parser.add_argument("--memory-pods", type=int, default=0, help="pods written for the memory phase (0: skip)")
    parser.add_argument("--memory-nodes", type=int, default=1000)
    parser.add_argument("--profile", type=Path, help="sample the local cluster and the controller with py-spy during each burst into this folder "
                                                          "(collapsed stacks)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    for size in sizes:
        timeout = args.timeout or 60 + size / 50
        report_burst(burst(size, timeout=timeout, profile=args.profile), timeout)
    if args.mixed_pods:
        mixed(args.mixed_pods)
    if args.memory_pods:
        memory(args.memory_pods, args.memory_nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
