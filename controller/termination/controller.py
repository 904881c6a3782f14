"""Termination: a karpy node being deleted is cordoned (and taken out of external load balancers),
drained through the Eviction API, its instance terminated, and only then is the
`karpenter.sh/termination` finalizer removed.

Each step is safe to repeat after a crash: cordoning sets values, evictions
of gone pods are 404s, a terminated instance answers InstanceNotFound. Pods
are evicted, never deleted, so PodDisruptionBudgets hold (a 429 means wait).
Which pods go, and what holds the node, is Karpenter v0.16.3's rule
(terminate.go): a pod without an owner reference (nothing would recreate it)
or annotated `karpenter.sh/do-not-evict` holds the node, mirror pods
included; pods that tolerate the cordon, daemonset and mirror pods are left
to go with the node; critical pods are evicted once no other pod is left to
ask; pods terminating for over a minute (a partitioned kubelet) are not
waited for.

A NodePool's node drains as Karpenter v1 drains it: only a do-not-disrupt
(or do-not-evict) pod holds it, and only that pod, the others are evicted
around it; a terminationGracePeriod bounds the drain (grace.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any, Mapping, Sequence

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from karpy.apis import disruption
from karpy.apis import labels as wk
from karpy.apis.pods import mirror, object_key, owned_by_daemonset, terminal
from karpy.apis.selectors import Taint, tolerates
from karpy.apis.timestamps import parse_time, rfc3339
from karpy.apis.v1.disruption.do_not_disrupt import pod_hold
from karpy.apis.v1.duration import DurationError
from karpy.apis.v1.labels import NODECLAIM_TERMINATION_TIMESTAMP
from karpy.controller.clock import Clock
from karpy.controller.cloudprovider.types import CloudProvider, InstanceNotFound
from karpy.controller.metrics import count_node_terminated
from karpy.controller.state import ClusterState
from karpy.controller.termination.grace import forced_deletes, node_termination_time, termination_annotation
from karpy.kubeclient import events
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.termination")
EVICTIONS = Counter("karpy_evictions_total", "Evictions requested while draining", ["result"])
STUCK_TERMINATING = dt.timedelta(minutes=1)     # past this, a terminating pod's kubelet is taken to be gone
CORDON_TAINT = Taint(wk.TAINT_UNSCHEDULABLE, "", "NoSchedule")
LOAD_BALANCER_EXCLUSION = "karpenter"


def termination_reason(node: dict[str, Any]) -> str:
    """Pure: why a node went, as far as the node itself tells: emptiness marks it before deleting it."""
    annotations = node["metadata"].get("annotations") or {}
    return "emptiness" if annotations.get(wk.EMPTINESS_TIMESTAMP) else "deletion"


@dataclasses.dataclass(frozen=True)
class DrainPlan:
    """What draining a node needs now. Computed by `plan_drain`; performs nothing."""

    evict: tuple[dict[str, Any], ...]        # pods to ask to leave now
    waiting: int                             # pods still on their way out, or held back until the others are
    blocked_by: str | None = None            # the pod ("ns/name") that holds the node
    blocker: str | None = None               # why, as a sentence naming the pod and the rule

    @property
    def drained(self) -> bool:
        return self.blocked_by is None and not self.evict and not self.waiting


def draining(node: Mapping[str, Any]) -> bool:
    """Being deleted and held by the termination finalizer: this controller's to drain."""
    meta = node["metadata"]
    return bool(meta.get("deletionTimestamp")) and wk.TERMINATION_FINALIZER in (meta.get("finalizers") or [])


def stuck_terminating(pod: Mapping[str, Any], now: dt.datetime) -> bool:
    """Pure: deleted over a minute ago and still there (its kubelet is partitioned): not waited for."""
    deleted = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    return deleted is not None and now > deleted + STUCK_TERMINATING


def critical(pod: Mapping[str, Any]) -> bool:
    return (pod.get("spec") or {}).get("priorityClassName") in wk.CRITICAL_PRIORITY_CLASSES


def leaves_with_node(pod: Mapping[str, Any], now: dt.datetime) -> bool:
    """Pure: a pod the drain does not wait for: finished, stuck terminating, a mirror or daemonset pod,
    or one that tolerates the cordon."""
    return terminal(pod) or stuck_terminating(pod, now) or mirror(pod) or owned_by_daemonset(pod) or \
        tolerates((pod.get("spec") or {}).get("tolerations") or [], CORDON_TAINT)


def plan_drain(pods: Sequence[dict[str, Any]], *, now: dt.datetime, v1: bool = False) -> DrainPlan:
    """Pure: which of a node's pods to evict now, how many are still leaving, and which pod holds the node.

    v0.16.3's order: finished and stuck pods are passed over; then every other pod, mirror pods
    included, is checked for an owner and for do-not-evict (the first offender holds the node);
    only then are pods that tolerate the cordon, daemonset and mirror pods left out.
    `v1` (a NodePool's node): a pod without an owner is evicted like any other, and a pod that
    do-not-disrupt or do-not-evict holds is waited for while the others are evicted."""
    live = [p for p in pods if not terminal(p) and not stuck_terminating(p, now)]
    if v1:
        held = [(p, hold) for p in live if not leaves_with_node(p, now) and (hold := pod_hold(p, now)) is not None]
        plan = _evictions([p for p in live if not any(p is h for h, _ in held)])
        if not held:
            return plan
        first, hold = held[0]
        return DrainPlan(plan.evict, plan.waiting + len(held), object_key(first), hold.describe())
    for p in live:
        meta = p.get("metadata") or {}
        if not meta.get("ownerReferences"):
            return DrainPlan((), 0, object_key(p), f"pod {object_key(p)} does not have any owner references")
        if (meta.get("annotations") or {}).get(wk.DO_NOT_EVICT) == "true":
            return DrainPlan((), 0, object_key(p), f"pod {object_key(p)} has do-not-evict annotation")
    return _evictions(live)


def _evictions(live: Sequence[dict[str, Any]]) -> DrainPlan:
    """The pods of `live` to evict now, critical pods once every other pod has been asked to leave."""
    candidates = [p for p in live if not tolerates((p.get("spec") or {}).get("tolerations") or [], CORDON_TAINT)
                  and not mirror(p) and not owned_by_daemonset(p)]
    fresh = [p for p in candidates if not p["metadata"].get("deletionTimestamp")]
    ordinary = [p for p in fresh if not critical(p)]
    evict = ordinary or fresh
    return DrainPlan(tuple(evict), len(candidates) - len(evict))


def pdb_hold(plan: DrainPlan, *, pdbs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Pure: the first pod the drain would evict that a PodDisruptionBudget allows no disruption of now,
    as a sentence naming the pod and the budget; None when no budget holds the drain."""
    for p in plan.evict:
        for pdb in pdbs:
            if disruption.eviction_blocker(p, [pdb], pods) is not None:
                return f"pod {object_key(p)} is held by PodDisruptionBudget {object_key(pdb)} (no disruption allowed now)"
    return None


def drain_status(plan: DrainPlan, *, pdbs: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> str:
    """Pure: what a draining node waits for now, in one sentence (`karpy explain node`)."""
    if plan.blocker:
        return f"cannot drain: {plan.blocker}"
    if held := pdb_hold(plan, pdbs=pdbs, pods=pods):
        return f"cannot evict: {held}"
    if plan.evict:
        return f"evicting {len(plan.evict)} pod(s): {', '.join(object_key(p) for p in plan.evict)}"
    if plan.waiting:
        return f"waiting for {plan.waiting} pod(s) to leave"
    return "drained: terminating its instance"


class Terminator:
    def __init__(self, state: ClusterState, cloud: CloudProvider, clock: Clock | None = None) -> None:
        self.state, self.cloud, self.clock = state, cloud, clock or Clock()
        self._announced: dict[str, str] = {}     # node -> the drain failure last said about it

    def reconcile(self) -> float | None:
        """Advance every deleting karpy node one step; returns when to look again."""
        again: float | None = None
        for node in self.state.nodes.items():
            if draining(node):
                wait = self._terminate(node)
                if wait is not None:
                    again = wait if again is None else min(again, wait)
        return again

    def _deadline(self, node: Mapping[str, Any]) -> dt.datetime | None:
        """A NodePool node's termination time: as recorded, else its deletion plus the terminationGracePeriod its
        NodeClaim was stamped with (its NodePool's template's, for a node without a claim)."""
        if NODECLAIM_TERMINATION_TIMESTAMP in (node["metadata"].get("annotations") or {}):
            return node_termination_time(node, None)
        claim = self.state.claim_of(node["metadata"]["name"])
        if claim is not None:
            grace = (claim.get("spec") or {}).get("terminationGracePeriod")
        else:
            owner = self.state.provisioner((node["metadata"].get("labels") or {}).get(wk.NODEPOOL) or "")
            node_pool = getattr(owner, "node_pool", None)
            grace = node_pool.spec.template.spec.termination_grace_period if node_pool is not None else None
        return node_termination_time(node, grace)

    def _terminate(self, node: dict[str, Any]) -> float | None:
        name = node["metadata"]["name"]
        client = self.state.client
        v1 = bool((node["metadata"].get("labels") or {}).get(wk.NODEPOOL))
        try:
            deadline = self._deadline(node) if v1 else None
        except DurationError as e:
            log.error("Reading the terminationGracePeriod of node %s, %s; draining without one", name, e)
            deadline = None
        try:
            # 1. cordon, so nothing new lands here, and leave external load balancers before the pods go;
            # the termination time is written down with it, so a restart keeps the same deadline
            labels = node["metadata"].get("labels") or {}
            record = termination_annotation(node, deadline)
            if not (node.get("spec") or {}).get("unschedulable") or record or \
                    labels.get(wk.EXCLUDE_FROM_LOAD_BALANCERS) != LOAD_BALANCER_EXCLUSION:
                node = client.patch(path_of("v1", "nodes", name=name),      # the finalizer patch tests this version
                                    {"metadata": {"labels": {wk.EXCLUDE_FROM_LOAD_BALANCERS: LOAD_BALANCER_EXCLUSION},
                                                  **({"annotations": record} if record else {})},
                                     "spec": {"unschedulable": True}})
                log.info("Cordoned node %s", name)
            # 2. drain: past the termination time's reach, pods are deleted; the others go through the Eviction API
            now = self.clock.now()
            pods = self.state.pods_on(name)
            forced = forced_deletes([p for p in pods if not leaves_with_node(p, now)], deadline=deadline, now=now)
            for pod, grace in forced.delete:
                self._delete(node, pod, grace, deadline)
            gone = {id(p) for p, _ in forced.delete}
            plan = plan_drain([p for p in pods if id(p) not in gone], now=now, v1=v1)
            if plan.blocker and self._announced.get(name) != plan.blocker:
                log.info("Failed to drain node %s, %s", name, plan.blocker)
                events.record(client, node, reason="FailedDraining", component="karpy", event_type="Warning",
                              message=f"Failed to drain node, {plan.blocker}")
                self._announced[name] = plan.blocker
            for pod in plan.evict:
                self._evict(pod)
            if forced.delete or not plan.drained:
                wait = 5.0 if plan.blocker and not plan.evict else 1.0
                if forced.next_at is not None:          # look again when the next pod is to be forced out
                    wait = min(wait, max((forced.next_at - now).total_seconds(), 0.1))
                return wait
            # 3. terminate the instance; the finalizer stays until the provider says it is gone
            provider_id = (node.get("spec") or {}).get("providerID")
            if provider_id:
                try:
                    self.cloud.delete(provider_id)
                    return 0.5
                except InstanceNotFound:
                    pass
            # 4. let the node go
            finalizers = [f for f in node["metadata"].get("finalizers") or [] if f != wk.TERMINATION_FINALIZER]
            client.patch(path_of("v1", "nodes", name=name),
                         [{"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]},
                          {"op": "replace", "path": "/metadata/finalizers", "value": finalizers}], "application/json-patch+json")
            count_node_terminated(node, termination_reason(node))
            self._announced.pop(name, None)
            log.info("Deleted node %s", name)
            return None
        except ApiException as e:
            if e.status == 404:
                return None                     # already gone: the goal is met
            if e.status in (409, 422):
                return 0.2                      # the node changed under us: look again
            raise

    def _delete(self, node: Mapping[str, Any], pod: dict[str, Any], grace: int, deadline: dt.datetime | None) -> None:
        """Delete `pod` past PDBs and do-not-disrupt, with `grace` seconds, so the node is gone by `deadline`."""
        meta = pod["metadata"]
        try:
            self.state.client.delete(path_of("v1", "pods", meta["namespace"], meta["name"]), gracePeriodSeconds=grace)
        except ApiException as e:
            if e.status != 404:
                raise
            return
        EVICTIONS.labels("deleted").inc()
        log.info("Deleted pod %s/%s of node %s with a grace period of %ds, its node's termination time is %s",
                 meta["namespace"], meta["name"], node["metadata"]["name"], grace, deadline and rfc3339(deadline))
        events.record(self.state.client, pod, reason="Disrupted", component="karpy", event_type="Warning",
                      message=f"Deleting the pod to accommodate the terminationTime {deadline and rfc3339(deadline)} "
                              f"of the node. The pod was granted {grace} seconds of grace-period of its "
                              f"{(pod.get('spec') or {}).get('terminationGracePeriodSeconds')} terminationGracePeriodSeconds. "
                              "This bypasses the PDB of the pod and the do-not-disrupt annotation.")

    def _evict(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
        try:
            self.state.client.create(path_of("v1", "pods", meta["namespace"], meta["name"], "eviction"), body)
            EVICTIONS.labels("evicted").inc()
        except ApiException as e:
            if e.status == 429:
                EVICTIONS.labels("blocked").inc()   # a PodDisruptionBudget says wait; retried on the next pass
            elif e.status == 500:
                # e.g. a pod under two budgets, which the Eviction API refuses; the pod stays (never
                # deleted past its budgets), the node's other pods still go, and the next pass retries
                EVICTIONS.labels("failed").inc()
                log.error("Failed to evict pod %s/%s, %s", meta["namespace"], meta["name"], e.reason)
            elif e.status != 404:
                raise
