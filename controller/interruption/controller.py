"""Interruption: read the SQS queue EventBridge feeds, and move pods off instances before they go.

For a spot interruption warning, a scheduled change or an instance that is
stopping or terminating, the node karpy launched for that instance gets an
Event, replacement capacity for its pods is launched first (planned as if
the node were gone), and then the Node is deleted, so termination cordons it
and drains it through the Eviction API within the two minutes a spot warning
gives. A rebalance recommendation is reported as an Event only. Messages are
deleted once handled, malformed ones too (with a log line saying what was
wrong), so no message is read twice or blocks the queue.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from prometheus_client import Counter

from karpy.controller.cloudprovider.aws.provider import parse_provider_id
from karpy.controller.cloudprovider.types import InstanceNotFound
from karpy.controller.interruption.messages import MessageError, parse
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.state import ClusterState
from karpy.kubeclient import events

log = logging.getLogger("controller.interruption")
MESSAGES = Counter("karpy_interruption_received_messages_total", "Interruption queue messages, by what they said", ["kind"])
ACTIONS = Counter("karpy_interruption_actions_performed_total", "Nodes acted on for interruption events", ["action"])


class InterruptionHandler:
    def __init__(self, state: ClusterState, sqs: Any, queue_url: str, provisioner: Provisioner, *,
                 wait_seconds: int = 5) -> None:
        self.state, self.sqs, self.queue_url, self.provisioner = state, sqs, queue_url, provisioner
        self.wait_seconds = wait_seconds

    def reconcile(self) -> float | None:
        """Receive (long polling) and handle up to 10 messages; come back at once."""
        try:
            received = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                                WaitTimeSeconds=self.wait_seconds)
        except (BotoCoreError, ClientError) as e:
            log.error("Reading interruption queue %s, %s", self.queue_url, e)
            return 10.0
        for message in received.get("Messages", []):
            self.handle(message.get("Body", ""))
            try:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            except (BotoCoreError, ClientError) as e:
                log.error("Deleting interruption message %s, %s", message.get("MessageId"), e)
        return 0.01

    def handle(self, body: str) -> None:
        try:
            interruption = parse(body)
        except MessageError as e:
            MESSAGES.labels("invalid").inc()
            log.warning("Ignoring interruption queue message: %s", e)
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
            if node["metadata"].get("deletionTimestamp"):
                continue                                # already going
            launched = self.provisioner.launch_replacements(name)
            log.info("Node %s (%s): %s; launched %d replacement node(s), draining", name, instance_id,
                     interruption.detail, launched)
            self.state.delete_node(name)
            ACTIONS.labels("drain").inc()

    def node_of(self, instance_id: str) -> dict[str, Any] | None:
        """The karpy node of an instance, by its providerID (`aws:///<zone>/<instance-id>`)."""
        for node in self.state.nodes.items():
            try:
                _, instance = parse_provider_id((node.get("spec") or {}).get("providerID") or "")
            except InstanceNotFound:
                continue                                # not an EC2 instance
            if instance == instance_id and self.state.ours(node) is not None:
                return node
        return None
