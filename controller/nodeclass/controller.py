"""Keeps each EC2NodeClass's status current: the subnets, security groups, AMIs and instance profile AWS
gives for it, and its conditions, written through the status subresource. A node class whose resolution
fails is retried after a pause that doubles with each failure in a row (capped), the others on the resync.
The node class holds a finalizer so the instance profile made for its role goes with it."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from karpy.apis.timestamps import rfc3339
from karpy.apis.v1.ec2nodeclass import GROUP_VERSION, PLURAL, EC2NodeClass
from karpy.controller.clock import Clock
from karpy.controller.cloudprovider.aws.nodeclass import NodeClassNotReady, NodeClassResolver
from karpy.controller.nodeclass.status import conditions
from karpy.kubeclient.outage import backoff_seconds
from karpy.kubeclient.raw import RawClient, path_of

log = logging.getLogger("controller.nodeclass")
FINALIZER = "karpenter.k8s.aws/termination"
RESYNC_SECONDS = 60.0           # AMIs and subnets change rarely; an alias's newest image is picked up within this
BACKOFF_CAP_SECONDS = 300.0


@dataclasses.dataclass
class _Failing:
    attempts: int
    retry_at: float


class NodeClassController:
    def __init__(self, client: RawClient, resolver: NodeClassResolver, clock: Clock | None = None) -> None:
        self.client, self.resolver, self.clock = client, resolver, clock or Clock()
        self._failing: dict[str, _Failing] = {}

    def reconcile(self) -> float:
        """One pass over every EC2NodeClass; the seconds until the next is due."""
        try:
            items = self.client.get(path_of(GROUP_VERSION, PLURAL)).get("items") or []
        except ApiException as e:
            if e.status != 404:
                raise
            log.debug("The EC2NodeClass CRD is not installed: nothing to resolve")
            return RESYNC_SECONDS
        now = self.clock.monotonic()
        for raw in items:
            name = (raw.get("metadata") or {}).get("name", "")
            failing = self._failing.get(name)
            if failing is not None and failing.retry_at > now:
                continue
            try:
                ready = self.reconcile_one(raw)
            except (ApiException, NodeClassNotReady, ValueError) as e:
                log.error("EC2NodeClass %s: %s", name, e)
                ready = False
            if ready:
                self._failing.pop(name, None)
            else:
                attempts = (failing.attempts if failing else 0) + 1
                self._failing[name] = _Failing(attempts, now + backoff_seconds(attempts, base=2.0, cap=BACKOFF_CAP_SECONDS))
        known = {(r.get("metadata") or {}).get("name") for r in items}
        self._failing = {k: v for k, v in self._failing.items() if k in known}
        due = [f.retry_at - now for f in self._failing.values()]
        return max(min([RESYNC_SECONDS, *due]), 1.0)

    def reconcile_one(self, raw: dict[str, Any]) -> bool:
        """Resolve one node class and write its status; True when it is Ready."""
        node_class = EC2NodeClass.model_validate(raw)
        metadata = raw.get("metadata") or {}
        path = path_of(GROUP_VERSION, PLURAL, name=node_class.name)
        finalizers = list(metadata.get("finalizers") or [])
        if metadata.get("deletionTimestamp"):
            if FINALIZER in finalizers:
                self.resolver.delete_instance_profile(node_class)
                self.client.patch(path, {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER],
                                                      "resourceVersion": metadata.get("resourceVersion")}})
                log.info("EC2NodeClass %s: deleted, its instance profile with it", node_class.name)
            return True
        if FINALIZER not in finalizers:
            self.client.patch(path, {"metadata": {"finalizers": [*finalizers, FINALIZER],
                                                  "resourceVersion": metadata.get("resourceVersion")}})
        status: dict[str, Any] = {}
        problems: dict[str, str | None] = {}
        parts: dict[str, tuple[str, Callable[[], Any]]] = {
            "SubnetsReady": ("subnets", lambda: self.resolver.subnets(node_class)),
            "SecurityGroupsReady": ("securityGroups", lambda: self.resolver.security_groups(node_class)),
            "AMIsReady": ("amis", lambda: self.resolver.amis(node_class)),
            "InstanceProfileReady": ("instanceProfile",
                                     lambda: self.resolver.instance_profile(node_class, metadata.get("uid", ""))),
        }
        for kind, (field, resolve) in parts.items():
            try:
                status[field] = resolve()
                problems[kind] = None
            except NodeClassNotReady as e:
                status[field] = None          # a merge patch's null: nothing found, so nothing stays listed
                problems[kind] = str(e)
        previous = (raw.get("status") or {}).get("conditions") or []
        status["conditions"] = conditions(previous, problems, generation=metadata.get("generation"),
                                          now=rfc3339(self.clock.now()))
        self.client.patch(path + "/status", {"status": status})
        return not any(problems.values())
