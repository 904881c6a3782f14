"""What the benchmarks share: a free loopback port, a process's peak resident memory, a counter from /metrics."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a running process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metric(port: int, name: str) -> dict[str, float]:
    """Samples of counter `name` from the /metrics on 127.0.0.1:`port`, by their label text ('{result="evicted"}')."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):] or "{}"] = float(value)
    return out
