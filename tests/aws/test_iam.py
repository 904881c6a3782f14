"""The IAM artefacts in manifests/aws/: the controller policy allows every AWS call the AWS provider makes (read
from the code, named as botocore's service models name them) and nothing more; the CloudFormation template
carries the same policy, passes cfn-lint, and, deployed to moto, makes the roles, the instance profile and an
interruption queue that EventBridge fills with the events karpy reads."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Iterator

import boto3
import botocore.session
import pytest
import yaml

from karpy.controller.cloudprovider.aws.interruption import SqsQueue
from karpy.controller.cloudprovider.types import SPOT_INTERRUPTION
from tests.aws.conftest import REGION, Moto

pytestmark = pytest.mark.slow      # starts a moto server on loopback and runs cfn-lint

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = ROOT / "controller" / "cloudprovider" / "aws"
TEMPLATE = ROOT / "manifests" / "aws" / "cloudformation.yaml"
POLICY = ROOT / "manifests" / "aws" / "controller-policy.json"
# Actions no client call names but AWS checks all the same, each for a reason the code cannot show.
IMPLIED = {
    "ec2:RunInstances": "CreateFleet launches through RunInstances, checked against the caller",
    "iam:PassRole": "a launch template's instance profile hands the node role to the instance",
    "iam:TagInstanceProfile": "CreateInstanceProfile with tags (an EC2NodeClass's profile) is checked against it too",
}
# The standalone policy's placeholders, and what CloudFormation substitutes for each.
PLACEHOLDERS = {"${AWS_PARTITION}": "${AWS::Partition}", "${AWS_ACCOUNT_ID}": "${AWS::AccountId}",
                "${AWS_REGION}": "${AWS::Region}", "${CLUSTER_NAME}": "${ClusterName}"}


def provider_calls() -> tuple[set[str], set[str]]:
    """(services, method names): the services the provider makes clients for (`x.client("ec2", ...)`), and every
    method it calls on anything, plus the operations it paginates (`get_paginator("describe_instances")`)."""
    services, methods = set(), set()
    for path in PROVIDER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            first = node.args[0] if node.args else None
            literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            if node.func.attr == "client" and literal:
                services.add(literal)
            elif node.func.attr == "get_paginator" and literal:
                methods.add(literal)
            else:
                methods.add(node.func.attr)
    return services, methods


def actions_called() -> set[str]:
    """The IAM action of every method the provider calls that is an operation of a service it has a client for:
    botocore names each operation (DescribeInstances) and its Python method (describe_instances); the IAM
    prefix is the service's signing name (pricing's endpoint is api.pricing, its actions pricing:...)."""
    services, methods = provider_calls()
    session = botocore.session.get_session()
    actions = set()
    for service in services:
        model = session.get_service_model(service)
        by_method = {botocore.xform_name(op): op for op in model.operation_names}
        actions |= {f"{model.signing_name}:{by_method[m]}" for m in methods if m in by_method}
    return actions


def statements(policy: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        yield statement


def allowed(policy: dict[str, Any]) -> set[str]:
    out = set()
    for statement in statements(policy):
        actions = statement["Action"]
        out |= {actions} if isinstance(actions, str) else set(actions)
    return out


def stack_resources() -> dict[str, Any]:
    return dict(yaml.safe_load(TEMPLATE.read_text())["Resources"])


def test_the_code_is_read_for_its_calls() -> None:
    """The derivation itself: every client the provider makes, and calls from each module that talks to AWS."""
    called = actions_called()
    assert provider_calls()[0] == {"ec2", "ssm", "sqs", "pricing", "eks", "iam"}
    assert {"ec2:CreateFleet", "ec2:DescribeInstanceTypes", "ssm:GetParameter", "pricing:GetProducts",
            "sqs:ReceiveMessage", "eks:DescribeCluster"} <= called
    assert not any(a.endswith(":GetPaginator") for a in called)


def test_the_controller_policy_allows_every_call_the_provider_makes_and_nothing_else() -> None:
    needed = actions_called() | set(IMPLIED)
    granted = allowed(json.loads(POLICY.read_text()))
    assert needed - granted == set(), "the controller policy lacks these actions"
    assert granted - needed == set(), "the controller policy grants actions the provider never uses"


def test_the_template_carries_the_standalone_policy() -> None:
    standalone = POLICY.read_text()
    for placeholder, substitution in PLACEHOLDERS.items():
        standalone = standalone.replace(placeholder, substitution)
    in_template = stack_resources()["KarpyControllerPolicy"]["Properties"]["PolicyDocument"]
    for statement in statements(in_template):
        if isinstance(statement["Resource"], dict):
            statement["Resource"] = statement["Resource"]["Fn::Sub"]
    assert in_template == json.loads(standalone)
    # the role the controller may pass is the node role the template makes
    node_role = stack_resources()["KarpenterNodeRole"]["Properties"]["RoleName"]["Fn::Sub"]
    (passes,) = [s for s in statements(in_template) if s["Action"] == "iam:PassRole"]
    assert passes["Resource"].endswith(":role/" + node_role)


def test_the_template_passes_cfn_lint() -> None:
    from cfnlint.api import lint_file  # type: ignore[import-untyped]  # cfn-lint ships no type information

    problems = lint_file(TEMPLATE)
    assert not problems, "\n".join(str(p) for p in problems)


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")   # moto skips the queue policy; AWS needs it
def test_deployed_to_moto_it_makes_the_roles_and_a_queue_eventbridge_fills(moto: Moto) -> None:
    aws: dict[str, Any] = dict(region_name=REGION, endpoint_url=moto.url)
    cloudformation = boto3.client("cloudformation", **aws)
    oidc = "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE"
    cloudformation.create_stack(StackName="karpy-prod", TemplateBody=TEMPLATE.read_text(),
                                Capabilities=["CAPABILITY_NAMED_IAM"],
                                Parameters=[{"ParameterKey": "ClusterName", "ParameterValue": "prod"},
                                            {"ParameterKey": "OIDCProvider", "ParameterValue": oidc}])
    (stack,) = cloudformation.describe_stacks(StackName="karpy-prod")["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    assert outputs["NodeInstanceProfile"] == "KarpenterNodeInstanceProfile-prod" and outputs["InterruptionQueue"] == "prod"

    iam = boto3.client("iam", **aws)
    (role,) = iam.get_instance_profile(InstanceProfileName="KarpenterNodeInstanceProfile-prod")["InstanceProfile"]["Roles"]
    assert role["Arn"] == outputs["NodeRoleArn"] and role["RoleName"] == "KarpenterNodeRole-prod"
    trust = iam.get_role(RoleName="KarpyControllerRole-prod")["Role"]["AssumeRolePolicyDocument"]
    irsa, pod_identity = trust["Statement"]
    assert irsa["Principal"]["Federated"].endswith(f":oidc-provider/{oidc}")
    assert irsa["Condition"]["StringEquals"] == {f"{oidc}:aud": "sts.amazonaws.com",
                                                 f"{oidc}:sub": "system:serviceaccount:karpenter:karpy"}
    assert pod_identity["Principal"] == {"Service": "pods.eks.amazonaws.com"}

    boto3.client("events", **aws).put_events(Entries=[{
        "Source": "aws.ec2", "DetailType": "EC2 Spot Instance Interruption Warning",
        "Detail": json.dumps({"instance-id": "i-0abc", "instance-action": "terminate"})}])
    queue = SqsQueue(boto3.client("sqs", **aws), outputs["InterruptionQueue"], wait_seconds=0)
    (notice,) = queue.receive()
    assert notice.interruption is not None and notice.interruption.kind == SPOT_INTERRUPTION
    assert notice.interruption.instance_ids == ("i-0abc",)
