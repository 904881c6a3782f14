"""Initialization: label a karpy node `karpenter.sh/initialized=true` once it is Ready and its
provisioner's startup taints are gone; delete it if it never gets there (registration timeout).
A v1 NodePool's node registers first, as Karpenter v1's registration does: once its kubelet reports it
Ready, its `karpenter.sh/unregistered` taint goes and it is labelled `karpenter.sh/registered=true`.

Deleting hands the node to termination, which terminates its instance."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.conditions import initialized, ready
from karpy.apis.timestamps import parse_time
from karpy.controller.clock import Clock
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.node")
REGISTRATION_TIMEOUT = dt.timedelta(minutes=15)



def decide(*, node: dict[str, Any], startup_taints: set[str], now: dt.datetime) -> str | None:
    """Pure: "register", "label", "delete" or None."""
    if initialized(node) or node["metadata"].get("deletionTimestamp"):
        return None
    taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
    if wk.TAINT_UNREGISTERED in taints and ready(node):
        return "register"
    if ready(node) and not (taints & (startup_taints | {wk.TAINT_NOT_READY})):
        return "label"
    created = parse_time(node["metadata"].get("creationTimestamp"))
    if not ready(node) and created is not None and now - created > REGISTRATION_TIMEOUT:
        return "delete"
    return None


class Initialization:
    def __init__(self, state: ClusterState, clock: Clock) -> None:
        self.state, self.clock = state, clock

    def reconcile(self) -> float | None:
        again: float | None = None
        for node in self.state.nodes.items():
            owner = self.state.ours(node)
            if owner is None:
                continue
            provisioner = self.state.provisioner(owner)
            startup = {t.key for t in (provisioner.spec.startup_taints or [])} if provisioner else set()
            verdict = decide(node=node, startup_taints=startup, now=self.clock.now())
            name = node["metadata"]["name"]
            try:
                if verdict == "register":
                    kept = [t for t in node["spec"].get("taints") or [] if t.get("key") != wk.TAINT_UNREGISTERED]
                    # the taints as read, so a write in between is a conflict (retried next pass), not lost
                    self.state.client.patch(path_of("v1", "nodes", name=name), {
                        "metadata": {"labels": {wk.REGISTERED: "true"}, "resourceVersion": node["metadata"].get("resourceVersion")},
                        "spec": {"taints": kept}})
                    log.info("Registered node %s", name)
                    again = 0.0                       # look again soon: it may be initialized at once
                if verdict == "label":
                    self.state.client.patch(path_of("v1", "nodes", name=name), {"metadata": {"labels": {wk.INITIALIZED: "true"}}})
                    log.info("Initialized node %s", name)
                elif verdict == "delete":
                    log.info("Triggering termination for node %s that did not become Ready within %s", name, REGISTRATION_TIMEOUT)
                    self.state.delete_node(name)
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
                again = 1.0 if e.status == 409 else again
        return again
