"""The NodeClaim disruption conditions, written: v1's `Drifted` (with its reason) while a launched NodeClaim no longer
matches what its NodePool and EC2NodeClass would launch now, and `Consolidatable` once its NodePool's
`consolidateAfter` has passed since the last pod event on its node; each is removed once it no longer holds.

As v1's hash controllers do, the NodePool's (and EC2NodeClass's) hash is kept in its own annotations for users to
compare with their NodeClaims'. A Provisioner's NodeClaims are looked at only behind the Drift feature gate
(v0.21-v0.31): then each Provisioner is stamped with `karpenter.sh/provisioner-hash`, and nodes launched from it from
then on carry the hash of the spec they came from; they never get `Consolidatable` (v0.16 has no consolidateAfter).
Replacing a Drifted node (replacement first, within the `Drifted` budget) is the consolidation controller's Drift
method; this only marks. The decisions (`claim_drift`, apis/v1/disruption/consolidatable.py) are pure; reconcile
reads, decides and writes.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Callable, Mapping

import pydantic
from kubernetes.client.exceptions import ApiException

from karpy.apis import launch_record as rec
from karpy.apis.timestamps import rfc3339
from karpy.apis.v1 import nodeclaim as v1
from karpy.apis.v1.disruption.consolidatable import Consolidatability, condition_change, nodeclaim_consolidatability
from karpy.apis.v1.disruption.drift import (
    PROVISIONER_HASH,
    DriftReason,
    drifted,
    ec2nodeclass_hash_annotations,
    nodepool_hash_annotations,
    provisioner_drifted,
    provisioner_hash,
)
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1.labels import CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED
from karpy.apis.v1.pool import NodePoolProvisioner
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.clock import Clock
from karpy.controller.consolidation.candidates import last_pod_event_of, reschedulable
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.drift")
RESYNC_SECONDS = 30.0              # drift comes from edits the watch reports; this catches what it missed
Obj = dict[str, Any]


def as_nodeclaim(claim: Mapping[str, Any]) -> v1.NodeClaim | None:
    """Pure: `claim` read as v1's NodeClaim, or None when it is not of that shape (nothing to compare against)."""
    try:
        return v1.NodeClaim.model_validate(claim)
    except pydantic.ValidationError:
        return None


def claim_drift(claim: Mapping[str, Any], owner: Provisioner | None, *, node_class: EC2NodeClass | None = None,
                provisioner_drift: bool = False, nodeclaim: v1.NodeClaim | None = None) -> DriftReason | None:
    """Pure: why `claim` has drifted from `owner` (its NodePool in a Provisioner's terms, or a Provisioner) and the
    EC2NodeClass it names, or None. A Provisioner's claim drifts only with `provisioner_drift` (the Drift gate); an
    EC2NodeClass's AMIs are compared only once its status lists some. `nodeclaim`: `claim` already read as v1's
    (as_nodeclaim), when the caller has it."""
    if owner is None or not (claim.get("status") or {}).get("providerID"):
        return None                   # its owner is gone (garbage collection's) or it is still launching
    meta = claim.get("metadata") or {}
    if not isinstance(owner, NodePoolProvisioner):
        if not provisioner_drift:
            return None
        return provisioner_drifted(owner, labels=meta.get("labels") or {}, annotations=meta.get("annotations") or {})
    if nodeclaim is None and (nodeclaim := as_nodeclaim(claim)) is None:
        return None
    pool = owner.node_pool.model_copy(deep=True)
    pool.metadata.annotations = {**(pool.metadata.annotations or {}), **nodepool_hash_annotations(pool)}
    images = [ami.id for ami in (node_class.status.amis or [])] if node_class and node_class.status else None
    return drifted(nodeclaim, pool, nodeclass_annotations=ec2nodeclass_hash_annotations(node_class) if node_class else None,
                   image_ids=images)


def with_node_labels(claim: Obj, node: Mapping[str, Any] | None) -> Obj:
    """Pure: `claim` with its Node's labels under its own: v1's NodeClaim carries every label of the instance type it
    launched (instance category, generation, ...); karpy writes those on the Node, so requirements drift reads both."""
    if node is None:
        return claim
    meta = claim["metadata"]
    labels = {**(node["metadata"].get("labels") or {}), **(meta.get("labels") or {})}
    return {**claim, "metadata": {**meta, "labels": labels}}


def drift_conditions(claim: Mapping[str, Any], reason: DriftReason | None, *, now: str) -> list[Obj] | None:
    """Pure: the claim's conditions with Drifted set to `reason` (removed for None, as v1 clears it), or None when
    they say so already."""
    conditions = [dict(c) for c in (claim.get("status") or {}).get("conditions") or []]
    current = next((c for c in conditions if c.get("type") == CONDITION_DRIFTED), None)
    if reason is None:
        return None if current is None else [c for c in conditions if c is not current]
    if current is not None and current.get("status") == "True" and current.get("reason") == reason:
        return None
    kept = [c for c in conditions if c is not current]
    return kept + [{"type": CONDITION_DRIFTED, "status": "True", "reason": reason, "message": "",
                    "lastTransitionTime": now}]


def claim_consolidatability(nodeclaim: v1.NodeClaim | None, owner: Provisioner | None, *, pod_event: dt.datetime | None,
                            now: dt.datetime) -> Consolidatability | None:
    """Pure: whether a NodePool's claim (read as v1's: as_nodeclaim) is Consolidatable at `now` (`pod_event`: the
    latest pod event its node's pods show), or None for a claim that carries no such condition (a Provisioner's, or
    one not of v1's shape)."""
    if nodeclaim is None or not isinstance(owner, NodePoolProvisioner):
        return None
    return nodeclaim_consolidatability(nodeclaim, owner.node_pool, now, pod_event=pod_event)


def consolidatable_conditions(nodeclaim: v1.NodeClaim, conditions: list[Obj], verdict: Consolidatability | None, *,
                              now: str) -> list[Obj] | None:
    """Pure: `conditions` (the claim's, Drifted already decided) with Consolidatable set True or removed as `verdict`
    says (v1 never writes it False), or None when `nodeclaim` says so already."""
    if verdict is None:
        return None
    change = condition_change(nodeclaim, verdict)
    if change is None:
        return None
    kept = [c for c in conditions if c.get("type") != CONDITION_CONSOLIDATABLE]
    if change == "clear":
        return kept
    return kept + [{"type": CONDITION_CONSOLIDATABLE, "status": "True", "reason": CONDITION_CONSOLIDATABLE,
                    "message": "", "lastTransitionTime": now}]


def drifted_nodes(claims: list[Obj]) -> dict[str, str]:
    """Pure: node name -> Drifted reason, for every claim marked Drifted whose node is known."""
    out = {}
    for claim in claims:
        found = rec.condition(claim, CONDITION_DRIFTED)
        node = rec.node_name(claim)
        if found is not None and found.get("status") == "True" and node and not claim["metadata"].get("deletionTimestamp"):
            out[str(node)] = str(found.get("reason") or CONDITION_DRIFTED)
    return out


class DriftMarker:
    def __init__(self, state: ClusterState, clock: Clock, *, provisioner_drift: bool = False,
                 on_marked: Callable[[], None] | None = None) -> None:
        """`provisioner_drift`: the Drift feature gate (Provisioners' nodes drift too). `on_marked` is called after a
        pass that marked a claim Drifted (the operator wakes consolidation, whose Drift method replaces it)."""
        self.state, self.clock = state, clock
        self.provisioner_drift = provisioner_drift
        self.on_marked = on_marked

    def reconcile(self) -> float | None:
        classes = {}
        for raw in self.state.ec2nodeclasses.items():
            try:
                classes[raw["metadata"]["name"]] = EC2NodeClass.model_validate(raw)
            except pydantic.ValidationError:
                continue              # the nodeclass controller reports it
        # 1. the owners' hashes, where users see them (and, for a gated Provisioner, where its launches read it)
        self._stamp_hashes(list(classes.values()))
        owners = {p.name: p for p in self.state.live_provisioners() if not p.metadata.deletion_timestamp}
        # 2. each launched claim, marked or cleared; the pass comes again when a claim next turns Consolidatable
        now_time = self.clock.now()
        now = rfc3339(now_time)
        marked = 0
        again = RESYNC_SECONDS
        for claim in self.state.claims.items():
            if claim["metadata"].get("deletionTimestamp"):
                continue
            node_name = rec.node_name(claim) or ""
            claim = with_node_labels(claim, self.state.nodes.get("", node_name))
            owner = owners.get(rec.owner_name(claim))
            ref = (claim.get("spec") or {}).get("nodeClassRef") or {}
            node_class = classes.get(ref.get("name", "")) if ref.get("kind") == "EC2NodeClass" else None
            nodeclaim = as_nodeclaim(claim)
            reason = claim_drift(claim, owner, node_class=node_class, provisioner_drift=self.provisioner_drift,
                                 nodeclaim=nodeclaim)
            drift = drift_conditions(claim, reason, now=now)
            verdict = claim_consolidatability(nodeclaim, owner, pod_event=self._pod_event(node_name), now=now_time)
            if verdict is not None and (wait := verdict.requeue_after_seconds(now_time)) is not None:
                again = min(again, wait)
            before = drift if drift is not None else [dict(c) for c in (claim.get("status") or {}).get("conditions") or []]
            consolidatable = None if nodeclaim is None else consolidatable_conditions(nodeclaim, before, verdict, now=now)
            conditions = consolidatable if consolidatable is not None else drift
            if conditions is None:
                continue
            name = claim["metadata"]["name"]
            try:
                self.state.client.patch(path_of(v1.GROUP_VERSION, v1.PLURAL, name=name, subresource="status"),
                                        {"status": {"conditions": conditions}})
            except ApiException as e:
                if e.status != 404:          # gone meanwhile: nothing to mark
                    raise
                continue
            if drift is not None and reason is not None:
                marked += 1
                log.info("Marked node claim %s drifted (%s)", name, reason)
            elif drift is not None:
                log.info("Node claim %s is no longer drifted", name)
            if consolidatable is not None and verdict is not None:
                log.info("Node claim %s is %s", name, "consolidatable" if verdict.consolidatable
                         else f"no longer consolidatable: {verdict.why}")
        if marked and self.on_marked is not None:
            self.on_marked()
        return again

    def _pod_event(self, node_name: str) -> dt.datetime | None:
        """The latest pod event the pods that would move off `node_name` show (none for a claim without a node)."""
        if not node_name:
            return None
        return last_pod_event_of([p for p in self.state.pod_infos(self.state.pods_on(node_name)) if reschedulable(p)])

    def _stamp_hashes(self, classes: list[EC2NodeClass]) -> None:
        """Write each owner's hash annotations, and each of `classes`' (the EC2NodeClasses, read), where they differ
        from what it carries (v1's hash controllers)."""
        wanted: list[tuple[str, str, str, dict[str, str]]] = []
        for owner in self.state.live_provisioners():
            if isinstance(owner, NodePoolProvisioner):
                wanted.append(("karpenter.sh/v1", "nodepools", owner.name, nodepool_hash_annotations(owner.node_pool)))
            elif self.provisioner_drift:
                wanted.append(("karpenter.sh/v1alpha5", "provisioners", owner.name, {PROVISIONER_HASH: provisioner_hash(owner)}))
        for node_class in classes:
            wanted.append(("karpenter.k8s.aws/v1", "ec2nodeclasses", node_class.metadata.name or "",
                           ec2nodeclass_hash_annotations(node_class)))
        informers = {"nodepools": self.state.nodepools, "provisioners": self.state.provisioners,
                     "ec2nodeclasses": self.state.ec2nodeclasses}
        for api_version, plural, name, stamp in wanted:
            live = informers[plural].get("", name)
            have = ((live or {}).get("metadata") or {}).get("annotations") or {}
            if live is None or all(have.get(k) == v for k, v in stamp.items()):
                continue
            try:
                self.state.client.patch(path_of(api_version, plural, name=name), {"metadata": {"annotations": stamp}})
            except ApiException as e:
                if e.status != 404:
                    raise
