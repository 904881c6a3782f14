"""The local cluster, wired: the API server and what runs around it.

`LocalCluster` is the one place the simulator's parts are built and started
(as kss's di.go builds its services): store, resource registry, API server,
the namespaces and system nodes every cluster has.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from simulator.apiserver import Server
from simulator.kubeconfig import write_kubeconfig
from simulator.resources import Registry
from simulator.store import HISTORY_PER_RESOURCE, Store

log = logging.getLogger("simulator")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def node_info(name: str) -> dict[str, str]:
    """status.nodeInfo as a kubelet reports it (every field the API declares required)."""
    return {"kubeletVersion": "v1.31.0", "kubeProxyVersion": "v1.31.0", "osImage": "karpy local node",
            "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0", "architecture": "amd64",
            "operatingSystem": "linux", "machineID": name, "systemUUID": name, "bootID": name}


def system_node(name: str) -> dict[str, Any]:
    """A ready node of the static node group karpy itself runs on (m5.large in us-east-1a)."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a",
            "topology.kubernetes.io/region": "us-east-1", "karpenter.sh/capacity-type": "on-demand"}},
        "spec": {"providerID": f"local:///us-east-1a/{name}"},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "29", "ephemeral-storage": "20Gi"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            "nodeInfo": node_info(name),
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}, {"type": "Hostname", "address": name}],
        },
    }


class LocalCluster:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, system_nodes: int = 1,
                 history: int = HISTORY_PER_RESOURCE) -> None:
        self.store = Store(history=history)
        self.registry = Registry()
        self.server = Server((host, port), self.store, self.registry)
        self._threads: list[threading.Thread] = []
        for name in SYSTEM_NAMESPACES:
            self.store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
                                             "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
        for i in range(system_nodes):
            self.store.create("nodes", system_node(f"system-{i}"))

    @property
    def url(self) -> str:
        return self.server.url

    def write_kubeconfig(self, path: str) -> None:
        write_kubeconfig(path, self.url)

    def start(self) -> None:
        thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, name="apiserver", daemon=True)
        thread.start()
        self._threads.append(thread)
        log.info("Local cluster serving on %s", self.url)

    def stop(self) -> None:
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
