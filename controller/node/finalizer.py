"""Finalizer: every live node labelled with a known Provisioner's name carries the `karpenter.sh/termination`
finalizer and an owner reference to that Provisioner, whoever created it.

A node karpy did not write itself (created by hand, by an earlier install,
or registered by a kubelet before the launch wrote it) would otherwise skip
the drain on delete and outlive its Provisioner. As Karpenter v0.16.3's node
controller (finalizer.go) does, the owner references are set to the
Provisioner alone. Draining on delete belongs to controller/termination.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.controller.launch.claims import owner_reference
from karpy.controller.state import ClusterState
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.node")


def ownership_patch(node: Mapping[str, Any], provisioner: Mapping[str, Any]) -> dict[str, Any] | None:
    """Pure: the merge patch that gives `node` the termination finalizer and `provisioner` as its only owner,
    or None when it has both (or is being deleted: a deleting object takes no new finalizer). The patch
    carries the node's resourceVersion, so a finalizer someone adds meanwhile is not overwritten."""
    meta = node["metadata"]
    if meta.get("deletionTimestamp"):
        return None
    finalizers = list(meta.get("finalizers") or [])
    owners = [owner_reference(provisioner)]
    if wk.TERMINATION_FINALIZER in finalizers and meta.get("ownerReferences") == owners:
        return None
    if wk.TERMINATION_FINALIZER not in finalizers:
        finalizers.append(wk.TERMINATION_FINALIZER)
    return {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": finalizers, "ownerReferences": owners}}


class Finalizer:
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def reconcile(self) -> float | None:
        """Patch every node that lacks the finalizer or the owner reference; returns when to look again
        (soon, when a node changed under a patch)."""
        again: float | None = None
        for node in self.state.nodes.items():
            owner = self.state.ours(node)
            provisioner = self.state.pool_object(owner) if owner else None
            if provisioner is None or provisioner["metadata"].get("deletionTimestamp"):
                continue                    # not a provisioner's node, or its provisioner is gone or going
            patch = ownership_patch(node, provisioner)
            if patch is None:
                continue
            name = node["metadata"]["name"]
            try:
                self.state.client.patch(path_of("v1", "nodes", name=name), patch)
                log.info("Added termination finalizer and owner reference to provisioner %s on node %s", owner, name)
            except ApiException as e:
                if e.status == 409:
                    again = 0.2             # changed under us: look again at the new version
                elif e.status != 404:
                    raise
        return again
