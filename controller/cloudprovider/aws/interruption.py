"""EventBridge events from the interruption queue, read into what they mean for a node. Pure.

The events Karpenter subscribes its SQS queue to:
- `EC2 Spot Instance Interruption Warning` (aws.ec2): the spot instance goes in two minutes;
- `EC2 Instance Rebalance Recommendation` (aws.ec2): it is at elevated risk of interruption;
- `AWS Health Event` (aws.health, service EC2, category scheduledChange): a scheduled retirement or
  maintenance of the instances in `affectedEntities`;
- `EC2 Instance State-change Notification` (aws.ec2): stopping, stopped, shutting-down or terminated.
A rebalance recommendation is only reported (as Karpenter does by default); the others drain the node.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

SPOT_INTERRUPTION = "SpotInterrupted"
REBALANCE = "RebalanceRecommendation"
SCHEDULED_CHANGE = "ScheduledChange"
STATE_CHANGE = "InstanceStateChange"
GOING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class MessageError(ValueError):
    """A queue message that is not an event karpy reads; the text says what is wrong."""


@dataclasses.dataclass(frozen=True)
class Interruption:
    kind: str                          # SPOT_INTERRUPTION | REBALANCE | SCHEDULED_CHANGE | STATE_CHANGE
    instance_ids: tuple[str, ...]
    detail: str                        # for people: what the event said

    @property
    def drains(self) -> bool:
        return self.kind != REBALANCE


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
