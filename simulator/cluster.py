"""The local cluster, wired: the API server and what runs around it.

`LocalCluster` is the one place the simulator's parts are built and started
(as kss's di.go builds its services): store, resource registry, API server,
the namespaces and system nodes every cluster has.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes.client import ApiClient, Configuration

from karpy.kubeclient.informer import Informer
from karpy.kubeclient.loop import Loop
from karpy.kubeclient.raw import RawClient
from karpy.simulator.apiserver import Server
from karpy.simulator.kubeconfig import write_kubeconfig
from karpy.simulator.kubelet import Kubelets, node_info
from karpy.simulator.resources import Registry
from karpy.simulator.scheduler import Scheduler, load_extenders
from karpy.simulator.store import HISTORY_PER_RESOURCE, Store
from karpy.simulator.workloads import Workloads

log = logging.getLogger("simulator")
# one connection per informer's watch, and one per parallel writer (scheduler, kubelets, workloads, events)
CONNECTIONS = 96
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
LOOP_BUSY_SHARE = 0.25


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
    and the workload controllers, which reach the API server over HTTP with the official client."""

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
        self._extenders = load_extenders(scheduler_config, url_prefix=extender_url)
        self._aws = (aws_endpoint_url, cluster_name, aws_region) if aws_endpoint_url and cluster_name else None
        self._informers: list[Informer] = []
        self._loops: list[Loop] = []
        self._api_client: ApiClient | None = None
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
        configuration = Configuration()
        configuration.host = self.url
        configuration.connection_pool_maxsize = CONNECTIONS
        self._api_client = ApiClient(configuration)
        self._api_client.user_agent = "karpy-simulator"    # its requests counted apart from its clients' (/metrics)
        client = RawClient(self._api_client)
        informers = {plural: Informer(client, version, plural) for version, plural in (
            ("v1", "nodes"), ("v1", "pods"), ("apps/v1", "deployments"), ("apps/v1", "replicasets"),
            ("apps/v1", "statefulsets"), ("apps/v1", "daemonsets"), ("batch/v1", "jobs"), ("policy/v1", "poddisruptionbudgets"))}
        kubelets = Kubelets(client, informers["nodes"], informers["pods"], boot_delay=self._boot_delay)
        scheduler = Scheduler(client, informers["nodes"], informers["pods"], extenders=self._extenders)
        workloads = Workloads(client, informers)
        # each pass reads every pod: in a burst of thousands, passes kicked by each event would leave the API
        # server (in this process) little CPU, so each loop is held to a share of the time
        loops = {name: Loop(name, reconcile, busy_share=LOOP_BUSY_SHARE) for name, reconcile in (
            ("kubelets", kubelets.reconcile), ("scheduler", scheduler.reconcile), ("workloads", workloads.reconcile))}
        if self._aws is not None:
            from karpy.simulator.aws import Registrar  # boto3 only when a cloud is attached

            endpoint, cluster, region = self._aws
            registrar = Registrar(client, informers["nodes"], endpoint_url=endpoint, cluster_name=cluster, region=region,
                                  boot_delay=self._boot_delay)
            loops["registrar"] = Loop("registrar", registrar.reconcile, resync_seconds=1.0)
        informers["nodes"].handlers += [loops["kubelets"].kick, loops["scheduler"].kick, loops["workloads"].kick]
        informers["pods"].handlers += [loops["kubelets"].kick, loops["scheduler"].kick, loops["workloads"].kick]
        for plural, informer in informers.items():
            if plural not in ("nodes", "pods"):
                informer.handlers.append(loops["workloads"].kick)
        self._informers = list(informers.values())
        self._loops = list(loops.values())
        for informer in self._informers:
            informer.start()
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for loop in self._loops:
            loop.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._api_client is not None:
            self._api_client.close()
