"""What the benchmarks share: a free loopback port, waiting for a process to come up, a client of a local cluster
with karpy's CRDs, a process's peak resident memory and CPU time, a counter from /metrics."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from karpy.apis.crds import all_definitions
from karpy.kubeclient.raw import RawClient, api_client, path_of


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, timeout: float, what: str) -> None:
    """Until `check()` is true (errors count as not yet); exits naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} not within {timeout:g} s")


def cluster_with_crds(kubeconfig: Path, *, timeout: float = 30, user_agent: str | None = None) -> RawClient:
    """A client of the `karpy sim` that writes `kubeconfig`, once the file is there and the API server answers
    /version, with karpy's CRDs created."""
    wait_for(kubeconfig.exists, timeout, "the local cluster's kubeconfig")
    api = api_client(str(kubeconfig))
    if user_agent is not None:
        api.user_agent = user_agent
    client = RawClient(api)
    wait_for(lambda: client.get("/version"), timeout, "the local cluster")
    for crd in all_definitions().values():
        client.create(path_of("apiextensions.k8s.io/v1", "customresourcedefinitions"), crd)
    return client


def stop_all(processes: list[subprocess.Popen[Any]]) -> None:
    """SIGTERM to each, last started first; whichever has not exited 10 s later is killed."""
    for process in reversed(processes):
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a running process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by a process and its descendants (a gunicorn master and its workers).

    Unlike wall-clock latency on a shared machine, this does not grow with what else runs."""
    total, pending = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick          # utime, stime
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, IndexError, ValueError):
            continue                                                      # gone meanwhile
    return total


def metric(port: int, name: str) -> dict[str, float]:
    """Samples of counter `name` from the /metrics on 127.0.0.1:`port`, by their label text ('{result="evicted"}')."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):] or "{}"] = float(value)
    return out
