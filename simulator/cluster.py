"""The local cluster, wired: the API server and what runs around it.

`LocalCluster` is the one place the simulator's parts are built and started
(as kss's di.go builds its services): store, resource registry, API server,
the namespaces and system nodes every cluster has.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from karpy.simulator.apiserver import Server
from karpy.simulator.controllers import ControllersProcess, Options
from karpy.simulator.kubeconfig import write_kubeconfig
from karpy.simulator.kubelet import node_info
from karpy.simulator.resources import Registry
from karpy.simulator.scheduler import load_extenders
from karpy.simulator.store import HISTORY_PER_RESOURCE, Store

log = logging.getLogger("simulator")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


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
    """The API server, and around it (unless `controllers` is False) the scheduler, the kubelets
    and the workload controllers, which reach the API server over HTTP with the official client from
    a child process (simulator/controllers.py), so the two sides use two cores."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, system_nodes: int = 1,
                 history: int = HISTORY_PER_RESOURCE, controllers: bool = True, boot_delay: float = 2.0,
                 scheduler_config: str | None = None, extender_url: str | None = None,
                 aws_endpoint_url: str | None = None, cluster_name: str | None = None, aws_region: str = "us-east-1") -> None:
        self.store = Store(history=history)
        self.registry = Registry()
        self.server = Server((host, port), self.store, self.registry)
        self._threads: list[threading.Thread] = []
        self._controllers = controllers
        self._boot_delay = boot_delay
        load_extenders(scheduler_config, url_prefix=extender_url)   # a bad configuration is told here, not in the child
        self._scheduler_config = scheduler_config
        self._extender_url = extender_url
        self._aws_endpoint_url, self._cluster_name, self._aws_region = aws_endpoint_url, cluster_name, aws_region
        self._controllers_process: ControllersProcess | None = None
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
        if self._controllers:
            self._start_controllers()

    def _start_controllers(self) -> None:
        self._controllers_process = ControllersProcess(Options(
            server=self.url, boot_delay=self._boot_delay, scheduler_config=self._scheduler_config,
            extender_url=self._extender_url, aws_endpoint_url=self._aws_endpoint_url, cluster_name=self._cluster_name,
            aws_region=self._aws_region))
        self._controllers_process.start()

    def stop(self) -> None:
        if self._controllers_process is not None:
            self._controllers_process.stop()   # first: its watches end with it, not with the server
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
