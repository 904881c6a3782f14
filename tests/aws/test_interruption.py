"""Interruption: EventBridge events read from an SQS queue on a moto server, acted on in the local cluster."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from karpy.controller.cloudprovider.aws.interruption import MessageError, SqsQueue, parse
from karpy.controller.cloudprovider.aws.provider import AwsConfigError
from karpy.controller.cloudprovider.types import REBALANCE, SCHEDULED_CHANGE, SPOT_INTERRUPTION, STATE_CHANGE
from karpy.controller.interruption.controller import InterruptionHandler
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.aws.conftest import REGION, Moto
from tests.builders import node, pod, provisioner
from tests.controller.conftest import CATALOG, Env, env  # noqa: F401 — env is a fixture, used by name

pytestmark = pytest.mark.slow      # starts a moto server on loopback


def ec2_event(detail_type: str, **detail: Any) -> str:
    return json.dumps({"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": detail_type,
                       "source": "aws.ec2", "account": "123456789012", "time": "2026-11-23T12:00:00Z",
                       "region": REGION, "resources": [], "detail": detail})


SPOT = ec2_event("EC2 Spot Instance Interruption Warning", **{"instance-id": "i-0abc", "instance-action": "terminate"})
HEALTH = json.dumps({"detail-type": "AWS Health Event", "source": "aws.health", "detail": {
    "service": "EC2", "eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
    "affectedEntities": [{"entityValue": "i-0abc"}, {"entityValue": "i-0def"}]}})


@pytest.mark.parametrize("body, kind, ids", [
    (SPOT, SPOT_INTERRUPTION, ("i-0abc",)),
    (ec2_event("EC2 Instance Rebalance Recommendation", **{"instance-id": "i-0abc"}), REBALANCE, ("i-0abc",)),
    (ec2_event("EC2 Instance State-change Notification", **{"instance-id": "i-0abc", "state": "stopping"}), STATE_CHANGE, ("i-0abc",)),
    (HEALTH, SCHEDULED_CHANGE, ("i-0abc", "i-0def")),
], ids=["spot", "rebalance", "state-change", "scheduled-change"])
def test_events_are_read(body: str, kind: str, ids: tuple[str, ...]) -> None:
    interruption = parse(body)
    assert interruption is not None and (interruption.kind, interruption.instance_ids) == (kind, ids)
    assert interruption.drains == (kind != REBALANCE)


def test_events_that_ask_nothing_are_none() -> None:
    assert parse(ec2_event("EC2 Instance State-change Notification", **{"instance-id": "i-1", "state": "running"})) is None
    assert parse(json.dumps({"detail-type": "AWS Health Event", "source": "aws.health",
                             "detail": {"service": "RDS", "eventTypeCategory": "scheduledChange"}})) is None


@pytest.mark.parametrize("body, problem", [
    ("{not json", "not JSON"),
    ("[]", "not a JSON object"),
    (ec2_event("EC2 Spot Instance Interruption Warning"), "detail.instance-id"),
    (json.dumps({"detail-type": "Something", "source": "aws.s3", "detail": {}}), "unknown event"),
    (json.dumps({"detail-type": "AWS Health Event", "source": "aws.health",
                 "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange"}}), "detail.affectedEntities"),
])
def test_malformed_messages_say_what_is_wrong(body: str, problem: str) -> None:
    with pytest.raises(MessageError, match=problem):
        parse(body)


def test_a_spot_warning_launches_a_replacement_then_drains_the_node(moto: Moto, env: Env) -> None:  # noqa: F811 — the env fixture
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto.url)
    queue = sqs.create_queue(QueueName="karpy-interruption")["QueueUrl"]
    doomed = node("ip-10-0-0-1.ec2.internal", provisioner="default", instance_type="small", zone="zone-a",
                  capacity_type="spot", initialized=True, allocatable={"cpu": "2", "memory": "4Gi", "pods": "10"})
    doomed["spec"]["providerID"] = "aws:///zone-a/i-0abc"
    doomed["metadata"]["finalizers"] = ["karpenter.sh/termination"]      # so the deleting Node stays to be seen
    env.apply(provisioner("default"), doomed, pod("app-1", cpu="1", node_name="ip-10-0-0-1.ec2.internal"))
    for body in ("{not json", ec2_event("EC2 Instance Rebalance Recommendation", **{"instance-id": "i-0abc"}), SPOT):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    handler = InterruptionHandler(env.state, SqsQueue(sqs, "karpy-interruption", wait_seconds=0),
                                  Provisioner(env.state, env.cloud, CATALOG))
    for _ in range(3):                                  # up to 10 messages a call
        handler.reconcile()
    nodes = {n["metadata"]["name"]: n for n in env.client.get(path_of("v1", "nodes"))["items"]}
    assert nodes["ip-10-0-0-1.ec2.internal"]["metadata"].get("deletionTimestamp")       # handed to termination
    replacements = [n for n in nodes if n != "ip-10-0-0-1.ec2.internal"]
    assert len(replacements) == 1                                                      # capacity for app-1, launched first
    reasons = sorted(e["reason"] for e in env.client.get(path_of("v1", "events", "default"))["items"]
                     if e["involvedObject"]["name"] == "ip-10-0-0-1.ec2.internal")
    assert reasons == [REBALANCE, SPOT_INTERRUPTION]
    assert sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0).get("Messages") is None   # every message handled once


def test_an_unknown_queue_is_a_configuration_error_naming_it(moto: Moto) -> None:
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto.url)
    with pytest.raises(AwsConfigError, match="--interruption-queue nowhere: finding the interruption queue nowhere"):
        SqsQueue(sqs, "nowhere")


def test_the_queue_names_only_ec2_instances(moto: Moto) -> None:
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto.url)
    sqs.create_queue(QueueName="karpy-interruption")
    queue = SqsQueue(sqs, "karpy-interruption")
    assert queue.instance_id("aws:///zone-a/i-0abc") == "i-0abc"
    assert queue.instance_id("fake://default-7kq2m") is None
