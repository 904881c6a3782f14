"""Simulated kubelets: one per node, all driven from one loop.

A node that appears becomes Ready after the boot delay (the not-ready taint
goes, capacity becomes allocatable if the node did not say); a pod bound to a
Ready node starts Running and Ready; a pod being deleted on its node is
stopped and removed; pods whose node is gone are removed (the pod garbage
collector's job). Everything goes through the API server.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from karpy.apis.conditions import ready
from karpy.apis.labels import TAINT_NOT_READY, TAINT_UNREACHABLE
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, now_rfc3339, path_of
from karpy.simulator.writes import Writes

log = logging.getLogger("simulator.kubelet")
ORPHAN_GRACE_SECONDS = 2.0
NODE_INDEX = "kubelet-node"                 # the pods informer's index of pods by their node
WORK_INDEX = "kubelet-work"                 # and of the bound pods a kubelet has to start or remove


def _work(pod: Obj) -> str | None:
    """WORK_INDEX's key: bound pods not started yet or being deleted (a pass reads these, not every pod)."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") == "Pending":
        return "work"
    return None
Obj = dict[str, Any]


def node_info(name: str) -> dict[str, str]:
    """status.nodeInfo as a kubelet reports it (every field the API declares required)."""
    return {"kubeletVersion": "v1.31.0", "kubeProxyVersion": "v1.31.0", "osImage": "karpy local node",
            "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0", "architecture": "amd64",
            "operatingSystem": "linux", "machineID": name, "systemUUID": name, "bootID": name}


class Kubelets:
    def __init__(self, client: RawClient, nodes: Informer, pods: Informer, *, boot_delay: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.nodes, self.pods = client, nodes, pods
        self.boot_delay = boot_delay
        self.clock = clock
        self._seen: dict[str, float] = {}        # node name -> when it appeared
        self._orphaned: dict[str, float] = {}    # pod uid -> when its node was first missing from the cache
        self._ip = 100
        self._writes = Writes("kubelet")
        # the pods a node's kubelet starts as it comes up: each kubelet is its own process in a cluster, so
        # the nodes of a burst start their pods side by side, not one node's pods after another's
        self._starts = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="kubelet-starts")
        # what a write was sent for: object -> its resourceVersion then. A pass that starts before the watch shows
        # the write's result skips the object instead of sending the same write again (a kubelet's status
        # manager remembers what it reported, too); a failed write forgets, so the next pass tries again
        self._sent: dict[str, str] = {}
        self._sent_lock = threading.Lock()       # passes and the writes that start a node's pods both remember
        pods.add_index(NODE_INDEX, lambda p: (p.get("spec") or {}).get("nodeName"))
        pods.add_index(WORK_INDEX, _work)

    def reconcile(self) -> float | None:
        now = self.clock()
        nodes = {n["metadata"]["name"]: n for n in self.nodes.items()}
        # the pods to start or remove, and the pods of nodes gone from the cache; running pods of live nodes
        # (most pods, most passes) are not read
        pods = {p["metadata"].get("uid"): p for p in self.pods.by_index(WORK_INDEX, "work")}
        for node_name in self.pods.index_keys(NODE_INDEX):
            if node_name not in nodes:
                pods.update((p["metadata"].get("uid"), p) for p in self.pods.by_index(NODE_INDEX, node_name))
        live = set(pods)
        # pruned from a copy: a write of the last pass still in flight (its pass failed) may forget its key meanwhile
        self._sent = {k: v for k, v in list(self._sent.items())
                      if (k.partition("/")[2] in live if k.startswith("pod/") else k.partition("/")[2] in nodes)}
        wait: float | None = None
        for name, node in nodes.items():
            if ready(node) or node["metadata"].get("deletionTimestamp"):
                continue
            appeared = self._seen.setdefault(name, now)
            left = appeared + self.boot_delay - now
            if left <= 0:                # many nodes boot at once in a burst: their Ready reports go side by side
                if self._remember(f"node/{name}", node):
                    self._ip += 1
                    self._writes.submit(self._tolerant_ready(node, self._ip))
            else:
                wait = left if wait is None else min(wait, left)
        for name in list(self._seen):
            if name not in nodes:
                del self._seen[name]
        self._orphaned = {uid: t for uid, t in self._orphaned.items() if uid in live}
        for pod in pods.values():
            self._pod(pod, nodes)
        # not awaited: the next pass starts while they are in flight (a node that appears meanwhile is not
        # kept waiting for them), and `_sent` keeps it from sending any of them again
        self._writes.forget_done()
        if self._orphaned:
            wait = ORPHAN_GRACE_SECONDS if wait is None else min(wait, ORPHAN_GRACE_SECONDS)
        return wait

    def _node_gone(self, pod: Obj, node_name: str) -> bool:
        """True once the pod's node has been missing for a while and the API server confirms it
        (a node launched a moment ago may not be in this cache yet, though its pods are)."""
        uid = pod["metadata"].get("uid", "")
        first = self._orphaned.setdefault(uid, self.clock())
        if self.clock() - first < ORPHAN_GRACE_SECONDS:
            return False
        try:
            self.client.get(path_of("v1", "nodes", name=node_name))
            self._orphaned.pop(uid, None)
            return False
        except ApiException as e:
            return e.status == 404

    def _remember(self, key: str, obj: Obj) -> bool:
        """False when a write for this version of `obj` was sent already; else remembers that one is now."""
        version = obj["metadata"].get("resourceVersion", "")
        with self._sent_lock:
            if self._sent.get(key) == version:
                return False
            self._sent[key] = version
            return True

    def _tolerant_ready(self, node: Obj, ip: int) -> Callable[[], None]:
        def write() -> None:
            try:
                self._make_ready(node, ip)
            except ApiException as e:
                self._sent.pop(f"node/{node['metadata']['name']}", None)
                log.warning("kubelet of node %s: %s", node["metadata"]["name"], e.reason)
        return write

    def _make_ready(self, node: Obj, ip: int) -> None:
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                           "lastHeartbeatTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()})
        patch = {"status": {
            "conditions": conditions, "nodeInfo": status.get("nodeInfo") or node_info(name),
            "capacity": status.get("capacity") or status.get("allocatable") or {},
            "allocatable": status.get("allocatable") or status.get("capacity") or {},
            "addresses": status.get("addresses") or [{"type": "InternalIP", "address": f"10.0.{ip // 250}.{ip % 250}"},
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
            return
        # the kubelet is up: it starts the pods already bound to its node now, not when a pass sees the node Ready
        started = {**node, "status": {**status, **patch["status"]}}
        for pod in self.pods.by_index(NODE_INDEX, name):
            meta = pod["metadata"]
            if (pod.get("status") or {}).get("phase") == "Pending" and not meta.get("deletionTimestamp"):
                key = f"pod/{meta.get('uid', '')}"
                if self._remember(key, pod):
                    self._starts.submit(self._tolerant(self.client.patch, *self._running(pod, started), forget=key))

    def _pod(self, pod: Obj, nodes: dict[str, Obj]) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node_name = spec.get("nodeName")
        if not node_name:
            return
        node = nodes.get(node_name)
        if node is not None and not meta.get("deletionTimestamp") and status.get("phase") != "Pending":
            self._orphaned.pop(meta.get("uid", ""), None)
            return                       # running where it should: nothing to do (most pods, most passes)
        path = path_of("v1", "pods", meta.get("namespace"), meta["name"])
        try:
            if node is None and not self._node_gone(pod, node_name):
                return
            key = f"pod/{meta.get('uid', '')}"
            if node is None or meta.get("deletionTimestamp"):
                if self._remember(key, pod):
                    self._writes.submit(self._tolerant(self.client.delete, path, gracePeriodSeconds=0, forget=key))
                return
            self._orphaned.pop(meta.get("uid", ""), None)
            if status.get("phase") == "Pending" and ready(node) and self._remember(key, pod):
                self._writes.submit(self._tolerant(self.client.patch, *self._running(pod, node), forget=key))
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    def _running(self, pod: Obj, node: Obj) -> tuple[str, Obj]:
        """The path and body of the status write that says `pod` runs on `node`."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        now = now_rfc3339()
        self._ip += 1
        return path_of("v1", "pods", meta.get("namespace"), meta["name"], "status"), {"status": {
            "phase": "Running", "startTime": now, "podIP": f"10.1.{self._ip // 250 % 250}.{self._ip % 250}",
            "hostIP": next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                            if a.get("type") == "InternalIP"), ""),
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                                   "restartCount": 0, "started": True, "state": {"running": {"startedAt": now}}}
                                  for c in spec.get("containers") or []],
        }}

    def _tolerant(self, fn: Callable[..., Any], *args: Any, forget: str, **kwargs: Any) -> Callable[[], None]:
        """`fn(*args, **kwargs)` for the write pool: the pod being gone or changed meanwhile is no error
        (the next pass sees it as it is now). A failed write forgets it was sent (`forget`: its _sent key)."""
        def write() -> None:
            try:
                fn(*args, **kwargs)
            except Exception as e:
                self._sent.pop(forget, None)
                if not isinstance(e, ApiException):
                    log.warning("kubelet write to %s: %s", args[0] if args else "?", e)
                elif e.status not in (404, 409):
                    log.warning("kubelet write to %s: %s", args[0] if args else "?", e.reason)
        return write
