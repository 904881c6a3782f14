"""meta.k8s.io/v1 Tables, so `kubectl get` (and `-o wide`) shows the columns it shows on a real cluster.

Pods, nodes, workloads and namespaces get kubectl's usual columns; custom
resources get their CRD's additionalPrinterColumns; anything else NAME and AGE.
Pure.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Callable, Sequence

from karpy.apis.conditions import ready
from karpy.apis.timestamps import parse_time
from karpy.simulator.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, Callable[[Obj], Any]]    # name, type, priority (1: -o wide only), cell


def age(obj: Obj) -> str:
    return since((obj.get("metadata") or {}).get("creationTimestamp"))


def since(timestamp: str | None) -> str:
    """How long ago `timestamp` was, as kubectl prints ages."""
    then = parse_time(timestamp)
    if then is None:
        return "<unknown>"
    seconds = int((dt.datetime.now(dt.timezone.utc) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "d" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _name(o: Obj) -> str:
    return o["metadata"]["name"]


def _pod_status(o: Obj) -> str:
    if o["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = o.get("status") or {}
    return status.get("reason") or status.get("phase") or "Pending"


def _pod_ready(o: Obj) -> str:
    statuses = (o.get("status") or {}).get("containerStatuses") or []
    total = len((o.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _node_status(o: Obj) -> str:
    text = "Ready" if ready(o) else "NotReady"
    if (o.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _address(kind: str) -> Callable[[Obj], str]:
    return lambda o: next((a["address"] for a in (o.get("status") or {}).get("addresses") or [] if a.get("type") == kind), "<none>")


def _event_last_seen(o: Obj) -> str:
    """The API server's LAST SEEN: `5m`, or `5m (x3 over 10m)` for an Event seen more than once."""
    last = o.get("lastTimestamp") or (o.get("series") or {}).get("lastObservedTime") or o.get("deprecatedLastTimestamp") \
        or o.get("eventTime") or (o.get("metadata") or {}).get("creationTimestamp")
    count = int(o.get("count") or (o.get("series") or {}).get("count") or o.get("deprecatedCount") or 0)
    if count > 1:
        return f"{since(last)} (x{count} over {since(o.get('firstTimestamp') or last)})"
    return since(last)


def _event_object(o: Obj) -> str:
    involved = o.get("involvedObject") or o.get("regarding") or {}     # core/v1, events.k8s.io/v1
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _event_source(o: Obj) -> str:
    source = o.get("source") or {}
    component = source.get("component") or o.get("reportingComponent") or ""
    return f"{component}, {source['host']}" if source.get("host") else component


def _job_status(o: Obj) -> str:
    types = {c.get("type") for c in (o.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    return "Complete" if "Complete" in types else "Failed" if "Failed" in types else "Running"


def _replicas(field: str) -> Callable[[Obj], Any]:
    return lambda o: (o.get("status") or {}).get(field, 0) or 0


COLUMNS: dict[str, list[Column]] = {
    "Pod": [
        ("Name", "string", 0, _name), ("Ready", "string", 0, _pod_ready), ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, lambda o: str(sum(c.get("restartCount", 0) for c in (o.get("status") or {}).get("containerStatuses") or []))),
        ("Age", "string", 0, age), ("IP", "string", 1, lambda o: (o.get("status") or {}).get("podIP", "<none>")),
        ("Node", "string", 1, lambda o: (o.get("spec") or {}).get("nodeName", "<none>")),
        ("Nominated Node", "string", 1, lambda o: "<none>"), ("Readiness Gates", "string", 1, lambda o: "<none>"),
    ],
    "Node": [
        ("Name", "string", 0, _name), ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, lambda o: ",".join(sorted(k.split("/", 1)[1] for k in o["metadata"].get("labels") or {}
                                                         if k.startswith("node-role.kubernetes.io/"))) or "<none>"),
        ("Age", "string", 0, age), ("Version", "string", 0, lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")),
        ("Internal-IP", "string", 1, _address("InternalIP")), ("External-IP", "string", 1, _address("ExternalIP")),
        ("OS-Image", "string", 1, lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("osImage", "<unknown>")),
        ("Kernel-Version", "string", 1, lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("kernelVersion", "<unknown>")),
        ("Container-Runtime", "string", 1, lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion", "<unknown>")),
    ],
    "Deployment": [
        ("Name", "string", 0, _name),
        ("Ready", "string", 0, lambda o: f"{_replicas('readyReplicas')(o)}/{(o.get('spec') or {}).get('replicas', 1)}"),
        ("Up-to-date", "integer", 0, _replicas("updatedReplicas")), ("Available", "integer", 0, _replicas("availableReplicas")),
        ("Age", "string", 0, age),
    ],
    "ReplicaSet": [
        ("Name", "string", 0, _name), ("Desired", "integer", 0, lambda o: (o.get("spec") or {}).get("replicas", 1)),
        ("Current", "integer", 0, _replicas("replicas")), ("Ready", "integer", 0, _replicas("readyReplicas")), ("Age", "string", 0, age),
    ],
    "DaemonSet": [
        ("Name", "string", 0, _name), ("Desired", "integer", 0, _replicas("desiredNumberScheduled")),
        ("Current", "integer", 0, _replicas("currentNumberScheduled")), ("Ready", "integer", 0, _replicas("numberReady")),
        ("Age", "string", 0, age),
    ],
    "Event": [
        ("Last Seen", "string", 0, _event_last_seen), ("Type", "string", 0, lambda o: o.get("type", "")),
        ("Reason", "string", 0, lambda o: o.get("reason", "")), ("Object", "string", 0, _event_object),
        ("Subobject", "string", 1, lambda o: (o.get("involvedObject") or {}).get("fieldPath", "")),
        ("Source", "string", 1, _event_source), ("Message", "string", 0, lambda o: o.get("message") or o.get("note") or ""),
        ("First Seen", "string", 1, lambda o: since(o.get("firstTimestamp") or o.get("eventTime"))),
        ("Count", "integer", 1, lambda o: int(o.get("count") or 1)), ("Name", "string", 1, _name),
    ],
    "StatefulSet": [
        ("Name", "string", 0, _name),
        ("Ready", "string", 0, lambda o: f"{_replicas('readyReplicas')(o)}/{(o.get('spec') or {}).get('replicas', 1)}"),
        ("Age", "string", 0, age),
    ],
    "Job": [
        ("Name", "string", 0, _name),
        ("Status", "string", 0, _job_status),
        ("Completions", "string", 0, lambda o: f"{_replicas('succeeded')(o)}/{(o.get('spec') or {}).get('completions', 1)}"),
        ("Age", "string", 0, age),
    ],
    "Namespace": [("Name", "string", 0, _name), ("Status", "string", 0, lambda o: (o.get("status") or {}).get("phase", "Active")),
                  ("Age", "string", 0, age)],
    "PodDisruptionBudget": [
        ("Name", "string", 0, _name), ("Min Available", "string", 0, lambda o: str((o.get("spec") or {}).get("minAvailable", "N/A"))),
        ("Max Unavailable", "string", 0, lambda o: str((o.get("spec") or {}).get("maxUnavailable", "N/A"))),
        ("Allowed Disruptions", "integer", 0, lambda o: (o.get("status") or {}).get("disruptionsAllowed", 0)), ("Age", "string", 0, age),
    ],
}


# One step of a printer column's JSONPath: a field (dots inside it escaped), a list index, or a filter
# `[?(@.type=="Ready")]` that picks the first list item whose field has that value.
_STEP = re.compile(r'\.?((?:\\.|[^.\[\\])+)|\[(\d+)\]|\[\?\(@\.([\w-]+)=="([^"]*)"\)\]')


def value_at(obj: Obj, path: str) -> Any:
    """The value at a printer column's JSONPath (`.status.nodes`, `.metadata.labels.karpenter\\.sh/nodepool`,
    `.status.conditions[?(@.type=="Ready")].status`), or None."""
    node: Any = obj
    for field, index, key, wanted in _STEP.findall(path.strip()):
        if field:
            node = node.get(field.replace("\\.", ".")) if isinstance(node, dict) else None
        elif index:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        else:
            node = next((i for i in node if isinstance(i, dict) and i.get(key) == wanted), None) \
                if isinstance(node, list) else None
    return node


def _json_path(path: str) -> Callable[[Obj], Any]:
    def cell(o: Obj) -> Any:
        value = value_at(o, path)
        return "<none>" if value is None else value

    return cell


def columns_for(t: ResourceType) -> list[Column]:
    if t.kind in COLUMNS and not t.group.endswith(".sh"):
        return COLUMNS[t.kind]
    if t.printer_columns:
        cols: list[Column] = [("Name", "string", 0, _name)]
        for c in t.printer_columns:
            cell = age if c.get("type") == "date" else _json_path(c.get("jsonPath", ""))
            cols.append((c["name"], "string" if c.get("type") == "date" else c.get("type", "string"), int(c.get("priority", 0)), cell))
        return cols
    return [("Name", "string", 0, _name), ("Age", "string", 0, age)]


def table(t: ResourceType, objects: Sequence[Obj], resource_version: int | str, *, include_object: str = "Metadata",
          continue_token: str | None = None) -> dict[str, Any]:
    cols = columns_for(t)
    rows = []
    for o in objects:
        if include_object == "Object":
            embedded: Obj = o
        elif include_object == "None":
            embedded = {}
        else:
            embedded = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata", {})}
        rows.append({"cells": [_cell(c[3](o)) for c in cols], "object": embedded})
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(resource_version), **({"continue": continue_token} if continue_token else {})},
        "columnDefinitions": [{"name": n, "type": typ, "format": "name" if n == "Name" else "", "description": n, "priority": p}
                              for n, typ, p, _ in cols],
        "rows": rows,
    }


def _cell(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return str(value)
    return value
