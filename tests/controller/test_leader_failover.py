"""Two `karpy controller --leader-elect` replicas on the local cluster: the leader is paused (SIGSTOP) until
the other takes the Lease over, pods arrive, then the old leader resumes. It must stand down (exit non-zero)
and launch nothing: each pod needs a node of its own, and there is exactly one node per pod."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import kubernetes
import pytest

from tests.builders import catalog, instance_type, provisioner, unschedulable_pod
from tests.expectations import eventually
from tests.simulator.conftest import start

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parents[2]
PODS = 6


def test_a_paused_leader_resumes_as_a_follower_and_launches_nothing(tmp_path: Path) -> None:
    # one 2-cpu type: pods of 1200m need a node each, so any second launch for a pod is a surplus node
    small = instance_type("small", cpu="2", memory="4Gi", pods="10")
    (tmp_path / "catalog.json").write_text(json.dumps(catalog(small)))
    cluster, kube = start(tmp_path, system_nodes=0, boot_delay=0.2)
    coordination = kubernetes.client.CoordinationV1Api(kube.api_client)
    logs: list[IO[bytes]] = []
    replicas: list[subprocess.Popen[bytes]] = []
    try:
        kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
        kube.custom.create_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", provisioner("default"))
        for i in range(2):
            logs.append(open(tmp_path / f"controller-{i}.log", "wb"))
            replicas.append(subprocess.Popen(
                [sys.executable, "-m", "karpy.main", "controller", "--kubeconfig", str(kube.kubeconfig),
                 "--catalog", str(tmp_path / "catalog.json"), "--metrics-port", "0", "--health-port", "0",
                 "--leader-elect", "--batch-idle-duration", "0.3", "--batch-max-duration", "2"],
                stdout=logs[i], stderr=subprocess.STDOUT, env={**os.environ}))

        def holder() -> str:
            try:
                return coordination.read_namespaced_lease("karpy-leader-election", "default").spec.holder_identity or ""
            except kubernetes.client.ApiException:
                return ""
        first = eventually(holder, timeout=20)
        # each replica logs its identity when it leads: that tells which process holds the Lease
        leader = _leader_index(tmp_path, first)
        old, new = replicas[leader], replicas[1 - leader]

        os.kill(old.pid, signal.SIGSTOP)
        try:
            eventually(lambda: holder() not in ("", first), timeout=20)        # lease (10 s) seen unrenewed: taken over
            for i in range(PODS):
                kube.core.create_namespaced_pod("default", unschedulable_pod(f"web-{i}", cpu="1200m"))
        finally:
            os.kill(old.pid, signal.SIGCONT)

        assert old.wait(timeout=15) != 0                                       # stood down: exited, non-zero
        assert new.poll() is None

        def placed() -> dict[str, str]:
            pods = kube.core.list_namespaced_pod("default").items
            bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
            return bound if len(bound) == PODS else {}
        bound = eventually(placed, timeout=20)
        nodes = [n.metadata.name for n in kube.core.list_node().items]
        assert sorted(nodes) == sorted(set(bound.values())) and len(nodes) == PODS     # one node per pod, no surplus
    finally:
        for p in replicas:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for f in logs:
            f.close()
        kube.api_client.close()
        cluster.stop()


def _leader_index(tmp_path: Path, identity: str) -> int:
    """Which replica logged `identity` on becoming leader."""
    def find() -> int | None:
        for i in range(2):
            if identity in (tmp_path / f"controller-{i}.log").read_text():
                return i + 1                 # truthy for eventually(); shifted back below
        return None
    return int(eventually(find, timeout=10)) - 1
