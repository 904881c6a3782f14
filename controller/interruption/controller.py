"""Interruption: read the cloud's interruption queue, and move pods off instances before they go.

For a spot interruption warning, a scheduled change or an instance that is
stopping or terminating, the node karpy launched for that instance gets an
Event, replacement capacity for its pods is launched first (planned as if
the node were gone), and then the Node is deleted, so termination cordons it
and drains it through the Eviction API within the two minutes a spot warning
gives. A rebalance recommendation is reported as an Event only. Messages are
deleted once handled, malformed ones too (with a log line saying what was
wrong), so no message is read twice or blocks the queue. The queue is the
provider's (CloudProvider.interruption_queue: SQS on aws); this reads only the
Notices it gives.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import Counter

from karpy.controller.cloudprovider.types import CloudError, InterruptionQueue, Notice
from karpy.controller.inflight import is_leaving
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.state import ClusterState
from karpy.kubeclient import events

log = logging.getLogger("controller.interruption")
MESSAGES = Counter("karpy_interruption_received_messages_total", "Interruption queue messages, by what they said", ["kind"])
ACTIONS = Counter("karpy_interruption_actions_performed_total", "Nodes acted on for interruption events", ["action"])


class InterruptionHandler:
    def __init__(self, state: ClusterState, queue: InterruptionQueue, provisioner: Provisioner) -> None:
        self.state, self.queue, self.provisioner = state, queue, provisioner

    def reconcile(self) -> float | None:
        """Receive (long polling) and handle a batch of messages; come back at once."""
        try:
            notices = self.queue.receive()
        except CloudError as e:
            log.error("Reading interruption queue %s, %s", self.queue.name, e)
            return 10.0
        for notice in notices:
            self.handle(notice)
            try:
                self.queue.delete(notice)
            except CloudError as e:
                log.error("Deleting interruption message, %s", e)
        return 0.01

    def handle(self, notice: Notice) -> None:
        interruption = notice.interruption
        if notice.problem is not None:
            MESSAGES.labels("invalid").inc()
            log.warning("Ignoring interruption queue message: %s", notice.problem)
            return
        if interruption is None:
            MESSAGES.labels("ignored").inc()
            return
        MESSAGES.labels(interruption.kind).inc()
        for instance_id in interruption.instance_ids:
            node = self.node_of(instance_id)
            if node is None:
                log.debug("No node for instance %s (%s)", instance_id, interruption.detail)
                continue
            name = node["metadata"]["name"]
            events.record(self.state.client, node, reason=interruption.kind, component="karpy", event_type="Warning",
                          message=f"instance {instance_id}: {interruption.detail}")
            if not interruption.drains:
                log.info("Node %s (%s): %s", name, instance_id, interruption.detail)
                ACTIONS.labels("notify").inc()
                continue
            if is_leaving(node):
                continue                                # already going
            launched = self.provisioner.launch_replacements(name)
            log.info("Node %s (%s): %s; launched %d replacement node(s), draining", name, instance_id,
                     interruption.detail, launched)
            self.state.delete_node(name)
            ACTIONS.labels("drain").inc()

    def node_of(self, instance_id: str) -> dict[str, Any] | None:
        """The karpy node of an instance, by its providerID."""
        for node in self.state.nodes.items():
            if self.queue.instance_id((node.get("spec") or {}).get("providerID") or "") == instance_id \
                    and self.state.ours(node) is not None:
                return node
        return None
