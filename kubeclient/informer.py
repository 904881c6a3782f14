"""`Informer`: a list+watch cache of one resource, with indexes kept as it changes.

It tells its handlers what changed, relisting after a 410 or a dropped connection (after a pause that grows
with failures in a row, up to a cap). It is the one informer: the controller, the scheduler extender and the
local cluster all read the API through it.

Objects are replaced, never edited in place: every change (a watch event, a relist) puts a new dict in the
cache, and the old one stays as it was. Readers rely on that: the extender caches facts per node object
keyed by identity, and a reader may hold an object without the lock. Callers must not edit what they get.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

from kubernetes.client.exceptions import ApiException

from karpy.kubeclient.outage import ApiUnreachable, backoff_seconds
from karpy.kubeclient.raw import RawClient, path_of

log = logging.getLogger("kubeclient")
Obj = dict[str, Any]


Handler = Callable[[str, Obj], None]      # (ADDED | MODIFIED | DELETED, object)
IndexKey = Callable[[Obj], "str | None"]  # the group an object belongs to in an index (None: in none)


def _trimmed(obj: Obj) -> Obj:
    """`obj` without metadata.managedFields: the field owners' record is often the bulk of an object and no
    decision reads it, so a cache of tens of thousands of pods does not keep it."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def start_all(informers: Sequence[Informer], timeout: float) -> bool:
    """Start `informers` and wait, `timeout` seconds in all, for their first lists; returns whether all listed."""
    for informer in informers:
        informer.start()
    deadline = time.monotonic() + timeout
    for informer in informers:
        informer.synced.wait(max(deadline - time.monotonic(), 0))
    return all(informer.synced.is_set() for informer in informers)


class Informer:
    """A list+watch cache of one resource across all namespaces.

    Handlers hear every change after the cache (and its indexes) hold it, so a handler that reads the cache
    reads the change. An index groups the objects by a key (the pods by their node, say) so a read of one group
    costs the size of that group, not of the cache."""

    def __init__(self, client: RawClient, api_version: str, plural: str, *, field_selector: str | None = None) -> None:
        self.client, self.api_version, self.plural = client, api_version, plural
        self.field_selector = field_selector
        self.handlers: list[Handler] = []
        self.cache: dict[tuple[str, str], Obj] = {}
        self._indexes: dict[str, tuple[IndexKey, dict[str, dict[tuple[str, str], Obj]]]] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{plural}", daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def items(self) -> list[Obj]:
        with self.lock:
            return list(self.cache.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        with self.lock:
            return self.cache.get((namespace, name))

    def add_index(self, name: str, key_of: IndexKey) -> None:
        """Keep the objects grouped by `key_of(object)` from now on (objects it gives None for are in no group)."""
        with self.lock:
            self._indexes[name] = (key_of, {})
            for key, obj in self.cache.items():
                self._index(key, None, obj)

    def by_index(self, name: str, value: str) -> list[Obj]:
        """The objects index `name` groups under `value`."""
        with self.lock:
            return list(self._indexes[name][1].get(value, {}).values())

    def index_keys(self, name: str) -> list[str]:
        """The keys of index `name` that group some object."""
        with self.lock:
            return list(self._indexes[name][1])

    def indexed(self, name: str) -> list[Obj]:
        """Every object in some group of index `name`."""
        with self.lock:
            return [obj for group in self._indexes[name][1].values() for obj in group.values()]

    def _index(self, key: tuple[str, str], old: Obj | None, new: Obj | None) -> None:
        """Move `key` from `old`'s group to `new`'s in every index (the lock is held)."""
        for key_of, groups in self._indexes.values():
            before = key_of(old) if old is not None else None
            after = key_of(new) if new is not None else None
            if before is not None and (before != after or new is None):
                group = groups.get(before)
                if group is not None:
                    group.pop(key, None)
                    if not group:
                        del groups[before]
            if after is not None and new is not None:
                groups.setdefault(after, {})[key] = new

    def _notify(self, kind: str, obj: Obj) -> None:
        for handler in self.handlers:
            try:
                handler(kind, obj)
            except Exception:  # a handler's bug must not stop the cache
                log.exception("%s handler failed", self.plural)

    def _run(self) -> None:
        path = path_of(self.api_version, self.plural)
        failures = 0                            # in a row: the backoff grows with them, up to its cap
        while not self._stop.is_set():
            if failures and self._stop.wait(backoff_seconds(failures, cap=10.0)):
                return
            try:
                listed = self.client.get(path, **({"fieldSelector": self.field_selector} if self.field_selector else {}))
                failures = 0
                fresh = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): _trimmed(o) for o in listed.get("items") or []}
                with self.lock:
                    gone = [o for k, o in self.cache.items() if k not in fresh]
                    self.cache = fresh
                    for _, groups in self._indexes.values():
                        groups.clear()
                    for key, obj in fresh.items():
                        self._index(key, None, obj)
                for obj in gone:
                    self._notify("DELETED", obj)
                for obj in fresh.values():
                    self._notify("MODIFIED", obj)
                self.synced.set()
                rv = listed["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    for event in self.client.watch(path, resource_version=rv, field_selector=self.field_selector):
                        obj = _trimmed(event["object"])
                        rv = obj["metadata"].get("resourceVersion", rv)
                        if event["type"] == "BOOKMARK":
                            if self._stop.is_set():
                                return
                            continue
                        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                        with self.lock:
                            if event["type"] == "DELETED":
                                old, new = self.cache.pop(key, None), None
                            else:
                                old, new = self.cache.get(key), obj
                                self.cache[key] = obj
                            self._index(key, old, new)
                        self._notify(event["type"], obj)
            except ApiException as e:
                if e.status != 410:
                    log.warning("watching %s: %s; relisting", self.plural, e.reason)
                    failures += 1
            except ApiUnreachable:              # OUTAGES has said so, once for every informer
                failures += 1
            except Exception as e:  # connection dropped, server stopping: relist after a pause
                if self._stop.is_set():
                    return
                log.debug("watching %s: %s; relisting", self.plural, e)
                failures += 1
