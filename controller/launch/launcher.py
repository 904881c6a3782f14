"""The one launch path: every node karpy launches (provisioning, consolidation and interruption replacements)
goes through `Launcher.launch`, in the order of Karpenter v1's NodeClaim lifecycle:

1. write a karpenter.sh/v1 NodeClaim named for the planned node (requirements, options, pods, owner, finalizer:
   apis/launch_record.py says how it records what v1's schema has no field for);
2. `cloud.create()` with the claim's name as the idempotency key (a second call adopts, never launches again);
3. record the providerID, the Node's name and capacity on the claim (Launched);
4. create the Node (labels, taints, finalizer, owner reference), or adopt the one the kubelet registered (Registered);
5. bind the claim's pods (PodsBound);
6. once the Node is initialized, say so on the claim (Initialized, Ready).

What is in flight meanwhile (pods promised, nodes landing) is the cluster state's index (controller/inflight.py).

Each step is safe to repeat, and `reconcile` takes every claim one step further from wherever a crash left it,
so a restarted controller finishes a launch instead of making another. A claim whose Node is gone (terminated,
consolidated, its Provisioner deleted) is deleted, and its finalizer stays until the instance is gone.
Registration timeouts and instances without a claim are garbage collection's (controller/node/).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator

from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter, Histogram

from karpy.apis import labels as wk
from karpy.apis import launch_record as rec
from karpy.apis.launch_record import PodReference
from karpy.apis.pods import pod_requests
from karpy.apis.resources import Resources
from karpy.apis.timestamps import rfc3339
from karpy.apis.v1 import nodeclaim as api
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import (
    CloudProvider,
    Instance,
    InstanceNotFound,
    InstanceType,
    InsufficientCapacity,
    NodeRequest,
)
from karpy.controller.launch import notices
from karpy.controller.launch.claims import (
    Situation,
    Step,
    adoption_patch,
    claim_manifest,
    initialized,
    launched_labels,
    launched_status,
    next_step,
    node_manifest,
    node_matters,
    pods_of,
    request_of,
    that_fit,
)
from karpy.controller.launch.notices import Notice
from karpy.controller.metrics import (
    CONSOLIDATION,
    NODES_CREATED,
    PROVISIONED,
    PROVISIONING,
    UNDERUTILIZED,
    count_node_registered,
    count_nodeclaim_created,
    count_nodeclaim_disrupted,
    count_nodeclaim_terminated,
)
from karpy.controller.provisioning.scheduling.scheduler import PlannedNode
from karpy.controller.state import ClusterState
from karpy.kubeclient import events
from karpy.kubeclient.outage import ApiUnreachable, backoff_seconds
from karpy.kubeclient.raw import path_of

log = logging.getLogger("controller.provisioning")
EVENT_WORKERS = 2
LAUNCH_ERRORS = Counter("karpy_cloudprovider_errors_total", "Failed launches", ["provisioner", "error"])
LAUNCH_SECONDS = Histogram("karpy_nodes_launch_duration_seconds", "Time to launch one node")
FAULT_ENV = "KARPY_LAUNCH_FAULT"     # a kill point name: the process dies there (fault benchmarks)
KILL_POINTS = ("before-create", "after-create", "after-status", "after-node", "mid-bind")
BIND_WORKERS = 24      # binds in flight at once, for all launches together (kubeclient/raw.py POOL_SIZE has room)
MAX_PAUSE_SECONDS = 1.0   # the longest the launch and bind workers wait for a new batch's first plan
Obj = dict[str, Any]


class Pause:
    """Lets a new batch's first chunk be planned without the last batch's launch and bind workers: with dozens
    of them answering at once they would take the interpreter from the planning thread most of the time. While
    paused, a worker waits before its next request, for at most MAX_PAUSE_SECONDS from the pause, so a plan
    that takes long delays those launches and binds by that much at most."""

    def __init__(self) -> None:
        self._until = 0.0
        self._resumed = threading.Event()
        self._resumed.set()

    def pause(self) -> None:
        self._until = time.monotonic() + MAX_PAUSE_SECONDS
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    def wait(self) -> None:
        """Before a request: wait while paused (never past the pause's bound)."""
        if not self._resumed.is_set():
            self._resumed.wait(max(0.0, self._until - time.monotonic()))


def node_request(planned: PlannedNode) -> NodeRequest:
    """What the cloud provider launches for a planned node."""
    labels = {k: v for k, v in planned.labels.items()
              if k not in (wk.INSTANCE_TYPE, wk.ZONE, wk.CAPACITY_TYPE)}   # the launched offering decides these
    return NodeRequest(node_name=planned.name, provisioner=planned.provisioner, requirements=planned.requirements,
                       instance_type_options=planned.options, labels=labels,
                       taints=tuple(t.to_manifest() for t in planned.taints), annotations=dict(planned.annotations))


def claim_path(name: str, subresource: str | None = None) -> str:
    return path_of(api.GROUP_VERSION, api.PLURAL, name=name, subresource=subresource)


class Launcher:
    def __init__(self, state: ClusterState, cloud: CloudProvider, catalog: Callable[[], Catalog], *,
                 fault: Callable[[str], None] | None = None, bind_workers: int = BIND_WORKERS) -> None:
        """`fault` is called at each kill point (KILL_POINTS) so tests can stop a launch there; by default the
        process exits at the point KARPY_LAUNCH_FAULT names, as a kill -9 would."""
        self.state, self.cloud, self._catalog = state, cloud, catalog
        self._fault = fault or _exit_at(os.environ.get(FAULT_ENV))
        self._busy: set[str] = set()           # claims a thread of this process is moving on now
        self._lock = threading.Lock()
        # one set of bind workers for every launch: a node's pods bind side by side, and a burst of nodes
        # cannot open more connections than the client's pool holds
        self._binds = concurrent.futures.ThreadPoolExecutor(bind_workers, thread_name_prefix="bind")
        # what each pod is told (Nominated, Scheduled) goes out on the side: it informs people and decides nothing,
        # so a launch or a bind never waits for it
        self._events = concurrent.futures.ThreadPoolExecutor(EVENT_WORKERS, thread_name_prefix="launch-events")
        self.pause = Pause()                   # the provisioner pauses the workers while it plans a batch's first chunk

    # --- entry points --------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for the binds already sent, and take no more: after this, nothing of this launcher reaches the API."""
        self._binds.shutdown(wait=True, cancel_futures=True)
        self._events.shutdown(wait=True, cancel_futures=True)

    def launch(self, planned: PlannedNode, *, bind: bool = True, reason: str | None = None) -> str | None:
        """Launch a node for `planned` (and bind its pods unless `bind` is False: replacements, whose pods still
        run elsewhere). `reason` is why, in v1's words for `karpenter_nodeclaims_created_total` (`provisioned` when
        binding, `underutilized` for a replacement, unless given). Returns the Node's name, or None when nothing was
        launched (Events on the pods say why)."""
        request = node_request(planned)
        owner = self.state.pool_object(planned.provisioner)
        pods = [PodReference(p.namespace, p.name, p.uid or None) for p in planned.pods]
        manifest = claim_manifest(request, pods=pods, bind=bind, owner=owner)
        with self._claiming(request.node_name) as mine:
            if not mine:
                return None
            try:                                                 # 1. the intent, durably, before the cloud hears of it
                claim = self._record(manifest)
            except ApiException as e:
                log.error("Could not record launch of node %s, %s", request.node_name, e.reason)
                return None
            if claim is None:
                return None
            count_nodeclaim_created(claim, reason or (PROVISIONED if bind else UNDERUTILIZED))
            if bind and notices.from_nodepool(claim):            # v1 tells the pods their NodeClaim at once
                for ref in pods:
                    self._say(ref, notices.nominated_to_claim(claim["metadata"]["name"]))
            return self._advance(claim, request=request)

    def _record(self, manifest: Obj, *, tries: int = 3) -> Obj | None:
        """Create the claim. A connection lost with the request in flight (a server swamped by a burst resets
        some) is tried again, briefly: the claim's name is this launch's own, so a 409 after such a loss is this
        launch's claim, written, when it lists the same pods (another's otherwise: then nothing is launched)."""
        name = manifest["metadata"]["name"]
        for attempt in range(1, tries + 1):
            try:
                return self.state.client.create(path_of(api.GROUP_VERSION, api.PLURAL), manifest)
            except ApiUnreachable:
                if attempt == tries:
                    raise
                time.sleep(backoff_seconds(attempt, base=0.2, cap=2.0))
            except ApiException as e:
                if e.status != 409 or attempt == 1:
                    raise
                claim = self.state.client.get(claim_path(name))
                if rec.pods_of(claim) != rec.pods_of(manifest):
                    raise
                return claim
        return None

    def reconcile(self) -> float | None:
        """Take every claim that no thread here is working on one step further, to done or a wait."""
        again: float | None = None
        for listed in self.claims():
            node = self._node_of(listed)
            if next_step(listed, Situation(node_exists=node is not None, node_initialized=initialized(node))) is Step.DONE:
                continue              # finished as listed, and steps only move forward: nothing to read again
            with self._claiming(listed["metadata"]["name"]) as mine:
                if not mine:
                    continue
                try:
                    claim = self.state.client.get(claim_path(listed["metadata"]["name"]))   # as it is now, not as listed
                    self._advance(claim)
                except ApiException as e:
                    if e.status != 404:                                   # gone meanwhile: nothing to finish
                        log.error("Finishing the launch of %s, %s", listed["metadata"]["name"], e.reason)
                        again = 5.0
                except (OSError, RuntimeError) as e:                      # one claim's trouble does not stop the others
                    log.error("Finishing the launch of %s, %s", listed["metadata"]["name"], e)
                    again = 5.0
            if listed["metadata"].get("deletionTimestamp"):
                again = min(again or 2.0, 2.0)
        return again

    def claims(self) -> list[Obj]:
        """Every NodeClaim, read from the API server (not a cache: a stale read could repeat a step)."""
        return self.state.in_flight.claims()

    # --- the steps -----------------------------------------------------------------------------
    def _advance(self, claim: Obj, *, request: NodeRequest | None = None) -> str | None:
        """Run the claim's steps in order until it is done or waits; returns its Node's name (None if none)."""
        instance: Instance | None = None
        written: Obj | None = None             # the Node step 4 wrote: read back from the server, not asked for again
        for _ in range(len(Step) + 1):
            self.pause.wait()
            node_name = rec.node_name(claim)
            node = self._node_of(claim, written)
            step = next_step(claim, Situation(node_exists=node is not None, node_initialized=initialized(node)))
            if step is Step.DONE:
                return node_name
            if step is Step.FINALIZE:
                self._finalize(claim)
                return None
            if step is Step.DELETE:
                log.info("Node %s of %s is gone; deleting the claim", node_name, claim["metadata"]["name"])
                self.delete_claim(claim["metadata"]["name"])
                return None
            if step is Step.CREATE:
                self._fault("before-create")
                instance = self._create(claim, request or self._request(claim))
                if instance is None:
                    return None
                self._fault("after-create")
                claim = self._record_launch(claim, instance)                     # 3. record what was launched
                self._fault("after-status")
            elif step is Step.NODE:
                self.state.in_flight.land(claim)
                instance = instance or self._existing(claim)
                if instance is None:                     # gone before it registered: launch it again, by the same name
                    instance = self._create(claim, request or self._request(claim))
                    if instance is None:
                        return None
                    claim = self._record_launch(claim, instance)
                written = self._write_node(claim, instance)                     # 4. the Node
                if not notices.from_nodepool(claim):                            # v1 told them at step 1
                    self._nominate(claim, instance)
                count_node_registered(claim)
                self._fault("after-node")
                claim = self._set_conditions(claim, **{rec.REGISTERED: True})
            elif step is Step.BIND:
                self.state.in_flight.land(claim)
                self._bind(claim, node)  # type: ignore[arg-type]  # 5. bind (the step's situation: the Node exists)
                claim = self._set_conditions(claim, **{rec.PODS_BOUND: True})
            elif step is Step.INITIALIZE:
                claim = self._set_conditions(claim, **{rec.INITIALIZED: True, rec.READY: True})
        return rec.node_name(claim)

    def _request(self, claim: Obj) -> NodeRequest:
        provisioner = self.state.provisioner(rec.owner_name(claim))
        kubelet = provisioner.spec.kubelet_configuration if provisioner is not None else None
        return request_of(claim, self._catalog().instance_types(kubelet))

    def _create(self, claim: Obj, request: NodeRequest) -> Instance | None:
        """2. create() by the claim's name; on failure the claim goes (its pods are planned again) and the pods hear why."""
        name = claim["metadata"]["name"]
        started = time.perf_counter()
        try:
            if not request.instance_type_options:
                raise InsufficientCapacity("none of the claim's instance types is in the catalog now")
            instance = self.cloud.create(request)
        except InsufficientCapacity as e:
            LAUNCH_ERRORS.labels(request.provisioner, "InsufficientCapacity").inc()
            log.error("Could not launch node, %s; %d pod(s) stay pending", e, len(pods_of(claim)))
            self._tell(claim, "LaunchFailed", f"Could not launch a node for this pod: {e}")
            if notices.from_nodepool(claim):
                self._tell_claim(claim, notices.insufficient_capacity(name, str(e)))
            self.delete_claim(name)
            count_nodeclaim_disrupted(claim, "insufficient_capacity")
            return None
        except (RuntimeError, ValueError, ApiException, OSError) as e:   # ValueError: a template that cannot work
            LAUNCH_ERRORS.labels(request.provisioner, type(e).__name__).inc()
            log.error("Could not launch node %s, %s", name, e)
            self._tell(claim, "LaunchFailed", f"Could not launch a node for this pod: {e}")
            self.delete_claim(name)
            return None
        if instance.adopted:                    # launched by an earlier try: its launch was logged and counted then
            log.info("Found instance %s launched earlier for %s; adopting it", instance.provider_id, name)
            return instance
        LAUNCH_SECONDS.observe(time.perf_counter() - started)
        # a claim that binds no pods is a replacement consolidation launched ahead of draining
        NODES_CREATED.inc(PROVISIONING if rec.binds(claim) else CONSOLIDATION,
                          request.provisioner)
        log.info("Launched instance: %s, hostname: %s, type: %s, zone: %s, capacityType: %s", instance.provider_id,
                 instance.node_name, instance.instance_type, instance.zone, instance.capacity_type)
        for warning in instance.warnings:
            self._tell(claim, "LaunchRetried", f"{warning}; launched {instance.instance_type} as node {instance.node_name}")
        return instance

    def _existing(self, claim: Obj) -> Instance | None:
        """The instance a claim recorded (after a restart), or None when the provider no longer has it."""
        try:
            return self.cloud.get(claim["status"]["providerID"])
        except InstanceNotFound:
            log.info("Instance %s of %s is gone before its node was created", claim["status"]["providerID"],
                     claim["metadata"]["name"])
            return None

    def _write_node(self, claim: Obj, instance: Instance) -> Obj:
        """Create the claim's Node (or adopt the one registered first); returns the Node as the server holds it."""
        body = node_manifest(claim, instance, self._instance_type(claim, instance))
        try:
            return self.state.client.create(path_of("v1", "nodes"), body)
        except ApiException as e:
            if e.status != 409:
                raise
        # the kubelet (or an earlier try) registered it first: karpy's labels, finalizer and owner still belong on it
        path = path_of("v1", "nodes", name=body["metadata"]["name"])
        registered = self.state.client.get(path)
        if notices.from_nodepool(claim) and not any(t.get("key") == wk.TAINT_UNREGISTERED
                                                     for t in (registered.get("spec") or {}).get("taints") or []):
            self._tell_claim(claim, notices.unregistered_taint_missing())
        patch = adoption_patch(registered, body)
        return self.state.client.patch(path, patch) if patch is not None else registered

    def _bind(self, claim: Obj, node: Obj) -> None:
        """Bind the claim's pods to `node` side by side on the shared bind workers; returns when every bind answered."""
        node_name = node["metadata"]["name"]
        pending = []
        for ref in pods_of(claim):
            pod = self.state.pods.get(ref.namespace, ref.name)
            if pod is not None and ((pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp")):
                continue                                 # placed elsewhere meanwhile, or leaving
            pending.append(ref)
        pending = self._fitting(node, pending)
        futures = [self._binds.submit(self._bind_one, ref, node_name) for ref in pending]
        try:
            bound = sum(f.result() for f in futures)
        except BaseException:                            # a kill point: the binds not yet sent are not sent
            for f in futures:
                f.cancel()
            raise
        log.info("Bound %d pod(s) to node %s", bound, node_name)

    def _fitting(self, node: Obj, pending: list[PodReference]) -> list[PodReference]:
        """The pods of `pending` that still fit on the node, judged against the pods the API server has bound there
        now (not the cache: after a restart kube-scheduler may have placed pods on the node moments ago). The others
        stay pending for kube-scheduler or the next batch."""
        node_name = node["metadata"]["name"]
        allocatable = (node.get("status") or {}).get("allocatable")
        if not allocatable or not pending:       # nothing known to judge by: bind as planned
            return pending
        bound = self.state.client.get(path_of("v1", "pods"), fieldSelector=f"spec.nodeName={node_name}").get("items") or []
        room = Resources.parse(allocatable)
        for pod in bound:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                room = room - pod_requests(pod.get("spec") or {})
        placed = {(p["metadata"].get("namespace"), p["metadata"]["name"]) for p in bound}
        pending = [ref for ref in pending if (ref.namespace, ref.name) not in placed]   # bound there meanwhile: nothing to do
        asked = []
        for ref in pending:
            pod = self.state.pods.get(ref.namespace, ref.name) or self._pod(ref.namespace, ref.name)
            if pod is not None:
                asked.append((ref, pod_requests(pod.get("spec") or {})))
        fitting = that_fit(asked, room)
        if len(fitting) < len(pending):
            log.info("Left %d pod(s) to the scheduler: node %s has no room for them now", len(pending) - len(fitting), node_name)
        return fitting

    def _pod(self, namespace: str, name: str) -> Obj | None:
        """A pod the cache has not shown yet, from the server; None when it is gone."""
        try:
            return self.state.client.get(path_of("v1", "pods", namespace, name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _bind_one(self, ref: PodReference, node_name: str) -> bool:
        self.pause.wait()
        try:
            self.state.client.bind(ref.namespace, ref.name, node_name, uid=ref.uid)
        except ApiException as e:
            if e.status not in (404, 409):               # gone, or kube-scheduler bound it first: both fine
                log.error("Binding pod %s to node %s, %s", ref.key, node_name, e.reason)
            return False
        self.state.in_flight.bound(ref)
        self._say(ref, Notice("Scheduled", f"Successfully assigned {ref.key} to {node_name}"))
        self._fault("mid-bind")
        return True

    def _nominate(self, claim: Obj, instance: Instance) -> None:
        """Karpenter's Nominated Event on each pod the node was launched for: which node, and what was launched."""
        for ref in pods_of(claim):
            self._say(ref, notices.nominated_to_node(instance))

    def _say(self, ref: PodReference, notice: Notice) -> None:
        """A Normal Event on a pod, sent by the event workers (aggregated with its repeats; one that cannot be
        written is logged there and changes nothing: kubeclient/events.py)."""
        self._send({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ref.namespace, "name": ref.name,
                                                                     "uid": ref.uid}}, notice)

    def _send(self, obj: Obj, notice: Notice) -> None:
        """Hand an Event about `obj` to the event workers: it informs people and decides nothing, so no step waits."""
        try:
            self._events.submit(events.record, self.state.client, obj, reason=notice.reason, message=notice.message,
                                component="karpy", event_type=notice.type)
        except RuntimeError:                             # closed: the launcher is stopping
            pass

    def _finalize(self, claim: Obj) -> None:
        """A deleted claim: its Node goes through termination, then the instance must be gone, then the finalizer."""
        name, status = claim["metadata"]["name"], claim.get("status") or {}
        node_name, provider_id = status.get("nodeName"), status.get("providerID")
        node = self._node(node_name) if node_name else None
        if node is not None:
            if not node["metadata"].get("deletionTimestamp"):
                self.state.delete_node(node_name)  # type: ignore[arg-type]  # found by this name; its finalizer drains it, terminates the instance
            return
        if provider_id:
            try:
                self.cloud.delete(provider_id)
                return                                   # look again once it is gone
            except InstanceNotFound:
                pass
        finalizers = [f for f in claim["metadata"].get("finalizers") or [] if f != wk.TERMINATION_FINALIZER]
        try:
            self.state.client.patch(claim_path(name), {"metadata": {"finalizers": finalizers}})
        except ApiException as e:
            if e.status != 404:
                raise
            return
        if len(finalizers) < len(claim["metadata"].get("finalizers") or []):
            count_nodeclaim_terminated(claim)

    # --- reads and writes ----------------------------------------------------------------------
    def _node_of(self, claim: Obj, written: Obj | None = None) -> Obj | None:
        """The claim's Node when its next step turns on it (claims.node_matters), else None, unread; `written` is
        the Node this launch just wrote, used as it came back instead of being read again."""
        name = rec.node_name(claim)
        if not name or not node_matters(claim):
            return None
        if written is not None and written["metadata"]["name"] == name:
            return written
        return self._node(name)

    def _node(self, name: str) -> Obj | None:
        """The Node, from the cache, or from the server when the cache has none (a late watch must not look like a
        deleted node)."""
        node = self.state.nodes.get("", name)
        if node is not None:
            return node
        try:
            return self.state.client.get(path_of("v1", "nodes", name=name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _patch_status(self, claim: Obj, status: Obj) -> Obj:
        return self.state.client.patch(claim_path(claim["metadata"]["name"], "status"), {"status": status})

    def _set_conditions(self, claim: Obj, **statuses: bool) -> Obj:
        return self._patch_status(claim, {"conditions": rec.with_conditions(claim, _now(), **statuses)})

    def _instance_type(self, claim: Obj, instance: Instance) -> InstanceType | None:
        name = (claim["metadata"].get("labels") or {}).get(wk.INSTANCE_TYPE) or instance.instance_type
        return next((t for t in self._catalog().instance_types() if t.name == name), None)

    def _record_launch(self, claim: Obj, instance: Instance) -> Obj:
        """3. The instance on the claim: its labels (type, zone, capacity type), then providerID, node name, capacity
        and Launched (the status the next step reads; a crash between the two adopts the instance again)."""
        path = claim_path(claim["metadata"]["name"])
        claim = self.state.client.patch(path, {"metadata": {"labels": launched_labels(instance)}})
        return self._patch_status(claim, launched_status(claim, instance, self._instance_type(claim, instance), now=_now()))

    def delete_claim(self, name: str) -> None:
        """Delete claim `name` and take its finalizer one step (its Node goes first, then its instance)."""
        try:
            self.state.client.delete(claim_path(name))
            claim = self.state.client.get(claim_path(name))
        except ApiException as e:
            if e.status != 404:
                raise
            return
        self._finalize(claim)

    def _tell_claim(self, claim: Obj, notice: Notice) -> None:
        """An Event on the NodeClaim itself (v1's lifecycle Events), sent on the side like the pods' Events."""
        self._send({"apiVersion": api.GROUP_VERSION, "kind": api.KIND, **claim}, notice)

    def _tell(self, claim: Obj, reason: str, message: str) -> None:
        """A Warning Event on each pod the node was for: `kubectl describe pod` shows why it waits."""
        for ref in pods_of(claim):
            pod = self.state.pods.get(ref.namespace, ref.name)
            if pod is not None:
                events.record(self.state.client, {"apiVersion": "v1", "kind": "Pod", **pod}, reason=reason,
                              message=message, component="karpy", event_type="Warning")

    @contextlib.contextmanager
    def _claiming(self, name: str) -> Iterator[bool]:
        """True when no other thread of this process works on claim `name` now (then this one does)."""
        with self._lock:
            mine = name not in self._busy
            self._busy.add(name)
        try:
            yield mine
        finally:
            if mine:
                with self._lock:
                    self._busy.discard(name)



def _now() -> str:
    return rfc3339(dt.datetime.now(dt.timezone.utc))


def _exit_at(point: str | None) -> Callable[[str], None]:
    def fault(at: str) -> None:
        if at == point:
            logging.getLogger("controller").warning("Exiting at launch fault point %s", at)
            logging.shutdown()
            os._exit(137)
    return fault
