"""Simulated kubelets: one per node, all driven from one loop.

A node that appears becomes Ready after the boot delay (the not-ready taint
goes, capacity becomes allocatable if the node did not say); a pod bound to a
Ready node starts Running and Ready; a pod being deleted on its node is
stopped and removed; pods whose node is gone are removed (the pod garbage
collector's job). Everything goes through the API server.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from apis.labels import TAINT_NOT_READY, TAINT_UNREACHABLE
from kubeclient.raw import Informer, RawClient, path_of
from simulator.store import now_rfc3339

log = logging.getLogger("simulator.kubelet")
Obj = dict[str, Any]


def node_info(name: str) -> dict[str, str]:
    """status.nodeInfo as a kubelet reports it (every field the API declares required)."""
    return {"kubeletVersion": "v1.31.0", "kubeProxyVersion": "v1.31.0", "osImage": "karpy local node",
            "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0", "architecture": "amd64",
            "operatingSystem": "linux", "machineID": name, "systemUUID": name, "bootID": name}


def node_ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


class Kubelets:
    def __init__(self, client: RawClient, nodes: Informer, pods: Informer, *, boot_delay: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.nodes, self.pods = client, nodes, pods
        self.boot_delay = boot_delay
        self.clock = clock
        self._seen: dict[str, float] = {}        # node name -> when it appeared
        self._ip = 100

    def reconcile(self) -> float | None:
        now = self.clock()
        nodes = {n["metadata"]["name"]: n for n in self.nodes.items()}
        wait: float | None = None
        for name, node in nodes.items():
            if node_ready(node) or node["metadata"].get("deletionTimestamp"):
                continue
            appeared = self._seen.setdefault(name, now)
            left = appeared + self.boot_delay - now
            if left <= 0:
                self._make_ready(node)
            else:
                wait = left if wait is None else min(wait, left)
        for name in list(self._seen):
            if name not in nodes:
                del self._seen[name]
        for pod in self.pods.items():
            self._pod(pod, nodes)
        return wait

    def _make_ready(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        self._ip += 1
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                           "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()})
        patch = {"status": {
            "conditions": conditions, "nodeInfo": status.get("nodeInfo") or node_info(name),
            "capacity": status.get("capacity") or status.get("allocatable") or {},
            "allocatable": status.get("allocatable") or status.get("capacity") or {},
            "addresses": status.get("addresses") or [{"type": "InternalIP", "address": f"10.0.{self._ip // 250}.{self._ip % 250}"},
                                                     {"type": "Hostname", "address": name}],
        }}
        try:
            self.client.patch(path_of("v1", "nodes", name=name, subresource="status"), patch)
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t.get("key") not in (TAINT_NOT_READY, TAINT_UNREACHABLE)]
            if len(kept) != len(taints):
                self.client.patch(path_of("v1", "nodes", name=name), [{"op": "replace", "path": "/spec/taints", "value": kept}],
                                  "application/json-patch+json")
            log.info("Node %s is Ready", name)
        except ApiException as e:
            if e.status != 404:
                raise

    def _pod(self, pod: Obj, nodes: dict[str, Obj]) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node_name = spec.get("nodeName")
        if not node_name:
            return
        path = path_of("v1", "pods", meta.get("namespace"), meta["name"])
        node = nodes.get(node_name)
        try:
            if node is None or meta.get("deletionTimestamp"):
                if node is None and not meta.get("deletionTimestamp") and status.get("phase") in ("Succeeded", "Failed"):
                    return
                self.client.delete(path, gracePeriodSeconds=0)
                return
            if status.get("phase") == "Pending" and node_ready(node):
                now = now_rfc3339()
                self._ip += 1
                containers = spec.get("containers") or []
                self.client.patch(path + "/status", {"status": {
                    "phase": "Running", "startTime": now, "podIP": f"10.1.{self._ip // 250 % 250}.{self._ip % 250}",
                    "hostIP": next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                                    if a.get("type") == "InternalIP"), ""),
                    "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                   for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
                    "containerStatuses": [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                                           "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}}
                                          for c in containers],
                }})
        except ApiException as e:
            if e.status not in (404, 409):
                raise
