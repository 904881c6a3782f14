"""The extender's view of the cluster, kept by watches: nodes, pods, provisioners, NodePools, NodeClaims and
capacity-gap Events.

The watches are the controller's informers (kubeclient/informer.py); this module
keeps, from their events, the per-node facts the extender answers from.

From it come the facts `extender.decisions` weighs (what is bound where,
which pods are still waiting for the node karpy launched for them, each
provisioner's TTLs) and the open capacity gaps: pods kube-scheduler marked
Unschedulable, and pods any replica reported through a `CapacityGap` Event.
Every replica watches the same API, so every replica gives the same answers.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import threading
from typing import Any

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis import launch_record as rec
from karpy.apis.conditions import unschedulable
from karpy.apis.moving_in import owner_of
from karpy.apis.pods import object_key, pod_requests
from karpy.apis.quantity import QuantityError
from karpy.apis.resources import Resources
from karpy.apis.v1.pool import read_nodepool
from karpy.controller.inflight import is_leaving, landing
from karpy.extender.decisions import Lifetimes, NodeFacts, NodeShape, facts_of, shape_of, steady_until
from karpy.extender.gaps import Gaps
from karpy.extender.wire import BindingArgs
from karpy.kubeclient import events
from karpy.kubeclient.informer import Informer, start_all
from karpy.kubeclient.raw import RawClient, now_rfc3339

log = logging.getLogger("extender")
Obj = dict[str, Any]
_NOTHING_USED = Resources()         # shared, never changed: the decisions only read it


def _requests(pod: Obj) -> Resources:
    try:
        return pod_requests(pod.get("spec") or {})
    except QuantityError:
        return Resources()            # the API server would not have stored it; count it as asking nothing


class ClusterView:
    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.gaps = Gaps()
        self.nodes = Informer(client, "v1", "nodes")
        self.pods = Informer(client, "v1", "pods")
        self.provisioners = Informer(client, "karpenter.sh/v1alpha5", "provisioners")
        self.nodepools = Informer(client, "karpenter.sh/v1", "nodepools")
        # the pods each landing node was launched for come from its NodeClaim (controller/inflight.py)
        self.nodeclaims = Informer(client, "karpenter.sh/v1", "nodeclaims")
        self.gap_events = Informer(client, "v1", "events", field_selector=f"reason={wk.CAPACITY_GAP_REASON}")
        self.informers = (self.nodes, self.pods, self.provisioners, self.nodepools, self.nodeclaims, self.gap_events)
        self._lock = threading.RLock()          # `_assume` holds it across the update it makes
        self._used: dict[str, Resources] = {}                 # node -> requests of the pods bound to it
        self._where: dict[str, tuple[str, Resources, str | None]] = {}    # pod -> (node it is bound to, its requests, owner)
        self._held: dict[str, collections.Counter[str]] = {}   # node -> pods bound to it by owner (uid)
        self._pending: dict[str, Resources] = {}              # unbound pods -> requests
        self._shapes: dict[str, NodeShape] = {}               # node -> what its object says, as of its last change
        self._landing: dict[str, str] = {}                    # claim -> the node it lands
        self._promises: dict[str, tuple[str, ...]] = {}      # landing node -> the pods its claim has still to bind
        self._going: dict[str, str] = {}                      # claim being deleted -> its node (leaving with it)
        # node -> (a shape sent in full, the promise, whether it goes, that shape with both): kept while they stay the same
        self._dressed: dict[str, tuple[NodeShape, tuple[str, ...] | None, bool, NodeShape]] = {}
        self._shape_lock = threading.RLock()
        self._lifetimes: dict[str, tuple[Obj, Lifetimes]] = {}    # provisioner -> (its object, its TTLs)
        # node -> (shape, used, TTLs, good until, facts): the facts the last call computed, and what they rest on.
        # Checked by identity: the watch replaces shapes, sums of requests and Provisioner objects, never changes them.
        self._facts: dict[str, tuple[NodeShape, Resources | None, Lifetimes | None, dt.datetime, NodeFacts]] = {}
        self.nodes.handlers.append(self._on_node)
        self.nodeclaims.handlers.append(self._on_claim)
        self.pods.handlers.append(self._on_pod)
        self.gap_events.handlers.append(self._on_gap_event)

    def start(self, timeout: float = 30) -> ClusterView:
        start_all(self.informers, timeout)
        return self

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    # --- keeping the indexes --------------------------------------------------------------
    def _on_node(self, kind: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._shapes.pop(name, None)
            self._facts.pop(name, None)
            return
        try:
            shape = shape_of(node)
        except QuantityError:
            self._shapes.pop(name, None)          # the API server would not have stored it: nothing known
            return
        with self._shape_lock:                # the NodeClaim watch shapes nodes too
            self._shapes[name] = self._with_claim(shape, *self._claim_says(name))

    def _claim_says(self, name: str) -> tuple[tuple[str, ...] | None, bool]:
        """What Node `name`'s NodeClaim says and the Node does not: the pods it promises, and whether it is leaving
        (the claim is being deleted; the Node's own deletion follows a moment later)."""
        return self._promises.get(name), name in self._going.values()

    @staticmethod
    def _with_claim(shape: NodeShape, promised: tuple[str, ...] | None, going: bool) -> NodeShape:
        """`shape` with what its NodeClaim says (`_claim_says`)."""
        changes: dict[str, Any] = {}
        if promised is not None and shape.launched_for != promised:
            changes["launched_for"] = promised
        if going and not shape.deleting:
            changes["deleting"] = True
        return dataclasses.replace(shape, **changes) if changes else shape

    def _dressed_shape(self, shape: NodeShape) -> NodeShape:
        """A shape kube-scheduler sent in full, with what its NodeClaim says (`_with_claim`); the same object from
        call to call while neither changes, so the facts kept for it stay good."""
        promised, going = self._claim_says(shape.name)
        kept = self._dressed.get(shape.name)
        if kept is not None and kept[0] is shape and kept[1] is promised and kept[2] == going:
            return kept[3]
        dressed = self._with_claim(shape, promised, going)
        self._dressed[shape.name] = (shape, promised, going, dressed)
        return dressed

    def _on_claim(self, kind: str, claim: Obj) -> None:
        """A NodeClaim changed: the Nodes it lands (before and now) are shaped again with what it promises."""
        name = claim["metadata"]["name"]
        now = None if kind == "DELETED" else landing(claim)
        going = rec.node_name(claim) if kind != "DELETED" and is_leaving(claim) else None
        with self._shape_lock:
            before = self._landing.pop(name, None)
            if before is not None:
                self._promises.pop(before, None)
                self._dressed.pop(before, None)
            if now is not None:
                self._landing[name] = now[0]
                self._promises[now[0]] = now[1]
            went = self._going.pop(name, None)
            if going:
                self._going[name] = str(going)
            for node_name in {n for n in (before, now[0] if now else None, went, going) if n}:
                node = self.nodes.get("", node_name)      # as the watch holds it now: never older than a shape
                if node is not None:
                    self._on_node("MODIFIED", node)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        key = object_key(pod)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        finished = kind == "DELETED" or status.get("phase") in ("Succeeded", "Failed")
        with self._lock:
            old = self._where.pop(key, None)
            if old is not None:
                self._used[old[0]] = self._used[old[0]] - old[1]
                if old[2] is not None:
                    self._held[old[0]][old[2]] -= 1
            self._pending.pop(key, None)
            if finished:
                pass
            elif spec.get("nodeName"):
                node, requests, owner = spec["nodeName"], _requests(pod), owner_of(pod)
                self._where[key] = (node, requests, owner)
                self._used[node] = self._used.get(node, Resources()) + requests   # a new object: kept facts see the change
                if owner is not None:
                    self._held.setdefault(node, collections.Counter())[owner] += 1
            elif not pod["metadata"].get("deletionTimestamp"):
                self._pending[key] = _requests(pod)
        if finished or spec.get("nodeName"):
            self.gaps.close(key)
            return
        condition = unschedulable(pod)
        if condition is not None:
            self.gaps.open(key, condition.get("message") or "Unschedulable", condition.get("lastTransitionTime") or now_rfc3339())

    def _on_gap_event(self, kind: str, event: Obj) -> None:
        involved = event.get("involvedObject") or {}
        if kind == "DELETED" or involved.get("kind") != "Pod" or not involved.get("name"):
            return
        key = object_key({"metadata": involved})        # an involvedObject names its pod as metadata would
        pod = self.pods.get(key.split("/", 1)[0], involved["name"])
        if pod is not None and not (pod.get("spec") or {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            self.gaps.open(key, event.get("message") or wk.CAPACITY_GAP_REASON, event.get("firstTimestamp") or now_rfc3339())

    # --- answers --------------------------------------------------------------------------
    def lifetimes(self, provisioner: str | None) -> Lifetimes | None:
        """The provisioner's (or NodePool's) TTLs: the same object while the watched object stays the same object."""
        obj = self.provisioners.get("", provisioner) if provisioner else None
        pool = self.nodepools.get("", provisioner) if provisioner and obj is None else None
        obj = obj if obj is not None else pool
        if obj is None or provisioner is None:
            return None
        known = self._lifetimes.get(provisioner)
        if known is not None and known[0] is obj:
            return known[1]
        spec = obj.get("spec") or {}
        if pool is not None:                      # a NodePool's expireAfter and WhenEmpty delay, as v0.16's TTLs
            read, _ = read_nodepool(pool)
            lifetimes = Lifetimes(after_empty=read.spec.ttl_seconds_after_empty if read else None,
                                  until_expired=read.spec.ttl_seconds_until_expired if read else None)
        else:
            lifetimes = Lifetimes(after_empty=spec.get("ttlSecondsAfterEmpty"), until_expired=spec.get("ttlSecondsUntilExpired"))
        self._lifetimes[provisioner] = (obj, lifetimes)
        return lifetimes

    def shape(self, name: str) -> NodeShape | None:
        """The watched Node's shape, or None when no such Node is known."""
        return self._shapes.get(name)

    def shapes(self, names: list[str]) -> list[NodeShape | str]:
        """The watched shape of each named Node, or its name when no such Node is known."""
        known = self._shapes
        return [known.get(name) or name for name in names]

    def facts(self, nodes: list[NodeShape | str], now: dt.datetime) -> list[NodeFacts]:
        """Facts for each node (a shape, or a name nothing is known of) with what is bound there and promised.

        A node's facts are kept from one call to the next while its shape, the requests bound to it and its
        provisioner's TTLs stay the same objects and the moment has not reached `decisions.steady_until`: a
        call computes facts only for the nodes that changed. Reads the indexes in place, without copying them:
        a pod bound meanwhile shows or not, as it would a moment earlier or later."""
        lifetimes: dict[str | None, Lifetimes | None] = {}
        kept = self._facts
        result = []
        for node in nodes:
            if isinstance(node, str):
                result.append(NodeFacts(name=node))
                continue
            if (self._promises or self._going) and self._shapes.get(node.name) is not node:
                node = self._dressed_shape(node)      # sent in full: what its NodeClaim says, as the watched shape has
            name, provisioner = node.name, node.provisioner
            if provisioner not in lifetimes:
                lifetimes[provisioner] = self.lifetimes(provisioner)
            ttls = lifetimes[provisioner] if node.ours else None
            used = self._used.get(name)
            entry = kept.get(name)
            if entry is not None and entry[0] is node and entry[1] is used and entry[2] is ttls and now < entry[3]:
                result.append(entry[4])
                continue
            facts = facts_of(node, used=used or _NOTHING_USED, pending=self._pending, lifetimes=ttls, now=now,
                             held=self._held.get(name) if node.moving_in is not None else None)
            kept[name] = (node, used, ttls, steady_until(node, facts, lifetimes=ttls, now=now), facts)
            result.append(facts)
        return result

    def report_gap(self, pod: Obj, reason: str) -> None:
        """A pod no node is left for: listed here at once, and an Event every replica and the controller see."""
        if self.gaps.open(object_key(pod), reason, now_rfc3339()):
            events.record(self.client, pod, reason=wk.CAPACITY_GAP_REASON, message=reason, component="karpy-extender",
                          event_type="Warning")

    def bind(self, binding: BindingArgs) -> str:
        """Bind through pods/binding; the error to report, or "" on success."""
        try:
            self.client.bind(binding.pod_namespace, binding.pod_name, binding.node, uid=binding.pod_uid or None)
        except ApiException as e:
            return f"binding {binding.pod_namespace}/{binding.pod_name} to {binding.node}: {e.status} {e.reason}"
        except OSError as e:
            return f"binding {binding.pod_namespace}/{binding.pod_name} to {binding.node}: {e}"
        self.gaps.close(object_key({"metadata": {"namespace": binding.pod_namespace, "name": binding.pod_name}}))
        self._assume(binding)
        return ""

    def _assume(self, binding: BindingArgs) -> None:
        """Count a pod this extender bound as bound at once, as kube-scheduler assumes a pod it binds: the
        next pod is scheduled within milliseconds, before the watch reports the binding, and must see the
        room it took and the moved pod a node waited for as arrived. The watch's event changes nothing more."""
        pod = self.pods.get(binding.pod_namespace, binding.pod_name)
        if pod is None or (binding.pod_uid and pod["metadata"].get("uid") != binding.pod_uid):
            return
        with self._lock:                      # still waiting, as far as the watch has told: not gone, not bound
            if object_key(pod) in self._pending:
                self._on_pod("MODIFIED", {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": binding.node}})
