"""The official `kubernetes` client, used raw: JSON dicts in and out, and watches as line streams.

The controller and the local cluster's scheduler, kubelets and controllers
talk to an API server through this over HTTP, like any client. Typed models are skipped on purpose:
a 10,000-pod list decodes in milliseconds as JSON and in seconds as models.
`Informer` keeps a list+watch cache of one resource, with indexes kept as it
changes, and tells its handlers what changed, relisting after a 410 or a
dropped connection (after a pause that grows with failures in a row, up to a
cap). It is the one informer: the controller, the scheduler extender and the
local cluster all read the API through it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterator, Sequence

import kubernetes
import msgspec
import yaml
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from karpy.apis.timestamps import rfc3339
from karpy.kubeclient.outage import OUTAGES, ApiUnreachable, OutageReporter, backoff_seconds, reason_of, request_retries

log = logging.getLogger("kubeclient")
Obj = dict[str, Any]


class RawClient:
    def __init__(self, api_client: ApiClient, *, outages: OutageReporter | None = OUTAGES) -> None:
        """`outages` logs when the server goes away and comes back (None: the caller says it itself)."""
        self.api_client = api_client
        self.outages = outages

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float | None = 30) -> Any:
        """Send one request; returns the decoded JSON. Raises ApiException on an error status."""
        response = self._send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        data = response.read()
        if response.status >= 400:
            raise ApiException(http_resp=response)
        return decode(data) if data else None

    def _send(self, method: str, path: str, *, query: dict[str, Any] | None, body: Any, content_type: str,
              timeout: float | tuple[float, float] | None) -> Any:
        _, url, headers, payload, _ = self.api_client.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", "Content-Type": content_type}, body=body)
        try:
            response = self.api_client.call_api(method, url, header_params=headers, body=payload, _request_timeout=timeout)
        except (Urllib3Error, OSError) as e:        # no answer at all, after the bounded retries
            reason = reason_of(e)
            if self.outages is not None:
                self.outages.unreachable(self.server, reason)
            raise ApiUnreachable(self.server, reason) from None
        if self.outages is not None:
            self.outages.reachable(self.server)
        return response

    @property
    def server(self) -> str:
        """The API server's URL, as errors and outage lines name it."""
        return str(self.api_client.configuration.host)

    # conveniences, by path -------------------------------------------------------------
    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: Any, content_type: str = "application/merge-patch+json") -> Obj:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def bind(self, namespace: str, name: str, node: str, *, uid: str | None = None) -> Obj:
        """Bind a pod to a node through `pods/binding`; `uid` makes it fail if the pod was replaced."""
        meta = {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})}
        return self.create(path_of("v1", "pods", namespace, name, "binding"),
                           {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def delete(self, path: str, **options: Any) -> Any:
        return self.request("DELETE", path, body=options or None)

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int = 300,
              field_selector: str | None = None) -> Iterator[Obj]:
        """Watch events from `resource_version` on; raises ApiException(410) when it is too old."""
        query: dict[str, Any] = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                                 "timeoutSeconds": timeout_seconds}
        if field_selector:
            query["fieldSelector"] = field_selector
        response = self._send("GET", path, query=query, body=None, content_type="application/json",
                              timeout=(10, timeout_seconds + 30))
        if response.status >= 400:
            response.read()
            raise ApiException(http_resp=response)
        buffer = b""
        try:
            for chunk in response.response.stream(65536, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = decode(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiException(status=int(status.get("code") or 500), reason=status.get("message"))
                    yield event
        finally:
            response.response.release_conn()


def decode(data: bytes) -> Any:
    """JSON from the API server as plain dicts and lists: msgspec's decoder, several times faster than json's
    (lists of thousands of pods and a watch event per change are read all the time); json's for what it refuses."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)


# informers hold a connection each for their watch; beside them the controller writes from its launch workers
# and its bind workers (controller/launch/launcher.py) at once, each on a connection of its own
POOL_SIZE = 64


def api_client(kubeconfig: str | None = None, *, host: str | None = None) -> ApiClient:
    """An official-client ApiClient for a bare URL, or the cluster configuration `load_configuration` finds,
    with a connection pool large enough for watches and parallel writes."""
    configuration = Configuration()
    if host is not None:
        configuration.host = host
    else:
        load_configuration(kubeconfig, configuration)
    configuration.connection_pool_maxsize = POOL_SIZE
    bound_retries(configuration)
    return ApiClient(configuration)


def bound_retries(configuration: Configuration) -> None:
    """Retry connection failures briefly (kubeclient/outage.py says the rest), without urllib3's
    warning per retry: an outage is reported once, by OUTAGES, not once per try."""
    configuration.retries = request_retries()
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def load_configuration(kubeconfig: str | None, configuration: Configuration) -> str:
    """Fill `configuration` as kubectl and controller-runtime look for a cluster: the --kubeconfig flag, else
    $KUBECONFIG, else the in-cluster service account, else ~/.kube/config. Returns where it came from;
    raises ConfigException naming every place tried when none works. A named file that fails is an error,
    never a reason to try the next place (the user asked for that file)."""
    if kubeconfig:
        _load_file(kubeconfig, configuration, source=f"--kubeconfig {kubeconfig}")
        return kubeconfig
    if env := os.environ.get("KUBECONFIG"):
        _load_file(env, configuration, source=f"$KUBECONFIG {env}")
        return env
    tried = ["--kubeconfig (not given)", "$KUBECONFIG (not set)"]
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
        return "in-cluster configuration"
    except kubernetes.config.ConfigException as e:
        tried.append(f"in-cluster configuration ({e})")
    home = os.path.expanduser("~/.kube/config")
    if os.path.isfile(home):
        _load_file(home, configuration, source=home)
        return home
    tried.append(f"{home} (no such file)")
    raise kubernetes.config.ConfigException("no cluster configuration found; tried " + ", ".join(tried))


def _load_file(path: str, configuration: Configuration, *, source: str) -> None:
    # $KUBECONFIG may list several files, as kubectl merges them; the client merges the same way
    files = [p for p in path.split(os.pathsep) if p]
    missing = [p for p in files if not os.path.isfile(os.path.expanduser(p))]
    if missing and len(missing) == len(files):
        raise kubernetes.config.ConfigException(f"{source}: no such file")
    try:
        kubernetes.config.load_kube_config(config_file=path, client_configuration=configuration)
    except (kubernetes.config.ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, AttributeError) as e:
        raise kubernetes.config.ConfigException(f"{source}: {e}") from None


def now_rfc3339() -> str:
    return rfc3339(dt.datetime.now(dt.timezone.utc))


def path_of(api_version: str, plural: str, namespace: str | None = None, name: str | None = None,
            subresource: str | None = None) -> str:
    """The REST path of a resource (`v1`, `pods`, `default`, `web-1`, `status`)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{urllib.parse.quote(namespace)}"
    base += f"/{plural}"
    if name:
        base += f"/{urllib.parse.quote(name)}"
    if subresource:
        base += f"/{subresource}"
    return base


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
