"""Local clusters reached by the official client and kubectl over HTTP. The module-wide `kube` is the API
server alone (no scheduler or controllers acting behind a test's back); `start()` makes whole clusters."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

from karpy.simulator.cluster import LocalCluster


class Kube:
    """The cluster, an official-client ApiClient for it, and kubectl pointed at it."""

    def __init__(self, cluster: LocalCluster, kubeconfig: Path) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api_client)
        self.apps = kubernetes.client.AppsV1Api(self.api_client)
        self.policy = kubernetes.client.PolicyV1Api(self.api_client)
        self.custom = kubernetes.client.CustomObjectsApi(self.api_client)
        self.admission = kubernetes.client.AdmissionregistrationV1Api(self.api_client)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result


def start(tmp: Path, **kwargs: Any) -> tuple[LocalCluster, Kube]:
    cluster = LocalCluster(**kwargs)
    kubeconfig = tmp / "kubeconfig"
    cluster.write_kubeconfig(str(kubeconfig))
    cluster.start()
    return cluster, Kube(cluster, kubeconfig)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    cluster, k = start(tmp_path_factory.mktemp("cluster"), system_nodes=2, history=200, controllers=False)
    yield k
    k.api_client.close()
    cluster.stop()
