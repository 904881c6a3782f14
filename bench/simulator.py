"""The local cluster's API server under load: creates, lists and watch delivery, and its memory.

Starts `karpy sim --no-controllers` (the API server alone) as a separate
process, opens 5 watches on pods, creates 1,000 nodes and 10,000 pods from
8 client threads, then lists all pods. Prints the create rate, list latency
(median of 5), watch delivery latency from a create request being sent to each watcher
receiving its event (p50, p99, max over all 5 watchers), and the server's
peak resident memory.

    python3 bench/simulator.py [--pods 10000] [--nodes 1000] [--watchers 5]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import free_port, peak_rss_mib, stop_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--watchers", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    port = free_port()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    server = subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out", str(kubeconfig),
                               "--no-controllers", "--system-nodes", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    http = urllib3.PoolManager(maxsize=args.threads + args.watchers + 2)
    try:
        for _ in range(100):
            try:
                if urllib.request.urlopen(base + "/healthz", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        rv = json.loads(http.request("GET", base + "/api/v1/pods").data)["metadata"]["resourceVersion"]
        sent: dict[str, float] = {}
        received: list[list[tuple[str, float]]] = [[] for _ in range(args.watchers)]
        done = threading.Event()

        def watcher(i: int) -> None:
            response = http.request("GET", f"{base}/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=600",
                                    preload_content=False)
            buffer = b""
            count = 0
            for chunk in response.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    now = time.perf_counter()
                    event = json.loads(line)
                    name = event["object"]["metadata"]["name"]
                    received[i].append((name, now))
                    count += 1
                if count >= args.pods:
                    break
            response.release_conn()

        watchers = [threading.Thread(target=watcher, args=(i,), daemon=True) for i in range(args.watchers)]
        for w in watchers:
            w.start()
        time.sleep(0.5)

        def create(path: str, body: dict) -> None:
            data = json.dumps(body).encode()
            sent[body["metadata"]["name"]] = time.perf_counter()
            response = http.request("POST", base + path, body=data, headers={"Content-Type": "application/json"})
            if response.status != 201:
                raise RuntimeError(f"{path}: {response.status} {response.data[:200]!r}")

        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "labels": {"pool": str(i % 10)}},
                  "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}} for i in range(args.nodes)]
        pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{i}", "namespace": "default", "labels": {"app": f"a{i % 50}"}},
                 "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}
                for i in range(args.pods)]
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(lambda n: create("/api/v1/nodes", n), nodes))
        node_seconds = time.perf_counter() - started
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(lambda p: create("/api/v1/namespaces/default/pods", p), pods))
        pod_seconds = time.perf_counter() - started
        for w in watchers:
            w.join(timeout=60)
        done.set()
        list_times = []
        for _ in range(5):
            t = time.perf_counter()
            items = json.loads(http.request("GET", base + "/api/v1/pods").data)["items"]
            list_times.append(time.perf_counter() - t)
        assert len(items) == args.pods
        selector_t = time.perf_counter()
        selected = json.loads(http.request("GET", base + "/api/v1/pods?labelSelector=app%3Da7").data)["items"]
        selector_seconds = time.perf_counter() - selector_t
        latencies = sorted(t - sent[n] for r in received for n, t in r if n in sent)
        q = statistics.quantiles(latencies, n=100)
        print(f"local cluster API server: {args.nodes} nodes, {args.pods} pods, {args.threads} client threads, {args.watchers} watchers")
        print(f"create nodes             {args.nodes / node_seconds:8.0f} /s")
        print(f"create pods              {args.pods / pod_seconds:8.0f} /s")
        print(f"list {args.pods} pods          {statistics.median(list_times) * 1000:8.0f} ms (median of 5, incl. JSON decode)")
        print(f"list by label ({len(selected)} pods) {selector_seconds * 1000:8.0f} ms")
        print(f"watch delivery p50       {q[49] * 1000:8.1f} ms")
        print(f"watch delivery p99       {q[98] * 1000:8.1f} ms")
        print(f"watch delivery max       {latencies[-1] * 1000:8.1f} ms  ({len(latencies)} events to {args.watchers} watchers)")
        print(f"server peak memory       {peak_rss_mib(server.pid):8.0f} MiB")
    finally:
        stop_all([server])
    return 0


if __name__ == "__main__":
    sys.exit(main())
