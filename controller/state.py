"""The controller's view of the cluster: watch-fed caches of the objects it decides from.

Pods, nodes, provisioners, NodePools (with their EC2NodeClasses), daemonsets and PDBs, each kept by a list+watch
informer that relists after a 410 or a dropped watch, so no event is lost
for good. Decisions read these caches, never the API server directly.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

import pydantic
from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.launch_record import PodReference, claim_node_name
from karpy.apis.provisioner_defaults import default_provisioner
from karpy.apis.provisioner_validation import read_provisioner
from karpy.apis.v1 import nodeclaim as v1
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1.nodepool import GROUP_VERSION as NODEPOOL_API_VERSION
from karpy.apis.v1.nodepool import KIND as NODEPOOL_KIND
from karpy.apis.v1.pool import read_nodepool
from karpy.apis.v1alpha5 import PROVISIONER_KIND, Provisioner
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.failures import FailureReporter
from karpy.controller.inflight import InFlight
from karpy.controller.provisioning.pending import PendingIndex
from karpy.controller.provisioning.scheduling.pods import PodError, PodInfo
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, failure
from karpy.kubeclient.informer import Informer, start_all
from karpy.kubeclient.raw import RawClient, path_of

log = logging.getLogger("controller.state")
Obj = dict[str, Any]
BY_NODE = "node"


def _node_of(pod: Obj) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def aws_defaults(cloud_provider: str, catalog: Catalog | None) -> bool:
    """Whether Provisioners get the AWS provider's defaults: they launch EC2 instance types (the aws provider, or
    the fake one selling the `aws` catalog), so they read as the defaulting webhook with its default
    `--cloud-provider aws` would leave them, as `karpy plan` reads them for the `aws` catalog."""
    return cloud_provider == "aws" or (catalog is not None and catalog.name == "aws")


class ClusterState:
    def __init__(self, client: RawClient, *, aws_defaults: bool = False) -> None:
        """`aws_defaults`: give Provisioners the AWS cloud provider's defaults (capacity type on-demand, arch amd64,
        each unless the Provisioner names the key) as they are read, exactly as the defaulting webhook would have;
        a Provisioner the webhook did default reads the same. For AWS instance types, where a Provisioner applied
        without the webhook would otherwise launch arm64 nodes for amd64 images."""
        self.client = client
        self.aws_defaults = aws_defaults
        self.pods = Informer(client, "v1", "pods")
        self.pods.add_index(BY_NODE, _node_of)      # pods by the node they are bound to
        self.nodes = Informer(client, "v1", "nodes")
        self.provisioners = Informer(client, "karpenter.sh/v1alpha5", "provisioners")
        # v1: NodePools schedule as Provisioners do (apis/v1/pool.py), sized by their EC2NodeClass's kubelet settings
        self.nodepools = Informer(client, "karpenter.sh/v1", "nodepools")
        self.ec2nodeclasses = Informer(client, "karpenter.k8s.aws/v1", "ec2nodeclasses")
        self.daemonsets = Informer(client, "apps/v1", "daemonsets")
        self.pdbs = Informer(client, "policy/v1", "poddisruptionbudgets")
        self.namespaces = Informer(client, "v1", "namespaces")
        # the NodeClaims as the watch shows them, for passes that only read them (expiry, drift, termination's
        # grace); launches read them from the API server instead (node_claims)
        self.claims = Informer(client, v1.GROUP_VERSION, v1.PLURAL)
        self.claims.add_index(BY_NODE, claim_node_name)   # claims by the node they launched
        # the scheduler extender reports pods it left without a node this way, before kube-scheduler marks them
        self.gap_reports = Informer(client, "v1", "events", field_selector=f"reason={wk.CAPACITY_GAP_REASON}")
        self.informers = [self.pods, self.nodes, self.provisioners, self.nodepools, self.ec2nodeclasses, self.daemonsets,
                          self.pdbs, self.namespaces, self.gap_reports, self.claims]
        # the pods waiting for capacity, kept by the watch (first handler: later ones read it up to date)
        self.pending = PendingIndex(self.pods.get)
        self.pods.handlers.append(self.pending.on_pod)
        self.gap_reports.handlers.append(self.pending.on_gap_report)
        self.failures = FailureReporter(client)     # bad objects: skipped, said once
        # launches in flight, over the NodeClaims: pods promised, nodes landing
        self.in_flight = InFlight(self.node_claims, self.settled)
        self._decoded: dict[tuple[str, str, str | None, str | None], Provisioner | None] = {}
        self._decode_lock = threading.Lock()
        # the pods' records as the last snapshot read them, by uid, with the namespaces' labels they were read
        # against: a pod that reads the same is not parsed again (see pod_infos)
        self._last_read: tuple[dict[str, dict[str, str]], dict[str, PodInfo]] = ({}, {})

    def start(self, timeout: float = 30) -> bool:
        """Start every informer and wait, `timeout` seconds in all, for their first lists.
        Returns whether all of them have listed."""
        return start_all(self.informers, timeout)

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def on_change(self, handler: Callable[[str, Obj], None], *informers: Informer) -> None:
        for informer in informers or tuple(self.informers):
            informer.handlers.append(handler)

    # --- reads -------------------------------------------------------------------------------
    def gap_pod_uids(self) -> frozenset[str]:
        """The pods the scheduler extender reported capacity gaps for."""
        return frozenset(uid for e in self.gap_reports.items() if (uid := (e.get("involvedObject") or {}).get("uid")))

    def live_provisioners(self) -> list[Provisioner]:
        """Provisioners, and NodePools in a Provisioner's terms (apis/v1/pool.py), that decode and validate (others
        are skipped with a log line). Each version of each object is decoded once: the node controllers ask for
        every node on every pass."""
        with self._decode_lock:                 # several controller loops ask at once
            return self._decode_all()

    def _decode_all(self) -> list[Provisioner]:
        out: list[Provisioner] = []
        seen: set[tuple[str, str, str | None, str | None]] = set()
        classes = {c["metadata"]["name"]: c for c in self.ec2nodeclasses.items()}
        sources = [(PROVISIONER_KIND, raw) for raw in self.provisioners.items()] + \
                  [(NODEPOOL_KIND, {"apiVersion": NODEPOOL_API_VERSION, "kind": NODEPOOL_KIND, **raw})
                   for raw in self.nodepools.items()]
        for kind, raw in sources:
            name = raw["metadata"]["name"]
            node_class = classes.get(_node_class_name(raw)) if kind == NODEPOOL_KIND else None
            key = (kind, name, raw["metadata"].get("resourceVersion"),
                   node_class["metadata"].get("resourceVersion") if node_class else None)
            seen.add(key)
            if key not in self._decoded:
                self._decoded[key] = self._decode(kind, raw, node_class)
            decoded = self._decoded[key]
            if decoded is None:
                continue
            if any(p.name == name for p in out):       # names are one namespace: a node's owner label names either
                self.failures.report(raw, kind=kind, reason=f"Invalid{kind}",
                                     message=f"a Provisioner named {name!r} exists: this {kind} is skipped")
                continue
            out.append(decoded)
        for key in set(self._decoded) - seen:
            del self._decoded[key]
        return out

    def _decode(self, kind: str, raw: Obj, node_class: Obj | None) -> Provisioner | None:
        p: Provisioner | None
        try:
            if kind == NODEPOOL_KIND:
                classes = {}
                if node_class is not None:
                    try:
                        classes = {node_class["metadata"]["name"]: EC2NodeClass.model_validate(node_class)}
                    except pydantic.ValidationError:
                        pass                             # the NodePool schedules without its kubelet settings
                p, errors = read_nodepool(raw, classes)
            else:
                p, errors = read_provisioner(default_provisioner(raw, aws=self.aws_defaults), aws=False)
            problem = "; ".join(map(str, errors)) if p is None else None
        except Exception as e:  # one Provisioner's (or NodePool's) error is confined to it
            p, problem = None, failure(e)
        if problem is not None:
            self.failures.report(raw, kind=kind, reason=f"Invalid{kind}", message=f"invalid {kind.lower()}, {problem}")
            return None
        return p

    def pool_object(self, name: str) -> Obj | None:
        """The Provisioner or NodePool `name` as the watch holds it, with its apiVersion and kind (for owner
        references), or None."""
        for informer, api_version, kind in ((self.provisioners, "karpenter.sh/v1alpha5", PROVISIONER_KIND),
                                            (self.nodepools, NODEPOOL_API_VERSION, NODEPOOL_KIND)):
            raw = informer.get("", name)
            if raw is not None:
                return {**raw, "apiVersion": api_version, "kind": kind}
        return None

    def provisioner(self, name: str) -> Provisioner | None:
        return next((p for p in self.live_provisioners() if p.name == name), None)

    def pod_infos(self, pods: list[Obj]) -> list[PodInfo]:
        """Pods as the scheduling core reads them (namespaceSelectors resolved against the namespaces' labels).
        A pod the last snapshot read keeps its record when it still reads the same (PodInfo.reread: its status
        changed, or it was bound), so a batch parses only the pods new to it, not the thousands bound since."""
        return self._read(pods, self._namespace_labels())

    def _namespace_labels(self) -> dict[str, dict[str, str]]:
        return {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self.namespaces.items()}

    def _read(self, pods: list[Obj], namespaces: dict[str, dict[str, str]]) -> list[PodInfo]:
        read_against, before = self._last_read
        if read_against != namespaces:           # a namespaceSelector may read them differently now
            before = {}
        out = []
        for raw in pods:
            uid = raw["metadata"].get("uid")
            record = (before.get(uid) or self.pending.record(uid)) if uid else None
            record = record.reread(raw) if record is not None else None
            if record is not None:
                out.append(record)
                continue
            try:
                out.append(PodInfo.parse(raw, namespace_labels=namespaces))
            except PodError as e:
                self.failures.report(raw, kind="Pod", reason="FailedScheduling", message=f"invalid pod, {e}")
            except Exception as e:  # one pod's error is confined to it
                self.failures.report(raw, kind="Pod", reason="FailedScheduling", message=f"reading pod, {failure(e)}")
        return out

    def snapshot(self, catalog: Catalog, pods: list[Obj], *, parsed: Sequence[PodInfo] = ()) -> ClusterSnapshot:
        """What the scheduling core reads: provisioners, every node, `pods` parsed (see pod_infos) and the pods
        already `parsed`, daemonset overhead. Its records are the ones the next batch may keep."""
        namespaces = self._namespace_labels()
        records = self._read(pods, namespaces) + list(parsed)
        # one assignment (a snapshot on another thread keeps either); records of this snapshot only, each referring
        # to an object the cache held moments ago
        self._last_read = (namespaces, {r.uid: r for r in records if r.uid and not r.relaxations})
        return ClusterSnapshot(provisioners=self.live_provisioners(), catalog=catalog, nodes=self.nodes.items(),
                               pods=records, daemonsets=self.daemon_templates())

    def daemon_templates(self) -> list[PodInfo]:
        out = []
        for ds in self.daemonsets.items():
            template = (ds.get("spec") or {}).get("template") or {}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": ds["metadata"]["name"], "namespace": ds["metadata"].get("namespace", "default"),
                                "labels": (template.get("metadata") or {}).get("labels") or {},
                                "ownerReferences": [{"kind": "DaemonSet", "name": ds["metadata"]["name"], "controller": True}]},
                   "spec": template.get("spec") or {"containers": []}}
            out.extend(self.pod_infos([pod]))
        return out

    def node_claims(self) -> list[Obj]:
        """Every karpenter.sh/v1 NodeClaim, read from the API server (not a cache: a stale read could repeat a
        launch step). Passes that only read claims, and tolerate a read a moment old, read `claims`."""
        return list(self.client.get(path_of(v1.GROUP_VERSION, v1.PLURAL)).get("items") or [])

    def claim_of(self, node_name: str) -> Obj | None:
        """The watched NodeClaim that launched node `node_name`, if any."""
        found = self.claims.by_index(BY_NODE, node_name)
        return found[-1] if found else None

    def settled(self, ref: PodReference) -> bool:
        """Whether the watch shows pod `ref` bound, leaving or gone."""
        pod = self.pods.get(ref.namespace, ref.name)
        return pod is None or bool((pod.get("spec") or {}).get("nodeName")) or bool(pod["metadata"].get("deletionTimestamp"))

    def bound_pods(self) -> list[Obj]:
        return self.pods.indexed(BY_NODE)

    def delete_node(self, name: str) -> None:
        """Delete Node `name`, handing it to termination; one already gone is fine."""
        try:
            self.client.delete(path_of("v1", "nodes", name=name))
        except ApiException as e:
            if e.status != 404:
                raise

    def pods_on(self, node_name: str) -> list[Obj]:
        return self.pods.by_index(BY_NODE, node_name)

    def ours(self, node: Obj) -> str | None:
        """The Provisioner or NodePool that launched `node`, or None when karpy does not manage it."""
        return wk.pool_of(node["metadata"].get("labels"))


def _node_class_name(nodepool: Obj) -> str | None:
    ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")
    return ref.get("name") if isinstance(ref, dict) else None
