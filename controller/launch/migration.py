"""Upgrade: rewrite launch records kept as karpy.dev/v1alpha1 NodeClaims as karpenter.sh/v1 NodeClaims.

karpy once recorded each launch as its own `karpy.dev/v1alpha1` NodeClaim.
At start, before any launch is finished or planned, each one still there is
rewritten as a v1 NodeClaim of the same name (the name the instance is
tagged with), its progress carried over as conditions; only once the new
one exists is the old one's finalizer dropped and the old one deleted. A
crash anywhere in between is finished by the next start: a 409 means the
new record was written already. `converted` is pure; `migrate` does the I/O.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis import launch_record as rec
from karpy.apis import nodeclaim as legacy
from karpy.apis.launch_record import PodReference
from karpy.apis.requirements import Requirements
from karpy.apis.v1 import nodeclaim as v1
from karpy.controller.launch.claims import claim_requirements, node_class_ref
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.provisioning")
Obj = dict[str, Any]
LEGACY_CLAIMS = path_of(legacy.GROUP_VERSION, legacy.PLURAL)


def converted(old: Mapping[str, Any], owner: Mapping[str, Any] | None, *, now: str) -> tuple[Obj, Obj | None]:
    """Pure: the v1 NodeClaim recording what legacy claim `old` recorded, and its status (None before launch).
    `owner` is the Provisioner it names, as read (None when gone)."""
    spec, status, meta = old.get("spec") or {}, old.get("status") or {}, old["metadata"]
    provisioner = str(spec.get("provisioner") or "")
    launched = {k: v for k, v in ((wk.INSTANCE_TYPE, status.get("instanceType")), (wk.ZONE, status.get("zone")),
                                  (wk.CAPACITY_TYPE, status.get("capacityType"))) if v}
    pods = [PodReference(p["namespace"], p["name"], p.get("uid") or None) for p in spec.get("pods") or []]
    annotations = {k: v for k, v in (spec.get("annotations") or {}).items() if k != wk.LAUNCHED_FOR}
    requirements = Requirements.from_node_selector_requirements(spec.get("requirements"))
    body: Obj = {
        "apiVersion": v1.GROUP_VERSION, "kind": v1.KIND,
        "metadata": {"name": meta["name"], "finalizers": [wk.TERMINATION_FINALIZER],
                     "labels": {**(spec.get("labels") or {}), **launched, wk.PROVISIONER_NAME: provisioner},
                     "annotations": {**annotations, rec.PODS: rec.pods_annotation(pods, bind=spec.get("bind", True))},
                     **({"ownerReferences": meta["ownerReferences"]} if meta.get("ownerReferences") else {})},
        "spec": {"requirements": claim_requirements(requirements, list(spec.get("instanceTypes") or [])),
                 "nodeClassRef": node_class_ref(owner, provisioner), "expireAfter": "Never",
                 **({"taints": spec["taints"]} if spec.get("taints") else {})},
    }
    if not status.get("providerID"):
        return body, None
    progress = {rec.LAUNCHED: True, rec.REGISTERED: bool(status.get("nodeCreated")),
                rec.PODS_BOUND: bool(status.get("podsBound"))}
    conditions = rec.with_conditions({}, now, **{k: v for k, v in progress.items() if v})
    return body, {"providerID": status["providerID"], "nodeName": status.get("nodeName"), "conditions": conditions}


def migrate(state: ClusterState, *, now: str) -> int:
    """Rewrite every karpy.dev/v1alpha1 NodeClaim as a karpenter.sh/v1 one; returns how many were rewritten.
    A cluster without the old CRD has nothing to migrate."""
    try:
        olds = state.client.get(LEGACY_CLAIMS).get("items") or []
    except ApiException as e:
        if e.status == 404:
            return 0
        raise
    for old in olds:
        name = old["metadata"]["name"]
        owner = state.provisioners.get("", str((old.get("spec") or {}).get("provisioner") or ""))
        body, status = converted(old, owner, now=now)
        claims = path_of(v1.GROUP_VERSION, v1.PLURAL)
        try:                                                      # 1. the new record
            new = state.client.create(claims, body)
        except ApiException as e:
            if e.status != 409:
                raise
            new = state.client.get(path_of(v1.GROUP_VERSION, v1.PLURAL, name=name))   # written before a crash
        if status is not None and not (new.get("status") or {}).get("providerID"):     # 2. how far it got
            state.client.patch(path_of(v1.GROUP_VERSION, v1.PLURAL, name=name, subresource="status"), {"status": status})
        if old["metadata"].get("deletionTimestamp"):              # being deleted: the new record's finalizer finishes it
            _delete(state, path_of(v1.GROUP_VERSION, v1.PLURAL, name=name))
        old_path = path_of(legacy.GROUP_VERSION, legacy.PLURAL, name=name)
        try:                                                      # 3. only now the old one goes
            state.client.patch(old_path, {"metadata": {"finalizers": None}})
        except ApiException as e:
            if e.status != 404:
                raise
        _delete(state, old_path)
        log.info("Migrated node claim %s to %s", name, v1.GROUP_VERSION)
    return len(olds)


def _delete(state: ClusterState, path: str) -> None:
    try:
        state.client.delete(path)
    except ApiException as e:
        if e.status != 404:
            raise
