"""`karpy sim` as a user runs it: kubeconfig first, the DESIGN's system nodes, a clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port
from tests.expectations import eventually

pytestmark = pytest.mark.slow      # starts karpy server processes


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_karpy_sim_serves_kubectl_and_stops_within_five_seconds(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(port), "--kubeconfig-out",
                                str(kubeconfig), "--system-nodes", "3"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        eventually(kubeconfig.exists)
        assert yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"] == f"http://127.0.0.1:{port}"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

        def nodes() -> str:
            result = subprocess.run(["kubectl", "get", "nodes", "-o", "name"], capture_output=True, text=True, env=env, timeout=30)
            return result.stdout if result.returncode == 0 else ""

        assert eventually(nodes).split() == ["node/system-0", "node/system-1", "node/system-2"]
        namespaces = subprocess.run(["kubectl", "get", "ns", "-o", "name"], capture_output=True, text=True, env=env).stdout
        assert "namespace/default" in namespaces and "namespace/kube-system" in namespaces
        crds = subprocess.run(["kubectl", "get", "crds", "-o", "name"], capture_output=True, text=True, env=env).stdout
        assert crds.strip() == ""
        # a watch held open must not delay the stop
        watcher = subprocess.Popen(["kubectl", "get", "pods", "-w"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        started = time.monotonic()
        process.send_signal(sig)
        process.wait(timeout=10)
        assert time.monotonic() - started < 5
        watcher.kill()
        watcher.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_cluster_controllers_process_stops_when_karpy_sim_is_killed(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen([sys.executable, "-m", "karpy.main", "sim", "--port", str(free_port()), "--kubeconfig-out",
                                str(kubeconfig)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    children: list[int] = []
    try:
        eventually(kubeconfig.exists)

        def controllers() -> list[int]:
            return [int(c) for task in Path(f"/proc/{process.pid}/task").iterdir() for c in (task / "children").read_text().split()]

        children = eventually(controllers)
        assert "karpy.simulator.controllers" in Path(f"/proc/{children[0]}/cmdline").read_text()
        process.kill()                                  # no chance to stop its child: the child notices by itself
        process.wait()
        assert eventually(lambda: not Path(f"/proc/{children[0]}").exists() or
                          Path(f"/proc/{children[0]}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in children:
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
