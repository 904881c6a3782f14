"""The interruption queue on SQS, and the EventBridge events on it read into what they mean for a node.

The events Karpenter subscribes its SQS queue to:
- `EC2 Spot Instance Interruption Warning` (aws.ec2): the spot instance goes in two minutes;
- `EC2 Instance Rebalance Recommendation` (aws.ec2): it is at elevated risk of interruption;
- `AWS Health Event` (aws.health, service EC2, category scheduledChange): a scheduled retirement or
  maintenance of the instances in `affectedEntities`;
- `EC2 Instance State-change Notification` (aws.ec2): stopping, stopped, shutting-down or terminated.
A rebalance recommendation is only reported (as Karpenter does by default); the others drain the node.
Reading a message (`read`, `parse`) is pure; SqsQueue does the I/O.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from karpy.controller.cloudprovider.aws.errors import plainly
from karpy.controller.cloudprovider.aws.provider import AwsConfigError, parse_provider_id
from karpy.controller.cloudprovider.types import (
    REBALANCE,
    SCHEDULED_CHANGE,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
    CloudError,
    InstanceNotFound,
    Interruption,
    Notice,
)

GOING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class MessageError(ValueError):
    """A queue message that is not an event karpy reads; the text says what is wrong."""


class SqsQueue:
    """The interruption queue on SQS: messages read into Notices, deleted once handled."""

    def __init__(self, sqs: Any, name: str, *, wait_seconds: int = 5) -> None:
        self.sqs, self.name, self.wait_seconds = sqs, name, wait_seconds
        try:
            with plainly(f"finding the interruption queue {name}"):
                self.url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except CloudError as e:
            raise AwsConfigError(f"--interruption-queue {name}: {e}") from None

    def receive(self) -> Sequence[Notice]:
        with plainly(f"reading the interruption queue {self.name}"):
            received = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=self.wait_seconds)
        return [read(m.get("Body", ""), receipt=m["ReceiptHandle"]) for m in received.get("Messages", [])]

    def delete(self, notice: Notice) -> None:
        with plainly(f"deleting a message of the interruption queue {self.name}"):
            self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=notice.receipt)

    def instance_id(self, provider_id: str) -> str | None:
        try:
            return parse_provider_id(provider_id)[1]
        except InstanceNotFound:
            return None                            # not an EC2 instance


def read(body: str, *, receipt: str) -> Notice:
    """Pure: the Notice of one message, a malformed one included."""
    try:
        return Notice(receipt, parse(body))
    except MessageError as e:
        return Notice(receipt, problem=str(e))


def parse(body: str) -> Interruption | None:
    """The interruption `body` announces; None for a well-formed event that asks nothing of karpy
    (another state change, another Health service). Raises MessageError for anything else."""
    try:
        event = json.loads(body)
    except (ValueError, TypeError) as e:
        raise MessageError(f"not JSON: {e}") from None
    if not isinstance(event, dict):
        raise MessageError("not a JSON object")
    detail_type, source, detail = event.get("detail-type"), event.get("source"), event.get("detail")
    if not isinstance(detail, dict):
        raise MessageError(f"detail: expected an object in a {detail_type!r} event")
    if (source, detail_type) == ("aws.ec2", "EC2 Spot Instance Interruption Warning"):
        return Interruption(SPOT_INTERRUPTION, (_instance(detail),),
                            f"spot interruption warning (action {detail.get('instance-action', 'terminate')})")
    if (source, detail_type) == ("aws.ec2", "EC2 Instance Rebalance Recommendation"):
        return Interruption(REBALANCE, (_instance(detail),), "rebalance recommendation")
    if (source, detail_type) == ("aws.ec2", "EC2 Instance State-change Notification"):
        state = detail.get("state")
        if not isinstance(state, str):
            raise MessageError("detail.state: expected a string")
        return Interruption(STATE_CHANGE, (_instance(detail),), f"instance is {state}") if state in GOING_STATES else None
    if (source, detail_type) == ("aws.health", "AWS Health Event"):
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return None
        entities = detail.get("affectedEntities")
        if not isinstance(entities, list):
            raise MessageError("detail.affectedEntities: expected a list")
        ids = tuple(e["entityValue"] for e in entities if isinstance(e, dict) and isinstance(e.get("entityValue"), str))
        if not ids:
            raise MessageError("detail.affectedEntities: no entityValue")
        return Interruption(SCHEDULED_CHANGE, ids, f"scheduled change {detail.get('eventTypeCode', '')}".rstrip())
    raise MessageError(f"unknown event: source {source!r}, detail-type {detail_type!r}")


def _instance(detail: dict[str, Any]) -> str:
    instance = detail.get("instance-id")
    if not isinstance(instance, str) or not instance:
        raise MessageError("detail.instance-id: expected an instance id")
    return instance
