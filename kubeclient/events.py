"""Kubernetes Events, written through the API server, so `kubectl describe` shows what happened."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kubernetes.client.exceptions import ApiException

from karpy.kubeclient.outage import ApiUnreachable
from karpy.kubeclient.raw import RawClient, path_of
from karpy.kubeclient.raw import now_rfc3339

log = logging.getLogger("kubeclient.events")


def record(client: RawClient, obj: dict[str, Any], *, reason: str, message: str, component: str,
           event_type: str = "Normal") -> None:
    """Create an Event about `obj` (in its namespace, or `default` for cluster-scoped objects)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    now = now_rfc3339()
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
                           "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message, "type": event_type, "count": 1,
        "firstTimestamp": now, "lastTimestamp": now, "source": {"component": component},
        "reportingComponent": component, "reportingInstance": component,
    }
    try:
        client.create(path_of("v1", "events", namespace), body)
    except ApiException as e:
        log.debug("recording event %s on %s: %s", reason, meta.get("name"), e.reason)
    except ApiUnreachable as e:     # an Event is worth no failure of its caller (an extender verb answers anyway)
        log.debug("recording event %s on %s: %s", reason, meta.get("name"), e)
