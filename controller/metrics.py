"""The controller's metrics under Karpenter's names and labels, so its dashboards and alerts read karpy: v0.16's for
Provisioners, and v1's (`karpenter_nodepools_*`, `karpenter_nodeclaims_*`, `karpenter_nodes_*_total`) for NodePools
and what they launch (the v1 gauges' samples are computed in nodepool_metrics.py).

Two kinds. Events are counted where they happen (`NODES_CREATED` by the launcher, `NODES_TERMINATED` by
termination, ...) with Karpenter's exact names: Go's Prometheus client writes a counter under the name it is
given, where Python's would add `_total` (to the samples and to the TYPE line), so `KarpenterCounter` exposes
its samples itself, typed `untyped` (Prometheus stores and rates them the same; only the name is what queries
see). The state of the
cluster (`karpenter_pods_state`, `karpenter_nodes_allocatable`, `karpenter_provisioner_usage`, ...) is read from
the watch caches when Prometheus scrapes (`ClusterMetrics`): it follows the cluster as it is, so a gauge falls
back when a pod or a node leaves instead of holding its last written value. `cluster_samples` computes those
samples from plain objects and is pure; the collector only reads the caches. karpy's own extras keep `karpy_`.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence

import pydantic
from prometheus_client import REGISTRY, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from karpy.apis import labels as wk
from karpy.apis.quantity import Quantity, QuantityError
from karpy.apis.v1 import labels as v1labels
from karpy.apis.v1.disruption.budgets import REASONS, budget_mapping, budget_nodes
from karpy.apis.v1.duration import parse_duration
from karpy.apis.v1.nodepool import NodePool
from karpy.controller import nodepool_metrics as v1metrics

Obj = dict[str, Any]
UNKNOWN = "N/A"                      # Karpenter's value for a label it cannot fill
PROVISIONING, CONSOLIDATION = "provisioning", "consolidation"     # why a node was created


class KarpenterCounter(Collector):
    """A counter exposed under exactly `name` (no `_total`), as Karpenter's Go client exposes it."""

    def __init__(self, name: str, documentation: str, label_names: Sequence[str] = ()) -> None:
        self.name, self.documentation, self.label_names = name, documentation, tuple(label_names)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        REGISTRY.register(self)

    def inc(self, *label_values: str, amount: float = 1.0) -> None:
        if len(label_values) != len(self.label_names):
            raise ValueError(f"{self.name}: expected labels {self.label_names}, got {label_values}")
        with self._lock:
            self._values[label_values] = self._values.get(label_values, 0.0) + amount

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, "unknown")
        with self._lock:
            for values, total in self._values.items():
                metric.add_sample(self.name, dict(zip(self.label_names, values)), total)
        yield metric


NODES_CREATED = KarpenterCounter("karpenter_nodes_created", "Number of nodes created in total by Karpenter. "
                                 "Labeled by reason the node was created.", ["reason", "provisioner"])
NODES_TERMINATED = KarpenterCounter("karpenter_nodes_terminated", "Number of nodes terminated in total by Karpenter. "
                                    "Labeled by reason the node was terminated.", ["reason", "provisioner"])
CONSOLIDATION_ACTIONS = KarpenterCounter("karpenter_consolidation_actions_performed",
                                         "Number of consolidation actions performed. Labeled by action.", ["action"])
CONSOLIDATION_NODES_CREATED = KarpenterCounter("karpenter_consolidation_nodes_created",
                                               "Number of nodes created in total by consolidation.")
# Karpenter v1's counters, for what NodePools launch: v1 names them with `_total` itself
NODECLAIMS_CREATED = KarpenterCounter(
    "karpenter_nodeclaims_created_total", "Number of nodeclaims created in total by Karpenter. Labeled by reason the "
    "nodeclaim was created, the owning nodepool, and if min values was relaxed for this nodeclaim.",
    ["reason", "nodepool", "min_values_relaxed"])
NODECLAIMS_TERMINATED = KarpenterCounter(
    "karpenter_nodeclaims_terminated_total", "Number of nodeclaims terminated in total by Karpenter. Labeled by the "
    "owning nodepool, capacity type, and zone.", ["nodepool", "capacity_type", "zone"])
NODECLAIMS_DISRUPTED = KarpenterCounter(
    "karpenter_nodeclaims_disrupted_total", "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the "
    "nodeclaim was disrupted, the owning nodepool, the capacity type, the consolidation policy, and the termination mode.",
    ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"])
NODES_CREATED_TOTAL = KarpenterCounter("karpenter_nodes_created_total", "Number of nodes created in total by "
                                       "Karpenter. Labeled by owning nodepool and zone.", ["nodepool", "zone"])
NODES_TERMINATED_TOTAL = KarpenterCounter("karpenter_nodes_terminated_total", "Number of nodes terminated in total by "
                                          "Karpenter. Labeled by owning nodepool and zone.", ["nodepool", "zone"])
PROVISIONED = "provisioned"          # v1's reason for a NodeClaim provisioning created
UNDERUTILIZED = "underutilized"      # v1's reason for a replacement consolidation created
SCHEDULING_SECONDS = Histogram("karpenter_provisioner_scheduling_duration_seconds",
                               "Duration of scheduling process in seconds.")
CLOUDPROVIDER_SECONDS = Histogram("karpenter_cloudprovider_duration_seconds",
                                  "Duration of cloud provider method calls.", ["controller", "method", "provider"])


def _v1(obj: Obj) -> tuple[str, dict[str, str]] | None:
    """The NodePool a NodeClaim or Node belongs to, with its labels; None for a Provisioner's (v0.16's names)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return (labels[wk.NODEPOOL], labels) if labels.get(wk.NODEPOOL) else None


def termination_mode(claim: Obj | None) -> str:
    """v1's termination_mode label: `graceful` without a terminationGracePeriod, `forceful` with a zero one, else
    `eventual`."""
    grace = ((claim or {}).get("spec") or {}).get("terminationGracePeriod")
    if grace is None:
        return "graceful"
    try:
        return "forceful" if parse_duration(str(grace)).total_seconds() <= 0 else "eventual"
    except ValueError:
        return "eventual"


def count_nodeclaim_created(claim: Obj, reason: str) -> None:
    """`karpenter_nodeclaims_created_total`, for a NodePool's NodeClaim just written."""
    if (owner := _v1(claim)) is not None:
        relaxed = ((claim.get("metadata") or {}).get("annotations") or {}).get(v1labels.NODECLAIM_MIN_VALUES_RELAXED)
        NODECLAIMS_CREATED.inc(reason, owner[0], relaxed or "false")


def count_node_registered(claim: Obj) -> None:
    """`karpenter_nodes_created_total`, once a NodePool's NodeClaim has its Node (v1 counts at registration)."""
    if (owner := _v1(claim)) is not None:
        NODES_CREATED_TOTAL.inc(owner[0], owner[1].get(wk.ZONE, ""))


def count_nodeclaim_terminated(claim: Obj) -> None:
    """`karpenter_nodeclaims_terminated_total`, once a NodePool's NodeClaim lets go of its finalizer."""
    if (owner := _v1(claim)) is not None:
        NODECLAIMS_TERMINATED.inc(owner[0], owner[1].get(wk.CAPACITY_TYPE, ""), owner[1].get(wk.ZONE, ""))


def count_nodeclaim_disrupted(obj: Obj, reason: str, *, claim: Obj | None = None, consolidation_policy: str = "") -> None:
    """`karpenter_nodeclaims_disrupted_total`, when karpy deletes a NodePool's NodeClaim or Node (`obj`) for
    `reason` (v1's snake_case: `expired`, `registration_timeout`, `insufficient_capacity`, ...); `claim` gives the
    termination mode when `obj` is its Node."""
    if (owner := _v1(obj)) is not None:
        NODECLAIMS_DISRUPTED.inc(reason, owner[0], owner[1].get(wk.CAPACITY_TYPE, ""), consolidation_policy,
                                 termination_mode(claim or obj))


def count_node_terminated(node: Obj, reason: str) -> None:
    """A Node whose finalizer termination removed: `karpenter_nodes_terminated` (v0.16, every pool), and
    `karpenter_nodes_terminated_total` for a NodePool's."""
    NODES_TERMINATED.inc(reason, wk.pool_of((node.get("metadata") or {}).get("labels")) or "")
    if (owner := _v1(node)) is not None:
        NODES_TERMINATED_TOTAL.inc(owner[0], owner[1].get(wk.ZONE, ""))


def _quantity(value: object) -> float | None:
    try:
        return float(Quantity.parse(value))
    except QuantityError:
        return None


def _node_labels(node: Obj | None) -> dict[str, str]:
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return {"provisioner": labels.get(wk.PROVISIONER_NAME, UNKNOWN), "zone": labels.get(wk.ZONE, UNKNOWN),
            "arch": labels.get(wk.ARCH, UNKNOWN), "capacity_type": labels.get(wk.CAPACITY_TYPE, UNKNOWN),
            "instance_type": labels.get(wk.INSTANCE_TYPE, UNKNOWN)}


def allowed_disruptions(nodepools: Iterable[Obj], nodes: Iterable[Obj], now: dt.datetime
                        ) -> list[tuple[dict[str, str], float]]:
    """`karpenter_nodepools_allowed_disruptions`: per NodePool and reason, how many of its nodes its active budgets
    allow disrupted at `now` (before those already disrupting are taken off, as v1 reports it). A NodePool that
    does not decode is left out (the webhook and the CRD refuse it)."""
    budgets = {}
    for raw in nodepools:
        try:
            pool = NodePool.model_validate(raw)
        except pydantic.ValidationError:
            continue
        budgets[pool.name] = pool.spec.disruption.budgets
    counted = budget_nodes(nodes)
    return [({"nodepool": name, "reason": reason}, float(b.allowed))
            for reason in REASONS for name, b in sorted(budget_mapping(budgets, counted, now=now, reason=reason).items())]


def cluster_samples(*, pods: Iterable[Obj], nodes: Iterable[Obj], provisioners: Iterable[Obj],
                    pending_pods: int, nodepools: Iterable[Obj] = (), now: dt.datetime | None = None
                    ) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Pure: metric name -> its samples (labels, value) for the cluster the objects describe (budgets at `now`,
    the wall clock when not given)."""
    nodes, nodepools, pods = list(nodes), list(nodepools), list(pods)
    now = now or dt.datetime.now(dt.timezone.utc)
    nodes_by_name = {n["metadata"]["name"]: n for n in nodes}
    out: dict[str, list[tuple[dict[str, str], float]]] = {
        **v1metrics.nodepool_samples(nodepools, nodes), **{name: [] for name in v1metrics.NODE_GAUGES},
        "karpenter_pods_state": [], "karpenter_nodes_allocatable": [], "karpenter_provisioner_limit": [],
        "karpenter_provisioner_usage": [], "karpenter_provisioner_usage_pct": [],
        "karpy_provisioner_pending_pods": [({}, float(pending_pods))],
        "karpenter_nodepools_allowed_disruptions": allowed_disruptions(
            nodepools, nodes, now)}
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        owners = meta.get("ownerReferences") or []
        node_name = spec.get("nodeName") or ""
        if v1metrics.nodepool_of(on := nodes_by_name.get(node_name)) is not None:   # on a NodePool's node: v1's labels
            out["karpenter_pods_state"].append((v1metrics.pod_labels(pod, on), 1.0))
            continue
        out["karpenter_pods_state"].append(({
            "name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
            "owner": owners[0].get("name", UNKNOWN) if owners else UNKNOWN, "node": node_name or UNKNOWN,
            **_node_labels(nodes_by_name.get(node_name)), "phase": (pod.get("status") or {}).get("phase") or UNKNOWN},
            1.0))
    usage: dict[str, dict[str, float]] = {}
    pods_by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        pods_by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
    for name, node in nodes_by_name.items():
        if v1metrics.nodepool_of(node) is not None:
            for metric, sample in v1metrics.node_samples(node, pods_by_node.get(name, []), now):
                out[metric].append(sample)
            continue
        labels = _node_labels(node)
        if labels["provisioner"] == UNKNOWN:
            continue                                    # not karpy's
        status = node.get("status") or {}
        for resource, value in (status.get("allocatable") or {}).items():
            if (amount := _quantity(value)) is not None:
                out["karpenter_nodes_allocatable"].append(({"node_name": name, **labels, "phase": status.get("phase")
                                                            or UNKNOWN, "resource_type": resource}, amount))
        for resource, value in (status.get("capacity") or {}).items():
            if (amount := _quantity(value)) is not None:
                by_resource = usage.setdefault(labels["provisioner"], {})
                by_resource[resource] = by_resource.get(resource, 0.0) + amount
    for provisioner in provisioners:
        name = provisioner["metadata"]["name"]
        used = usage.get(name, {})
        for resource, amount in used.items():
            out["karpenter_provisioner_usage"].append(({"resource_type": resource, "provisioner": name}, amount))
        limits = ((provisioner.get("spec") or {}).get("limits") or {}).get("resources") or {}
        for resource, value in limits.items():
            if (limit := _quantity(value)) is None:
                continue
            out["karpenter_provisioner_limit"].append(({"resource_type": resource, "provisioner": name}, limit))
            if limit > 0:
                out["karpenter_provisioner_usage_pct"].append(
                    ({"resource_type": resource, "provisioner": name}, 100.0 * used.get(resource, 0.0) / limit))
    return out


DOCUMENTATION = {
    "karpenter_pods_state": "Pod state is the current state of pods. This metric can be used several ways as it is "
                            "labeled by the pod name, namespace, owner, node, provisioner name, zone, architecture, "
                            "capacity type, instance type and pod phase.",
    "karpenter_nodes_allocatable": "Node allocatable are the resources allocatable by nodes.",
    "karpenter_provisioner_limit": "The Provisioner Limits are the limits specified on the provisioner that restrict "
                                   "the quantity of resources provisioned. Labeled by provisioner name and resource type.",
    "karpenter_provisioner_usage": "The Provisioner Usage is the amount of resources that have been provisioned by a "
                                   "particular provisioner. Labeled by provisioner name and resource type.",
    "karpenter_provisioner_usage_pct": "The Provisioner Usage Percentage is the percentage of each resource used based "
                                       "on the resources provisioned and the limits that have been configured.",
    "karpenter_nodepools_allowed_disruptions": "The number of nodes for a given NodePool that can be concurrently "
                                               "disrupting at a point in time. Labeled by NodePool. Note that allowed "
                                               "disruptions can change very rapidly, as new nodes may be created and "
                                               "others may be passed the disruption threshold.",
    "karpy_provisioner_pending_pods": "Pods that wait for capacity karpy would launch (not yet claimed by a launch).",
    **v1metrics.DOCUMENTATION,
}


class ClusterMetrics(Collector):
    """The cluster-state gauges, read from the caches at each scrape. One per process (registered at import); the
    running operator points it at its caches with `watch`, and away with `watch(None)` when it stops."""

    def __init__(self) -> None:
        self._source: Callable[[], dict[str, list[tuple[dict[str, str], float]]]] | None = None
        REGISTRY.register(self)

    def watch(self, source: Callable[[], dict[str, list[tuple[dict[str, str], float]]]] | None) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        samples = self._source() if self._source is not None else {}
        for name, documentation in DOCUMENTATION.items():
            metric = Metric(name, documentation, "gauge")
            for labels, value in samples.get(name, []):
                metric.add_sample(name, labels, value)
            yield metric


CLUSTER = ClusterMetrics()


class MeasuredCloud:
    """A cloud provider whose calls are timed into `karpenter_cloudprovider_duration_seconds`; anything else
    (its catalog, its queue) passes straight through. The controller is the calling thread's: each controller's
    loop thread is named for it (`provisioning`, `termination`, ...), worker pools number theirs (`launch_3`)."""

    def __init__(self, cloud: Any) -> None:
        self.cloud, self.name = cloud, cloud.name

    def _timed(self, method: str, call: Callable[[], Any]) -> Any:
        controller = threading.current_thread().name.rsplit("_", 1)[0]
        with CLOUDPROVIDER_SECONDS.labels(controller, method, self.name).time():
            return call()

    def create(self, request: Any) -> Any:
        return self._timed("Create", lambda: self.cloud.create(request))

    def delete(self, provider_id: str) -> None:
        self._timed("Delete", lambda: self.cloud.delete(provider_id))

    def get(self, provider_id: str) -> Any:
        return self._timed("Get", lambda: self.cloud.get(provider_id))

    def list(self) -> Any:
        return self._timed("List", self.cloud.list)

    def instance_types(self, kubelet: object | None = None) -> Any:
        return self._timed("GetInstanceTypes", lambda: self.cloud.instance_types(kubelet))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cloud, name)
