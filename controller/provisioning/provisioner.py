"""Provisioning: launch nodes for the pods kube-scheduler could not place, and bind the pods to them.

Each batch takes its pods from the pending index by uid (the batcher gathered
them; a batch opened without pods takes every pod that waits), reads each
once into the scheduler's pod record (`PodInfo`, which then travels to the
launch and its binds), plans with the scheduling core (the one
`karpy plan` uses) counting nodes already launched, launches every planned
node through the launch module (controller/launch/), which records each
launch as a NodeClaim before the cloud call and binds its pods through
`pods/binding` at once, as Karpenter v0.16 did. Capacity for the pods of
an interrupted node goes the same way (`launch_replacements`), unbound. Pods a claim was launched
for are left out of the batch: their capacity exists or is on its way, even
before the watch shows them bound.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import secrets
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from karpy.apis.resources import Resources
from karpy.apis.v1.nodepool import KIND as NODEPOOL_KIND
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import CloudProvider
from karpy.controller.launch import notices
from karpy.controller.launch.launcher import Launcher, Pause, node_request
from karpy.controller.metrics import SCHEDULING_SECONDS
from karpy.controller.provisioning.batcher import Batch
from karpy.controller.provisioning.pending import is_provisionable
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.reasons import Why
from karpy.controller.provisioning.scheduling.scheduler import FIRST_CHUNK_PODS, ClusterSnapshot, PlannedNode, Scheduler
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.provisioning")
__all__ = ["Provisioner", "is_provisionable", "node_request", "provisionable_pods"]
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def provisionable_pods(state: ClusterState) -> list[dict[str, Any]]:
    """The pods in the cache that wait for capacity karpy should launch (from the index the watch keeps)."""
    return state.pending.pods()


def leaving(snapshot: ClusterSnapshot, node_name: str, deleting: set[str]) -> ClusterSnapshot:
    """`snapshot` with node `node_name` planned as leaving (the scheduler places its pods again), and without the
    nodes being deleted (`deleting`, the in-flight index's) and their pods: those become pending, and
    provisioning's, once drained."""
    gone = deleting - {node_name}
    nodes = [n for n in snapshot.nodes if n["metadata"]["name"] not in gone]
    kept = {n["metadata"]["name"] for n in nodes}
    return dataclasses.replace(snapshot, nodes=nodes, pods=[p for p in snapshot.pods if p.node_name in kept],
                               leaving=snapshot.leaving | {node_name})


def _log_failure(future: concurrent.futures.Future[str | None]) -> None:
    """A launch nobody waits for still says why it failed (the launch loop finishes its claim later)."""
    if not future.cancelled() and isinstance(future.exception(), Exception):
        log.error("Launching a node failed, %s", future.exception())


class _FirstLaunch:
    """From a batch's start until its first chunk is handed to the launch workers, the planning thread comes first:
    the last batch's launch and bind workers are paused before their next request (for a second at most: Pause)."""

    def __init__(self, pause: Pause) -> None:
        self._open = True
        self._pause = pause
        pause.pause()

    def end(self) -> None:
        if self._open:
            self._open = False
            self._pause.resume()


class Provisioner:
    def __init__(self, state: ClusterState, cloud: CloudProvider, catalog: Catalog | Callable[[], Catalog], *,
                 parallelism: int = 32, launcher: Launcher | None = None,
                 packing: PackingOptions = PackingOptions(), leading: Callable[[], bool] = lambda: True,
                 first_chunk: int = FIRST_CHUNK_PODS) -> None:
        """`leading` says whether this replica may launch now (asked before each chunk of a plan is launched);
        `first_chunk` is the size of a batch's first chunk (Scheduler.solve)."""
        self.state = state
        self.leading = leading
        self.first_chunk = first_chunk
        self.packing = packing
        self.cloud = cloud
        self._catalog = catalog          # or where to read it: the AWS provider's comes from EC2, cached
        self.launcher = launcher or Launcher(state, cloud, lambda: self.catalog)
        # launches side by side, enough of them for the AWS provider to batch a burst into few CreateFleet calls
        self._pool = concurrent.futures.ThreadPoolExecutor(parallelism, thread_name_prefix="launch")

    @property
    def catalog(self) -> Catalog:
        return self._catalog if isinstance(self._catalog, Catalog) else self._catalog()

    def node_name(self, provisioner: str, _: int) -> str:
        """A fresh name for a node to launch: the provisioner's name and five random letters."""
        while True:
            name = f"{provisioner}-{''.join(secrets.choice(ALPHABET) for _ in range(5))}"
            if self.state.nodes.get("", name) is None:    # a clash with a claim's name fails that launch, retried
                return name

    def reconcile(self, batch: Batch | None = None, *, wait: bool = True) -> None:
        """Plan and launch for the pods of `batch` that still wait (every provisionable pod when `batch` is None or
        was opened without pods). With `wait` False the launches (and their binds) go on in the background and the
        next batch may open meanwhile: their pods count as claimed from before they are handed over, and their
        Nodes are left out of its plan until the watch shows their pods bound."""
        window = _FirstLaunch(self.launcher.pause)
        try:
            self._reconcile(batch, wait=wait, window=window)
        finally:
            window.end()

    def _reconcile(self, batch: Batch | None, *, wait: bool, window: _FirstLaunch) -> None:
        if batch is None or batch.everything:
            provisionable = provisionable_pods(self.state)
        else:
            provisionable = self.state.pending.by_uid(batch.uids)
        if provisionable:
            on_the_way = self.state.in_flight.promised_pods()
            provisionable = [p for p in provisionable if p["metadata"].get("uid") not in on_the_way]
        if not provisionable:
            return
        log.info("Found %d provisionable pod(s)", len(provisionable))
        waiting = self.state.pod_infos(provisionable)        # each read once; these records go on to the binds
        snapshot = self.state.snapshot(self.catalog, self.state.bound_pods(), parsed=waiting)
        self._plan_and_launch(snapshot, waiting, bind=True, wait=wait, window=window)

    def launch_replacements(self, node_name: str) -> int:
        """Launch capacity for the pods of node `node_name` before it is drained (an interruption): planned and
        launched as a batch of pending pods is, with the node taken as being deleted, so the scheduler places its
        pods again. They are not bound (they are still running): kube-scheduler places them once they are evicted.
        Returns the number of nodes launched."""
        snapshot = self.state.snapshot(self.catalog, self.state.bound_pods())
        snapshot = leaving(snapshot, node_name, self.state.in_flight.leaving_nodes(snapshot.nodes))
        waiting = [p for p in snapshot.pods if p.node_name == node_name and not p.terminal and not p.deleting]
        if not waiting:
            return 0
        log.info("Found %d pod(s) on node %s to launch replacement capacity for", len(waiting), node_name)
        window = _FirstLaunch(self.launcher.pause)
        try:
            return len(self._plan_and_launch(snapshot, waiting, bind=False, wait=True, window=window))
        finally:
            window.end()

    def _plan_and_launch(self, snapshot: ClusterSnapshot, waiting: list[PodInfo], *, bind: bool, wait: bool,
                         window: _FirstLaunch) -> list[str]:
        """Plan `waiting` (the pods `snapshot` has without a node, or on a node being deleted) with the scheduling
        core, launch each chunk of the plan as soon as it is decided, and report the pods it could not place.
        With `bind` the launched nodes' pods are bound to them. Returns the nodes launched (with `wait`)."""
        landing = self.state.in_flight.landing_nodes()          # read after the snapshot's nodes: covers every one of them
        if landing:
            snapshot = dataclasses.replace(snapshot, nodes=[n for n in snapshot.nodes if n["metadata"]["name"] not in landing],
                                           pods=[p for p in snapshot.pods if p.node_name not in landing])
        started = time.perf_counter()
        launches: list[concurrent.futures.Future[str | None]] = []
        lost: list[bool] = []

        def launch_decided(nodes: list[PlannedNode]) -> bool:
            """Launch a chunk of the plan as soon as it is decided (while leading: else the plan ends here)."""
            if not self.leading():
                lost.append(True)
                return False
            options = sorted({t.name for n in nodes for t in n.options[:10]})
            log.info("Computed packing of %d node(s) for %d pod(s) with instance type option(s) [%s]",
                     len(nodes), sum(len(n.pods) for n in nodes), " ".join(options))
            launches.extend(self._launch_all(nodes, bind=bind))
            window.end()                  # the first launches are on their way
            return True

        scheduler = Scheduler(snapshot, name_node=self.node_name, packing=self.packing)
        self._report_empty_nodepools(scheduler)
        results = scheduler.solve(on_decided=launch_decided, first_chunk=self.first_chunk)
        SCHEDULING_SECONDS.observe(time.perf_counter() - started)
        for cut in results.cut_short:        # the safety cap made the plan depend on this machine's speed
            log.info("Cut packing short: %s", cut)
        if lost:
            log.info("Stopped planning %d pod(s): no longer leading", len(waiting))
            if wait:                        # the chunks handed over before go on (each launch step is fenced)
                concurrent.futures.wait(launches)
            return []
        self.state.failures.report_results(
            results, [o for name in results.failed_provisioners if (o := self.state.pool_object(name)) is not None])
        launched = [n for n in (f.result() for f in launches) if n] if wait else []
        if wait:
            self._await_cache(launched)
        # pods are told in v1's words where only NodePools could have scheduled them, else in v0.16's
        nodepools_only = bool(snapshot.provisioners) and all(isinstance(p, NodePoolProvisioner) for p in snapshot.provisioners)
        for pod in waiting:
            why = results.unschedulable.get(pod.key)
            if why is None or why.kind is Why.FAILED:
                continue                    # placed, or reported once, above
            log.info("Could not schedule pod %s, %s", pod.key, why)
            notice = notices.failed_to_schedule(why.text) if nodepools_only else notices.failed_to_provision(why.text)
            events.record(self.state.client, pod.raw, reason=notice.reason, message=notice.message, component="karpy",
                          event_type=notice.type)
        self._update_status()
        return launched

    def _report_empty_nodepools(self, scheduler: Scheduler) -> None:
        """v1 warns on a NodePool whose requirements no instance type satisfies (once while that stays so)."""
        for template in scheduler.templates:
            raw = self.state.pool_object(template.name)
            if raw is None or raw["kind"] != NODEPOOL_KIND:
                continue
            if template.instance_types:
                self.state.failures.forget(NODEPOOL_KIND, raw["metadata"].get("uid") or template.name)
            else:
                notice = notices.no_compatible_instance_types()
                self.state.failures.report(raw, kind=NODEPOOL_KIND, reason=notice.reason, message=notice.message)

    def _launch_all(self, nodes: list[PlannedNode], *, bind: bool) -> list[concurrent.futures.Future[str | None]]:
        """Hand every planned node to a launch worker (launches are independent: side by side, as Karpenter does in
        goroutines); its pods count as claimed from now until its claim is written."""
        futures = []
        for planned in nodes:
            uids = [p.uid for p in planned.pods if p.uid]
            self.state.in_flight.reserve(uids)
            future = self._pool.submit(self._launch_one, planned, uids, bind)
            future.add_done_callback(_log_failure)
            futures.append(future)
        return futures

    def _launch_one(self, planned: PlannedNode, uids: list[str], bind: bool) -> str | None:
        try:
            return self.launcher.launch(planned, bind=bind)
        finally:
            self.state.in_flight.release(uids)

    def _await_cache(self, names: list[str], timeout: float = 5.0) -> None:
        """Let the watch deliver the launched nodes, so the next batch counts them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self.state.nodes.get("", n) is None for n in names):
            time.sleep(0.02)

    def _update_status(self) -> None:
        """status.resources: the capacity of every node each provisioner launched."""
        totals: dict[str, Resources] = {}
        for node in self.state.nodes.items():
            owner = self.state.ours(node)
            if owner:
                status = node.get("status") or {}
                totals[owner] = totals.get(owner, Resources()) + Resources.parse(status.get("capacity") or status.get("allocatable"))
        counts = collections.Counter(self.state.ours(node) for node in self.state.nodes.items())
        pools = [(p, "karpenter.sh/v1alpha5", "provisioners") for p in self.state.provisioners.items()] + \
                [(p, "karpenter.sh/v1", "nodepools") for p in self.state.nodepools.items()]
        for p, api_version, plural in pools:
            name = p["metadata"]["name"]
            wanted: dict[str, Any] = {"resources": totals.get(name, Resources()).to_manifest()}
            if plural == "nodepools":
                wanted["nodes"] = counts[name]                  # v1 also counts a NodePool's nodes
            status = p.get("status") or {}
            if any((status.get(field) or ({} if field == "resources" else 0)) != value for field, value in wanted.items()):
                try:
                    self.state.client.patch(path_of(api_version, plural, name=name, subresource="status"),
                                            {"status": wanted})
                except ApiException as e:
                    if e.status != 404:
                        log.warning("Updating status of provisioner %s, %s", name, e.reason)
