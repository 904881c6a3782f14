"""The official `kubernetes` client, used raw: JSON dicts in and out, and watches as line streams.

The controller and the local cluster's scheduler, kubelets and controllers
talk to an API server through this over HTTP, like any client. Typed models are skipped on purpose:
a 10,000-pod list decodes in milliseconds as JSON and in seconds as models.
The list+watch cache built on it is `karpy.kubeclient.informer`.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import urllib.parse
from typing import Any, Iterator

import kubernetes
import msgspec
import urllib3
import yaml
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from karpy.apis.timestamps import rfc3339
from karpy.kubeclient.outage import OUTAGES, ApiUnreachable, OutageReporter, reason_of, request_retries

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
        data = response.data
        if response.status >= 400:
            raise api_exception(response, data)
        return decode(data) if data else None

    def _send(self, method: str, path: str, *, query: dict[str, Any] | None, body: Any, content_type: str,
              timeout: float | tuple[float, float] | None, stream: bool = False) -> Any:
        """One HTTP exchange through the client's own urllib3 pool (its TLS, client certificates, proxy and
        retries), with its auth header; the urllib3 response comes back, unread when `stream`.
        The generated client's request helpers are skipped: their signatures change between releases."""
        configuration = self.api_client.configuration
        url = configuration.host.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode([(k, _query_value(v)) for k, v in query.items()])
        headers = {"Accept": "application/json", "Content-Type": content_type,
                   **{a["key"]: a["value"] for a in configuration.auth_settings().values()
                      if a.get("in") == "header" and a.get("value")},
                   **self.api_client.default_headers}
        payload = None if body is None else body if isinstance(body, (bytes, str)) else msgspec.json.encode(body)
        if isinstance(timeout, tuple):
            request_timeout: Any = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            request_timeout = urllib3.Timeout(total=timeout) if timeout else None
        try:
            response = self.api_client.rest_client.pool_manager.request(
                method, url, body=payload, headers=headers, timeout=request_timeout, preload_content=not stream)
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
                              timeout=(10, timeout_seconds + 30), stream=True)
        if response.status >= 400:
            data = response.read()
            response.release_conn()
            raise api_exception(response, data)
        buffer = b""
        try:
            for chunk in response.stream(65536, decode_content=False):
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
            response.release_conn()


def api_exception(response: Any, data: bytes) -> ApiException:
    """The client's ApiException for an error answer, with its body and headers as the client fills them."""
    error = ApiException(status=response.status, reason=response.reason)
    error.body = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    error.headers = response.headers
    return error


def _query_value(value: Any) -> str:
    # booleans as Kubernetes spells them (the client's own serializer does the same)
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


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
    """Fill `configuration` as kubectl and controller-runtime look for a cluster (client-go's loading rules):
    the --kubeconfig flag (one file, which must exist), else the files $KUBECONFIG lists (merged; missing ones
    skipped), else the in-cluster service account, else ~/.kube/config, read only when $KUBECONFIG is unset.
    Returns where it came from; raises ConfigException naming every place tried when none works. A file that
    exists but fails is an error, never a reason to try the next place (the user asked for that file)."""
    if kubeconfig:
        if not os.path.isfile(os.path.expanduser(kubeconfig)):
            raise kubernetes.config.ConfigException(f"--kubeconfig {kubeconfig}: no such file")
        _load_files([kubeconfig], configuration, source=f"--kubeconfig {kubeconfig}")
        return kubeconfig
    tried = ["--kubeconfig (not given)"]
    env = os.environ.get("KUBECONFIG")
    if env and (files := kubeconfig_env_files()):
        _load_files(files, configuration, source=f"$KUBECONFIG {env}")
        return os.pathsep.join(files)
    tried.append(f"$KUBECONFIG {env} (no such file)" if env else "$KUBECONFIG (not set)")
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
        return "in-cluster configuration"
    except kubernetes.config.ConfigException as e:
        tried.append(f"in-cluster configuration ({e})")
    home = os.path.expanduser("~/.kube/config")
    if not env and os.path.isfile(home):      # client-go reads the home file only in place of $KUBECONFIG
        _load_files([home], configuration, source=home)
        return home
    tried.append(f"{home} (not read: $KUBECONFIG is set)" if env else f"{home} (no such file)")
    raise kubernetes.config.ConfigException("no cluster configuration found; tried " + ", ".join(tried))


def kubeconfig_env_files() -> list[str]:
    """The files $KUBECONFIG lists (os.pathsep-separated) that exist, in order, each once, as client-go reads it.
    When it lists files and none exists, warns once as client-go does ("Config not found: ...")."""
    listed = list(dict.fromkeys(p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p))
    present = [p for p in listed if os.path.isfile(os.path.expanduser(p))]
    if listed and not present:
        log.warning("Config not found: %s", ", ".join(listed))
    return present


def _load_files(files: list[str], configuration: Configuration, *, source: str) -> None:
    """Merge `files` into `configuration` by client-go's rules: the first file to name a cluster, user or
    context wins it, and so does the first to set current-context; an empty file adds nothing."""
    documents: list[tuple[str, dict[str, Any]]] = []
    for path in files:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as f:
                document = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as e:
            raise kubernetes.config.ConfigException(f"{source}: error loading config file {path}: {e}") from None
        if document is None:
            continue
        if not isinstance(document, dict):
            raise kubernetes.config.ConfigException(f"{source}: error loading config file {path}: not a mapping")
        documents.append((path, document))
    if not documents:
        raise kubernetes.config.ConfigException(f"{source}: no configuration in {', '.join(files)}")
    # the client's own merger keeps the first of each name but lets the last current-context win: say it here
    context = next((d["current-context"] for _, d in documents if d.get("current-context")), None)
    try:
        kubernetes.config.load_kube_config(config_file=os.pathsep.join(p for p, _ in documents), context=context,
                                           client_configuration=configuration)
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
