"""The operator, wired: settings -> client, state, cloud provider, controllers, probes, leader election.

This is the one place the controller's parts are built (Karpenter's
controllers.go); each part gets the clock and the client from here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from typing import Any, Callable

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from karpy.apis.timestamps import rfc3339
from karpy.apis.v1.disruption.feature_gates import FeatureGates
from karpy.controller.clock import Clock
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.fake import FakeCloudProvider
from karpy.controller.cloudprovider.types import CloudProvider
from karpy.controller.consolidation.controller import Consolidation
from karpy.controller.consolidation.controller import Settings as ConsolidationSettings
from karpy.controller.consolidation.drift import RESYNC_SECONDS as DRIFT_RESYNC_SECONDS
from karpy.controller.consolidation.drift import DriftMarker
from karpy.controller.interruption.controller import InterruptionHandler
from karpy.controller.launch.launcher import Launcher
from karpy.controller.launch.migration import migrate
from karpy.controller.leader import FencedClient, FencedCloud, LeaderElector, exit_process
from karpy.controller.metrics import CLUSTER, MeasuredCloud, cluster_samples
from karpy.controller.node.emptiness import Emptiness
from karpy.controller.node.expiration import Expiration
from karpy.controller.node.finalizer import Finalizer
from karpy.controller.node.garbagecollection import GarbageCollection
from karpy.controller.node.initialization import Initialization
from karpy.controller.node.repair import Repair
from karpy.controller.pod_metrics import PodTimings
from karpy.controller.provisioning.batcher import Batcher
from karpy.controller.provisioning.pending import is_provisionable
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.provisioning.scheduling.packers import PackingOptions
from karpy.controller.state import ClusterState, aws_defaults
from karpy.controller.termination.controller import Terminator
from karpy.kubeclient.loop import Loop
from karpy.kubeclient.outage import ApiUnreachable, backoff_seconds
from karpy.kubeclient.raw import RawClient, api_client
from karpy.serving.probes import serve_probes

log = logging.getLogger("controller")
PENDING_RESYNC_SECONDS = 10.0       # how often pods that still wait for capacity are planned again without an event


@dataclasses.dataclass(frozen=True)
class Settings:
    kubeconfig: str | None
    cloud_provider: str = "fake"
    cluster_name: str = "karpy"
    batch_idle_seconds: float = 1.0
    batch_max_seconds: float = 10.0
    metrics_port: int = 8000
    health_port: int = 8081
    host: str = "127.0.0.1"
    leader_elect: bool = False
    leader_namespace: str = "default"
    consolidation: ConsolidationSettings = ConsolidationSettings()
    interruption_queue: str | None = None         # SQS queue name (aws)
    packing: PackingOptions = PackingOptions()    # how new nodes are packed (--node-cost-per-hour)
    registration_timeout_seconds: float = 900.0   # a launched node not Ready by then is given up (Karpenter: 15 min)
    feature_gates: FeatureGates = FeatureGates()   # --feature-gates: Drift (Provisioners'), SpotToSpotConsolidation, ...


class Operator:
    def __init__(self, settings: Settings, catalog: Catalog | None, *, cloud: CloudProvider | None = None,
                 cloud_factory: Callable[[RawClient, ClusterState], CloudProvider] | None = None,
                 clock: Clock | None = None) -> None:
        """`catalog` for the fake provider; `cloud_factory` builds a provider that reads its own (aws)."""
        self.settings = settings
        self.clock = clock or Clock()
        self.api_client: ApiClient = api_client(settings.kubeconfig)
        # with an election, every write of every controller is fenced by the lease; the elector's own are not
        self.elector = LeaderElector(RawClient(self.api_client), self.clock, namespace=settings.leader_namespace,
                                     on_lost=exit_process) if settings.leader_elect else None
        self.client = (FencedClient(self.api_client, self.elector.still_leading) if self.elector
                       else RawClient(self.api_client))
        self.state = ClusterState(self.client, aws_defaults=aws_defaults(settings.cloud_provider, catalog))
        node_class_resolver: Any = None
        if cloud_factory is not None:
            self.cloud = cloud_factory(self.client, self.state)
            source: Catalog | Callable[[], Catalog] = self.cloud.catalog
            # EC2NodeClasses are AWS's: only its provider resolves them (the protocol does not name this)
            node_class_resolver = getattr(self.cloud, "node_class_resolver", None)
        else:
            assert catalog is not None
            self.cloud = cloud or FakeCloudProvider(self.client, catalog)
            source = catalog
        self.cloud = MeasuredCloud(self.cloud)
        if self.elector is not None:
            self.cloud = FencedCloud(self.cloud, self.elector.still_leading)
        self.batcher = Batcher(idle_seconds=settings.batch_idle_seconds, max_seconds=settings.batch_max_seconds)
        self.launcher = Launcher(self.state, self.cloud, lambda: self.provisioner.catalog)
        self.provisioner = Provisioner(self.state, self.cloud, source, launcher=self.launcher,
                                       packing=settings.packing, leading=self._leading)
        self.loops = [
            Loop("termination", Terminator(self.state, self.cloud, self.clock).reconcile, resync_seconds=2),
            Loop("initialization", Initialization(self.state, self.clock).reconcile, resync_seconds=5),
            # a pass reads every node, and a burst kicks it with each pod event: a fifth of the time at most
            Loop("emptiness", Emptiness(self.state, self.clock).reconcile, resync_seconds=5, busy_share=0.2),
            Loop("expiration", Expiration(self.state, self.clock).reconcile, resync_seconds=30),
            Loop("finalizer", Finalizer(self.state).reconcile, resync_seconds=30),
            Loop("garbagecollection", GarbageCollection(self.state, self.cloud, self.launcher, registration_timeout_seconds=
                                                        settings.registration_timeout_seconds).reconcile, resync_seconds=120),
        ]
        if settings.feature_gates.node_repair:
            self.loops.append(Loop("repair", Repair(self.state, self.clock).reconcile, resync_seconds=60))
        # consolidation looks on its own schedule: a pass simulates every candidate, too much for every pod event
        self.consolidation = Consolidation(self.state, self.cloud, lambda: self.provisioner.catalog, self.clock,
                                           self.provisioner.node_name, settings.consolidation, launcher=self.launcher)
        self.consolidation_loop = Loop("consolidation", self.consolidation.reconcile,
                                       resync_seconds=settings.consolidation.poll_seconds)
        # a NodePool's NodeClaims always drift (v1); a Provisioner's only behind the Drift gate (v0.21-v0.31); a node
        # marked drifted is consolidation's to replace, so it looks at once rather than at its next poll
        drift = DriftMarker(self.state, self.clock, provisioner_drift=settings.feature_gates.drift,
                            on_marked=self.consolidation_loop.kick)
        # it writes Consolidatable too, which each pod event on a node can change: a fifth of the time at most
        self.loops.append(Loop("drift", drift.reconcile, resync_seconds=DRIFT_RESYNC_SECONDS, busy_share=0.2))
        # claims are finished on their own schedule (and at start): pod and node events are provisioning's
        self.launch_loop = Loop("launch", self.launcher.reconcile, resync_seconds=10)
        if settings.interruption_queue:
            queue = self.cloud.interruption_queue(settings.interruption_queue)
            if queue is None:
                raise LookupError(f"--interruption-queue {settings.interruption_queue}: the {self.cloud.name} provider has no queue")
            handler = InterruptionHandler(self.state, queue, self.provisioner)
            self.loops.append(Loop("interruption", handler.reconcile, resync_seconds=1))
        if settings.cloud_provider == "aws" and node_class_resolver is not None:
            # here, not at the top: it needs botocore, which only the aws extra installs
            from karpy.controller.nodeclass.controller import RESYNC_SECONDS, NodeClassController

            node_classes = NodeClassController(self.client, node_class_resolver(), self.clock)
            self.loops.append(Loop("nodeclass", node_classes.reconcile, resync_seconds=RESYNC_SECONDS))
        self.stop_event = threading.Event()
        self._threads: list[threading.Thread] = []
        self.probes = serve_probes(settings.host, settings.health_port, ready=self.state.pods.synced.is_set, metrics=False)
        self.metrics = serve_probes(settings.host, settings.metrics_port, ready=lambda: True, metrics=True)
        CLUSTER.watch(self._cluster_samples)

    def _cluster_samples(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        claimed = self.state.in_flight.promised_pods()
        waiting = sum(1 for p in self.state.pending.pods() if p["metadata"].get("uid") not in claimed)
        return cluster_samples(pods=self.state.pods.items(), nodes=self.state.nodes.items(),
                               provisioners=self.state.provisioners.items(), pending_pods=waiting,
                               nodepools=self.state.nodepools.items(), now=self.clock.now())

    def _on_pod(self, kind: str, pod: dict) -> None:
        if kind != "DELETED" and is_provisionable(pod):
            self.batcher.trigger(pod["metadata"].get("uid"))

    def _on_gap_report(self, kind: str, event: dict) -> None:
        involved = event.get("involvedObject") or {}
        pod = self.state.pods.get(involved.get("namespace") or "", involved.get("name") or "")
        if kind != "DELETED" and pod is not None and is_provisionable(pod, gap_reported=True):
            self.batcher.trigger(pod["metadata"].get("uid"))

    def _leading(self) -> bool:
        return self.elector is None or self.elector.still_leading()

    def _provision_forever(self) -> None:
        unreachable = 0                    # batches in a row that found the API server unreachable
        last_batch = time.monotonic()
        while not self.stop_event.is_set():
            # pods still waiting get another look now and then, as Karpenter requeues them: a launch that failed
            # or left pods unbound (no room on the node after a restart) sends no new pod event to open a batch
            if time.monotonic() - last_batch > PENDING_RESYNC_SECONDS and len(self.state.pending):
                self.batcher.trigger()
                last_batch = time.monotonic()
            batch = self.batcher.wait(timeout=1.0)
            if batch is not None and self._leading():
                last_batch = time.monotonic()
                try:
                    self.provisioner.reconcile(batch, wait=False)   # launches and binds overlap the next batch
                    unreachable = 0
                except ApiUnreachable:     # said once by the outage reporter; retry after a growing pause
                    unreachable += 1
                    self.stop_event.wait(backoff_seconds(unreachable, base=1.0, cap=30.0))
                    self.batcher.trigger()
                except Exception:  # the worker's edge: log and keep provisioning
                    log.exception("Provisioning failed; retrying with the next batch")
                    self.batcher.trigger()

    def start(self) -> None:
        """Sync the caches, win the election (when asked to), then start every controller."""
        log.info("Starting karpy controller (cloud provider %s, cluster %s)", self.settings.cloud_provider, self.settings.cluster_name)
        if self.elector is not None:
            thread = threading.Thread(target=self.elector.run, args=(self.stop_event,), name="leader-election", daemon=True)
            thread.start()
            while not self.elector.leading.wait(0.5):
                if self.stop_event.is_set():
                    return
        self.state.on_change(self._on_pod, self.state.pods)
        self.state.on_change(PodTimings().on_pod, self.state.pods)     # karpenter_pods_{bound,startup}_duration_seconds
        self.state.on_change(self._on_gap_report, self.state.gap_reports)
        for loop in self.loops:
            if loop.name == "garbagecollection":
                continue             # on its own schedule, as Karpenter's: a pass lists every claim and instance
            if loop.name == "drift":     # drift follows edits of what launched the nodes; Consolidatable, pod events
                self.state.on_change(loop.kick, self.state.provisioners, self.state.nodepools, self.state.ec2nodeclasses,
                                     self.state.pods)
                continue
            if loop.name in ("expiration", "finalizer", "repair"):  # they read nodes and provisioners: pod events are not theirs
                self.state.on_change(loop.kick, self.state.nodes, self.state.provisioners, self.state.nodepools)
                continue
            self.state.on_change(loop.kick, self.state.nodes, self.state.pods, self.state.provisioners, self.state.nodepools)
        self.state.start()
        try:                             # finish launches a previous process left, before planning any new one
            migrate(self.state, now=rfc3339(dt.datetime.now(dt.timezone.utc)))   # records an older karpy wrote
            self.launcher.reconcile()
        except ApiException as e:
            log.error("Reading node claims, %s; is the NodeClaim CRD (manifests/crds/) installed?", e.reason)
        for pod in self.state.pods.items():
            self._on_pod("ADDED", pod)
        for loop in self.loops + [self.consolidation_loop, self.launch_loop]:
            loop.gate = self._leading
            loop.start()
        thread = threading.Thread(target=self._provision_forever, name="provisioning", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        CLUSTER.watch(None)
        self.stop_event.set()
        self.batcher.stop()
        for loop in self.loops + [self.consolidation_loop, self.launch_loop]:
            loop.stop()
        self.state.stop()
        for thread in self._threads:
            thread.join(timeout=3)
        if self.elector is not None:
            self.elector.release()
        for server in (self.probes, self.metrics):
            server.shutdown()
            server.server_close()
        self.api_client.close()
