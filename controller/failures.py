"""Bad objects, reported once: one log line and one Warning Event per object and problem.

A pod or Provisioner that cannot be handled is skipped so the rest of the batch
goes on (the scheduling core returns such failures instead of raising). Every
batch would find the same object broken again; this says so once, while the
problem stays the same, so the log holds one line per bad object, not one per
batch, and `kubectl describe` on the object shows why karpy passes it over.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Iterable, Mapping

from karpy.controller.provisioning.scheduling.scheduler import Results
from karpy.kubeclient import events
from karpy.kubeclient.raw import RawClient

log = logging.getLogger("controller.failures")
REMEMBERED = 10_000          # bad objects remembered; past that the oldest may be reported again


class FailureReporter:
    def __init__(self, client: RawClient) -> None:
        self.client = client
        self._reported: collections.OrderedDict[tuple[str, str], str] = collections.OrderedDict()
        self._lock = threading.Lock()          # several controller loops report at once

    def report(self, obj: Mapping[str, Any], *, kind: str, reason: str, message: str) -> bool:
        """Log `message` about `obj` and record a Warning Event on it, unless this very message was
        already reported for it. Returns True when it was reported now."""
        meta = obj.get("metadata") or {}
        name = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
        key = (kind, str(meta.get("uid") or name))
        with self._lock:
            if self._reported.get(key) == message:
                return False
            self._reported[key] = message
            self._reported.move_to_end(key)
            while len(self._reported) > REMEMBERED:
                self._reported.popitem(last=False)
        log.error("Skipping %s %s, %s", kind.lower(), name, message)
        events.record(self.client, {"kind": kind, **obj}, reason=reason, message=message, component="karpy",
                      event_type="Warning")
        return True

    def forget(self, kind: str, uid_or_name: str) -> None:
        """The object is fine again (or gone): a later failure is news again."""
        with self._lock:
            self._reported.pop((kind, uid_or_name), None)

    def report_results(self, results: Results, provisioners: Iterable[Mapping[str, Any]]) -> None:
        """Report the pods and Provisioners (or NodePools, given with their apiVersion and kind) a scheduling run had
        to skip."""
        pods = {p.key: p for p in results.pending}
        for key, message in results.failed_pods.items():
            pod = pods.get(key)
            if pod is not None:
                self.report({"apiVersion": "v1", **pod.raw}, kind="Pod", reason="FailedScheduling", message=message)
        by_name = {p["metadata"]["name"]: p for p in provisioners}
        for name, message in results.failed_provisioners.items():
            raw = by_name.get(name)
            if raw is not None:
                self.report({"apiVersion": "karpenter.sh/v1alpha5", **raw}, kind=raw.get("kind", "Provisioner"),
                            reason="FailedProvisioning", message=f"computing instance types, {message}")
