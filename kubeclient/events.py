"""Kubernetes Events, written through the API server, so `kubectl describe` shows what happened.

Repeats are aggregated as client-go's event recorder does (its EventLogger):
an Event with the same object, reason, message, type and source as one
recorded before is not created again; the earlier Event's `count` goes up
and its `lastTimestamp` moves, so `kubectl get events` shows `(x5 over 2m)`
instead of five rows. The recorder remembers the last 4096 distinct events
(client-go's cache size); one whose Event is gone is created anew.
"""

from __future__ import annotations

import collections
import logging
import threading
import uuid
from typing import Any, Mapping

from kubernetes.client.exceptions import ApiException

from karpy.kubeclient.outage import ApiUnreachable
from karpy.kubeclient.raw import RawClient, now_rfc3339, path_of

log = logging.getLogger("kubeclient.events")

MAX_REMEMBERED = 4096
_lock = threading.Lock()
_recorded: collections.OrderedDict[tuple[Any, ...], tuple[str, int]] = collections.OrderedDict()  # key -> (name, count)


def record(client: RawClient, obj: Mapping[str, Any], *, reason: str, message: str, component: str,
           event_type: str = "Normal") -> None:
    """Record an Event about `obj` (in its namespace, or `default` for cluster-scoped objects), or count a repeat."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    now = now_rfc3339()
    key = (client.api_client.configuration.host, namespace, obj.get("kind"), meta.get("name"), meta.get("uid"),
           reason, message, event_type, component)
    with _lock:
        seen = _recorded.get(key)
        if seen is not None:
            _recorded[key] = seen = (seen[0], seen[1] + 1)
            _recorded.move_to_end(key)
    if seen is not None and _count_repeat(client, namespace, seen, now):
        return
    name = f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}"
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
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
        return
    except ApiUnreachable as e:     # an Event is worth no failure of its caller (an extender verb answers anyway)
        log.debug("recording event %s on %s: %s", reason, meta.get("name"), e)
        return
    with _lock:
        _recorded[key] = (name, 1)
        _recorded.move_to_end(key)
        while len(_recorded) > MAX_REMEMBERED:
            _recorded.popitem(last=False)


def _count_repeat(client: RawClient, namespace: str, seen: tuple[str, int], now: str) -> bool:
    """Raise the earlier Event's count; False when it is gone (expired, deleted) and a new one is needed."""
    name, count = seen
    try:
        client.patch(path_of("v1", "events", namespace, name), {"count": count, "lastTimestamp": now})
    except ApiException as e:
        if e.status != 404:
            log.debug("counting event %s again: %s", name, e.reason)
            return True
        return False
    except ApiUnreachable as e:
        log.debug("counting event %s again: %s", name, e)
    return True
