"""The local cluster's object store: every object, one global resourceVersion, and watch fan-out.

Objects are plain dicts, copied in and out so no caller shares state with the
store; a stored object is never changed in place (a write stores a new one),
so watch events and read-only lists share it instead of copying, and each
event is encoded to JSON once however many watchers send it. Each write bumps the global resourceVersion and appends an event to
its resource's history; watchers read the history from the version they
asked for, and get Gone when it has been trimmed. Deletion honours
finalizers: an object with finalizers only gets a deletionTimestamp, and
goes away when the last finalizer is removed.
"""

from __future__ import annotations

import bisect
import builtins
import collections
import copy
import dataclasses
import functools
import json
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import msgspec

from karpy.kubeclient.raw import now_rfc3339

HISTORY_PER_RESOURCE = 20_000       # events kept for watches that resume from an old resourceVersion
WATCH_BATCH_SECONDS = 0.005       # a watch that sent events waits this long before it reads the next ones
# fields a list can select by without reading every object: kube-apiserver's watch cache indexes pods by node,
# so a kubelet or an autoscaler asking for one node's pods does not cost a pass over every pod
INDEXED_FIELDS = {"pods": "spec.nodeName"}

Obj = dict[str, Any]


class StoreError(Exception):
    """An error with an HTTP status and a Kubernetes reason."""

    status = 500
    reason = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class NotFound(StoreError):
    status, reason = 404, "NotFound"


class AlreadyExists(StoreError):
    status, reason = 409, "AlreadyExists"


class Conflict(StoreError):
    status, reason = 409, "Conflict"


class Invalid(StoreError):
    status, reason = 422, "Invalid"


class BadRequest(StoreError):
    status, reason = 400, "BadRequest"


class Gone(StoreError):
    status, reason = 410, "Expired"


class TooManyRequests(StoreError):
    status, reason = 429, "TooManyRequests"


class MethodNotAllowed(StoreError):
    status, reason = 405, "MethodNotAllowed"


def clone(obj: Obj) -> Obj:
    """A deep copy of a JSON object (a JSON round trip is several times faster than copy.deepcopy)."""
    try:
        return msgspec.json.decode(msgspec.json.encode(obj))
    except (TypeError, ValueError, OverflowError):
        return copy.deepcopy(obj)


def encode(obj: Any) -> bytes:
    """Compact JSON, as the API server sends it."""
    try:
        return msgspec.json.encode(obj)
    except (TypeError, ValueError, OverflowError):
        return json.dumps(obj, separators=(",", ":"), default=str).encode()


@dataclasses.dataclass(frozen=True)
class Event:
    resource_version: int
    type: str                          # ADDED | MODIFIED | DELETED
    object: Obj                        # shared with the store: read only

    @functools.cached_property
    def encoded(self) -> bytes:
        """The object as JSON, encoded once for every watcher."""
        return encode(self.object)


Key = tuple[str, str]                  # (namespace or "", name)


class Store:
    def __init__(self, *, history: int = HISTORY_PER_RESOURCE) -> None:
        self._keep = history
        lock = threading.RLock()
        self._lock = threading.Condition(lock)
        # one condition per resource over the same lock: a write wakes only the watchers of its resource
        self._changed: dict[str, threading.Condition] = collections.defaultdict(lambda: threading.Condition(lock))
        self._objects: dict[str, dict[Key, Obj]] = collections.defaultdict(dict)
        self._history: dict[str, list[Event]] = collections.defaultdict(list)   # oldest first
        self._history_rvs: dict[str, list[int]] = collections.defaultdict(list)
        self._oldest: dict[str, int] = {}         # lowest resourceVersion a watch may resume from, per resource
        self._rv = 1
        self._watch_epoch = 0                     # bumped to end every open watch (a dropped connection)
        self.listeners: list[Callable[[str, Event], None]] = []   # called under the lock, after each write
        # INDEXED_FIELDS: resource -> field value -> keys of the objects holding it, and key -> its value
        self._index: dict[str, dict[str, set[Key]]] = collections.defaultdict(lambda: collections.defaultdict(set))
        self._indexed: dict[str, dict[Key, str]] = collections.defaultdict(dict)

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    # --- reads --------------------------------------------------------------------------
    def get(self, resource: str, namespace: str, name: str) -> Obj:
        with self._lock:
            obj = self._objects[resource].get((namespace, name))
            if obj is None:
                raise NotFound(f'{resource} "{name}" not found', details={"name": name})
            return clone(obj)

    def peek(self, resource: str, namespace: str, name: str) -> Obj | None:
        """The stored object itself (no copy), for read-only use under the caller's care."""
        with self._lock:
            return self._objects[resource].get((namespace, name))

    def list(self, resource: str, namespace: str | None = None,
             predicate: Callable[[Obj], bool] | None = None, *, shared: bool = False,
             field: tuple[str, str] | None = None) -> tuple[list[Obj], int]:
        """The matching objects sorted by namespace and name, and the version they were read at: copies, or
        with `shared` the stored objects themselves, for callers that only read them (e.g. to send them).
        `field` (path, value) is an equality the predicate already requires: when the resource indexes that
        path, only the objects holding the value are read."""
        with self._lock:
            objects = self._objects[resource]
            if field is not None and INDEXED_FIELDS.get(resource) == field[0]:
                candidates = [(key, objects[key]) for key in self._index[resource].get(field[1], ())]
            else:
                candidates = list(objects.items())
            rv = self._rv
        # stored objects are never changed in place: they are filtered and sorted outside the lock, so a list
        # of thousands of objects does not hold up every write meanwhile
        items = [o for (ns, _), o in sorted(candidates, key=lambda kv: kv[0])
                 if (namespace is None or ns == namespace) and (predicate is None or predicate(o))]
        return (items if shared else [clone(o) for o in items]), rv

    def count(self, resource: str) -> int:
        with self._lock:
            return len(self._objects[resource])

    # --- writes -------------------------------------------------------------------------
    def _bump(self, resource: str, type_: str, obj: Obj) -> None:
        if resource in INDEXED_FIELDS:
            self._reindex(resource, type_, obj)
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        event = Event(self._rv, type_, obj)
        history, rvs = self._history[resource], self._history_rvs[resource]
        history.append(event)
        rvs.append(self._rv)
        if len(history) > 2 * self._keep:                # trim in bulk, so appends stay cheap
            self._oldest[resource] = history[-self._keep].resource_version
            del history[:-self._keep]
            del rvs[:-self._keep]
        for listener in self.listeners:
            listener(resource, event)
        self._changed[resource].notify_all()

    def _reindex(self, resource: str, type_: str, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        index, indexed = self._index[resource], self._indexed[resource]
        before = indexed.pop(key, None)
        if before is not None:
            keys = index[before]
            keys.discard(key)
            if not keys:
                del index[before]
        if type_ != "DELETED":
            value = field_value(obj, INDEXED_FIELDS[resource])
            index[value].add(key)
            indexed[key] = value

    def create(self, resource: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                while True:
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                    if (meta.get("namespace", ""), meta["name"]) not in self._objects[resource]:
                        break
            if not meta.get("name"):
                raise Invalid("metadata.name: Required value: name or generateName is required")
            key = (meta.get("namespace", ""), meta["name"])
            if key in self._objects[resource]:
                raise AlreadyExists(f'{resource} "{meta["name"]}" already exists', details={"name": meta["name"]})
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.setdefault("generation", 1)
            meta.pop("deletionTimestamp", None)
            stored = clone(obj)
            self._objects[resource][key] = stored
            self._bump(resource, "ADDED", stored)
            return clone(stored)

    def update(self, resource: str, obj: Obj, *, check_version: bool = True,
               mutate: Callable[[Obj, Obj], None] | None = None) -> Obj:
        """Replace an object. A resourceVersion in `obj` that is not the stored one is a Conflict.
        `mutate(old, new)` may adjust the new object under the lock (e.g. keep status)."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        with self._lock:
            old = self._objects[resource].get(key)
            if old is None:
                raise NotFound(f'{resource} "{key[1]}" not found', details={"name": key[1]})
            sent = meta.get("resourceVersion")
            if check_version and sent and sent != old["metadata"]["resourceVersion"]:
                raise Conflict(f'Operation cannot be fulfilled on {resource} "{key[1]}": the object has been modified; '
                               "please apply your changes to the latest version and try again", details={"name": key[1]})
            new = clone(obj)
            nmeta = new.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
                if field in old["metadata"]:
                    nmeta[field] = old["metadata"][field]
                else:
                    nmeta.pop(field, None)
            if mutate is not None:
                mutate(old, new)
            if old["metadata"].get("deletionTimestamp"):
                added = set(nmeta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
                if added:
                    raise Invalid(f"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {sorted(added)}")
            if _spec_changed(old, new):
                nmeta["generation"] = int(old["metadata"].get("generation", 1)) + 1
            else:
                nmeta["generation"] = old["metadata"].get("generation", 1)
            if old == {**new, "metadata": {**nmeta, "resourceVersion": old["metadata"]["resourceVersion"]}}:
                return clone(old)          # no change: no new version, no event
            if nmeta.get("deletionTimestamp") and not nmeta.get("finalizers"):
                del self._objects[resource][key]
                self._bump(resource, "DELETED", new)
                return clone(new)
            self._objects[resource][key] = new
            self._bump(resource, "MODIFIED", new)
            return clone(new)

    def delete(self, resource: str, namespace: str, name: str, *, precondition_uid: str | None = None,
               precondition_rv: str | None = None, grace_period: int = 0) -> tuple[Obj, bool]:
        """Delete, or mark for deletion while finalizers remain or a grace period runs (the kubelet
        then finishes it). Returns the object and whether it is gone."""
        key = (namespace, name)
        with self._lock:
            old = self._objects[resource].get(key)
            if old is None:
                raise NotFound(f'{resource} "{name}" not found', details={"name": name})
            if precondition_uid and old["metadata"].get("uid") != precondition_uid:
                raise Conflict(f'Precondition failed: UID in precondition: {precondition_uid}, UID in object meta: {old["metadata"].get("uid")}')
            if precondition_rv and old["metadata"].get("resourceVersion") != precondition_rv:
                raise Conflict(f'Precondition failed: ResourceVersion in precondition: {precondition_rv}, '
                               f'ResourceVersion in object meta: {old["metadata"].get("resourceVersion")}')
            if old["metadata"].get("finalizers") or grace_period > 0:
                if not old["metadata"].get("deletionTimestamp"):
                    old = clone(old)                 # the stored one is shared with past events
                    old["metadata"]["deletionTimestamp"] = now_rfc3339()
                    old["metadata"]["deletionGracePeriodSeconds"] = grace_period
                    self._objects[resource][key] = old
                    self._bump(resource, "MODIFIED", old)
                return clone(old), False
            del self._objects[resource][key]
            deleted = clone(old)                     # a DELETED event carries a new resourceVersion
            self._bump(resource, "DELETED", deleted)
            return clone(deleted), True

    # --- watching -----------------------------------------------------------------------
    def watch(self, resource: str, since: int | None, *, stop: threading.Event,
              timeout: float) -> Iterator[builtins.list[Event]]:
        """Events of `resource` after version `since` (None: from now), in the batches they arrived in,
        until `timeout` seconds pass or `stop` is set. Yields an empty batch about once a second when idle
        (a chance to send a bookmark). Raises Gone when `since` is older than the history kept."""
        deadline = time.monotonic() + timeout
        with self._lock:
            cursor = self._rv if since is None else since
            epoch = self._watch_epoch
        while not stop.is_set():
            with self._lock:
                if self._watch_epoch != epoch:
                    return
                if cursor < self._oldest.get(resource, 0):
                    raise Gone(f"too old resource version: {cursor} ({self._oldest[resource]})")
                pending = self._pending(resource, cursor)
                if not pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._changed[resource].wait(min(left, 1.0))
                    pending = self._pending(resource, cursor)
            if pending:
                cursor = pending[-1].resource_version
            yield pending
            if not pending and time.monotonic() >= deadline:
                return
            if pending:
                # a burst of writes is read in batches, not one wake-up, lock and socket write per write per watcher
                stop.wait(WATCH_BATCH_SECONDS)

    def drop_watches(self) -> None:
        """End every open watch, as a restarted API server or a broken connection would."""
        with self._lock:
            self._watch_epoch += 1
            for condition in self._changed.values():
                condition.notify_all()

    def _pending(self, resource: str, cursor: int) -> builtins.list[Event]:
        rvs = self._history_rvs[resource]
        if not rvs or rvs[-1] <= cursor:
            return []
        return self._history[resource][bisect.bisect_right(rvs, cursor):]


def field_value(obj: Obj, path: str) -> str:
    """A dotted field (`spec.nodeName`) as a field selector reads it ("" when absent)."""
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def _spec_changed(old: Obj, new: Obj) -> bool:
    ignored = {"metadata", "status", "apiVersion", "kind"}
    return {k: v for k, v in old.items() if k not in ignored} != {k: v for k, v in new.items() if k not in ignored}
