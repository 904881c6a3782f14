"""Provisioning: launch nodes for the pods kube-scheduler could not place, and bind the pods to them.

Each batch reads the cluster state, plans with the scheduling core (the one
`karpy plan` uses) counting nodes already launched, launches every planned
node through the cloud provider, and binds its pods through `pods/binding`
at once, as Karpenter v0.16 did. Launch names are chosen before the launch,
so a retry after a crash finds the node it already made.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import secrets
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter, Gauge, Histogram

from karpy.apis import labels as wk
from karpy.apis.conditions import unschedulable
from karpy.apis.resources import Resources
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import CloudProvider, InsufficientCapacity, NodeRequest
from karpy.controller.provisioning.scheduling.optimize import PackingOptions
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import PlannedNode, Scheduler
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.provisioning")
PENDING_PODS = Gauge("karpy_provisioner_pending_pods", "Provisionable pods seen in the last batch")
NODES_LAUNCHED = Counter("karpy_nodes_created_total", "Nodes launched", ["provisioner"])
LAUNCH_ERRORS = Counter("karpy_cloudprovider_errors_total", "Failed launches", ["provisioner", "error"])
SCHEDULING_SECONDS = Histogram("karpy_provisioner_scheduling_duration_seconds", "Time to plan a batch")
LAUNCH_SECONDS = Histogram("karpy_nodes_launch_duration_seconds", "Time to launch one node")
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def is_provisionable(pod: dict[str, Any], gap_reported: bool = False) -> bool:
    """Pending, unbound, not terminating, and marked Unschedulable by kube-scheduler (or reported as a capacity
    gap by the scheduler extender, which is sooner)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp") or status.get("phase", "Pending") != "Pending":
        return False
    if any(r.get("kind") == "DaemonSet" for r in pod["metadata"].get("ownerReferences") or []):
        return False
    return gap_reported or unschedulable(pod) is not None


def node_request(planned: PlannedNode, *, annotations: dict[str, str] | None = None) -> NodeRequest:
    """What the cloud provider launches for a planned node."""
    labels = {k: v for k, v in planned.labels.items()
              if k not in (wk.INSTANCE_TYPE, wk.ZONE, wk.CAPACITY_TYPE)}   # the launched offering decides these
    return NodeRequest(node_name=planned.name, provisioner=planned.provisioner, requirements=planned.requirements,
                       instance_type_options=planned.options, labels=labels,
                       taints=tuple(t.to_manifest() for t in planned.taints), annotations=dict(annotations or {}))


def provisionable_pods(state: ClusterState) -> list[dict[str, Any]]:
    """The pods in the cache that wait for capacity karpy should launch."""
    gaps = state.gap_pod_uids()
    return [p for p in state.pods.items() if is_provisionable(p, p["metadata"].get("uid") in gaps)]


class Provisioner:
    def __init__(self, state: ClusterState, cloud: CloudProvider, catalog: Catalog | Callable[[], Catalog], *,
                 parallelism: int = 32, packing: PackingOptions = PackingOptions()) -> None:
        self.state = state
        self.packing = packing
        self.cloud = cloud
        self._catalog = catalog          # or where to read it: the AWS provider's comes from EC2, cached
        # launches side by side, enough of them for the AWS provider to batch a burst into few CreateFleet calls
        self._pool = concurrent.futures.ThreadPoolExecutor(parallelism, thread_name_prefix="launch")

    @property
    def catalog(self) -> Catalog:
        return self._catalog if isinstance(self._catalog, Catalog) else self._catalog()

    def node_name(self, provisioner: str, _: int) -> str:
        """A fresh name for a node to launch: the provisioner's name and five random letters."""
        while True:
            name = f"{provisioner}-{''.join(secrets.choice(ALPHABET) for _ in range(5))}"
            if self.state.nodes.get("", name) is None:
                return name

    def reconcile(self) -> None:
        """Plan and launch for every provisionable pod now in the cache."""
        provisionable = provisionable_pods(self.state)
        PENDING_PODS.set(len(provisionable))
        if not provisionable:
            return
        log.info("Found %d provisionable pod(s)", len(provisionable))
        snapshot = self.state.snapshot(self.catalog, self.state.bound_pods() + provisionable)
        started = time.perf_counter()
        results = Scheduler(snapshot, name_node=self.node_name, packing=self.packing).solve()
        SCHEDULING_SECONDS.observe(time.perf_counter() - started)
        self.state.failures.report_results(results, self.state.provisioners.items())
        if results.new_nodes:
            pods = sum(len(n.pods) for n in results.new_nodes)
            options = sorted({t.name for n in results.new_nodes for t in n.options[:10]})
            log.info("Computed packing of %d node(s) for %d pod(s) with instance type option(s) [%s]",
                     len(results.new_nodes), pods, " ".join(options))
        # launches are independent: do them side by side, as Karpenter does in goroutines
        list(self._pool.map(self._launch, results.new_nodes))
        self._await_cache([n.name for n in results.new_nodes])
        for key, reason in results.unschedulable.items():
            if key in results.failed_pods:
                continue                    # reported once, above
            log.info("Could not schedule pod %s, %s", key, reason)
            namespace, name = key.split("/", 1)
            pod = next((p for p in provisionable if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name), None)
            if pod is not None:
                events.record(self.state.client, pod, reason="FailedProvisioning", message=reason, component="karpy",
                              event_type="Warning")
        self._update_status()

    def _await_cache(self, names: list[str], timeout: float = 5.0) -> None:
        """Let the watch deliver the launched nodes, so the next batch counts them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self.state.nodes.get("", n) is None for n in names):
            time.sleep(0.02)

    def launch_replacements(self, node_name: str) -> int:
        """Launch capacity for the pods of node `node_name`, planned as if it were gone, before it is
        drained; its pods are not bound (they are still running): kube-scheduler places them again.
        Returns the number of nodes launched."""
        snapshot = self.state.snapshot(self.catalog, self.state.bound_pods())
        nodes = []
        for n in snapshot.nodes:
            if n["metadata"]["name"] == node_name:
                n = {**n, "metadata": {**n["metadata"], "deletionTimestamp": "1970-01-01T00:00:00Z"}}
            elif n["metadata"].get("deletionTimestamp"):
                continue                    # its pods are provisioning's business once they are pending
            nodes.append(n)
        going = {n["metadata"]["name"] for n in nodes}
        pods = [p for p in snapshot.pods if p.node_name in going]
        results = Scheduler(dataclasses.replace(snapshot, nodes=nodes, pods=pods), name_node=self.node_name,
                            packing=self.packing).solve()
        list(self._pool.map(lambda planned: self._launch(planned, bind=False), results.new_nodes))
        return len(results.new_nodes)

    def _launch(self, planned: PlannedNode, *, bind: bool = True) -> None:
        # the extender keeps this capacity for these pods until they are bound
        request = node_request(planned, annotations={wk.LAUNCHED_FOR: ",".join(p.key for p in planned.pods)})
        started = time.perf_counter()
        try:
            instance = self.cloud.create(request)
        except InsufficientCapacity as e:
            LAUNCH_ERRORS.labels(planned.provisioner, "InsufficientCapacity").inc()
            log.error("Could not launch node, %s; %d pod(s) stay pending", e, len(planned.pods))
            self._tell(planned, "LaunchFailed", f"Could not launch a node for this pod: {e}")
            return
        except (RuntimeError, ValueError, ApiException, OSError) as e:   # ValueError: a template that cannot work
            LAUNCH_ERRORS.labels(planned.provisioner, type(e).__name__).inc()
            log.error("Could not launch node %s, %s", planned.name, e)
            self._tell(planned, "LaunchFailed", f"Could not launch a node for this pod: {e}")
            return
        LAUNCH_SECONDS.observe(time.perf_counter() - started)
        NODES_LAUNCHED.labels(planned.provisioner).inc()
        log.info("Launched instance: %s, hostname: %s, type: %s, zone: %s, capacityType: %s", instance.provider_id,
                 instance.node_name, instance.labels.get(wk.INSTANCE_TYPE), instance.labels.get(wk.ZONE),
                 instance.labels.get(wk.CAPACITY_TYPE))
        for warning in instance.warnings:
            self._tell(planned, "LaunchRetried", f"{warning}; launched {instance.labels.get(wk.INSTANCE_TYPE)} "
                       f"as node {instance.node_name}")
        if bind:
            bound = sum(1 for pod in planned.pods if self._bind(pod, instance.node_name))  # sequential within a node
            log.info("Bound %d pod(s) to node %s", bound, instance.node_name)

    def _tell(self, planned: PlannedNode, reason: str, message: str) -> None:
        """A Warning Event on each pod the node was for: `kubectl describe pod` shows why it waits."""
        for pod in planned.pods:
            events.record(self.state.client, {"apiVersion": "v1", "kind": "Pod", **pod.raw}, reason=reason,
                          message=message, component="karpy", event_type="Warning")

    def _bind(self, pod: PodInfo, node: str) -> bool:
        try:
            self.state.client.bind(pod.namespace, pod.name, node)
            return True
        except ApiException as e:
            if e.status not in (404, 409):    # gone, or kube-scheduler bound it first: both fine
                log.error("Binding pod %s to node %s, %s", pod.key, node, e.reason)
            return False

    def _update_status(self) -> None:
        """status.resources: the capacity of every node each provisioner launched."""
        totals: dict[str, Resources] = {}
        for node in self.state.nodes.items():
            owner = self.state.ours(node)
            if owner:
                status = node.get("status") or {}
                totals[owner] = totals.get(owner, Resources()) + Resources.parse(status.get("capacity") or status.get("allocatable"))
        for p in self.state.provisioners.items():
            name = p["metadata"]["name"]
            wanted = totals.get(name, Resources()).to_manifest()
            if ((p.get("status") or {}).get("resources") or {}) != wanted:
                try:
                    self.state.client.patch(path_of("karpenter.sh/v1alpha5", "provisioners", name=name, subresource="status"),
                                            {"status": {"resources": wanted}})
                except ApiException as e:
                    if e.status != 404:
                        log.warning("Updating status of provisioner %s, %s", name, e.reason)
