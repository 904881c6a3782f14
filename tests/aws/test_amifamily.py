"""EC2NodeClass parts that need no AWS: the SSM parameters an alias names, which image wins, its conditions, and the
--cluster-cidr flag AL2023 user data reads."""

from __future__ import annotations

import datetime as dt

import pytest

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.aws.amifamily import (
    AMISelectionError,
    alias_parameters,
    image_for,
    newest_per_requirements,
    parse_alias,
)
from karpy.controller.nodeclass.status import conditions
from karpy.main import main


def test_alias_parameter_names_are_karpenter_v1s() -> None:
    assert set(alias_parameters(parse_alias("al2@v20240807"), "1.30")) == {
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/amazon-eks-node-1.30-v20240807/image_id",
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/amazon-eks-arm64-node-1.30-v20240807/image_id",
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-gpu/amazon-eks-gpu-node-1.30-v20240807/image_id"}
    assert list(alias_parameters(parse_alias("windows2022@latest"), "1.30")) == [
        "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.30/image_id"]
    with pytest.raises(AMISelectionError, match="ubuntu@latest"):
        parse_alias("ubuntu@latest")


def test_newest_non_deprecated_image_wins_per_requirements() -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    amd = [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]}]
    images = [
        ({"ImageId": "ami-old", "Name": "a", "CreationDate": "2025-01-01T00:00:00.000Z"}, amd),
        ({"ImageId": "ami-new-deprecated", "Name": "b", "CreationDate": "2025-12-01T00:00:00.000Z",
          "DeprecationTime": "2025-12-15T00:00:00.000Z"}, amd),
        ({"ImageId": "ami-mid", "Name": "c", "CreationDate": "2025-06-01T00:00:00.000Z"}, amd),
        ({"ImageId": "ami-same-date-lower-name", "Name": "a", "CreationDate": "2025-06-01T00:00:00.000Z"}, amd),
    ]
    assert [a["id"] for a in newest_per_requirements(images, now)] == ["ami-mid"]


def test_an_instance_type_takes_the_first_image_whose_requirements_it_meets() -> None:
    amis = [{"id": "ami-gpu", "requirements": [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
                                               {"key": wk.AWS_INSTANCE_GPU_COUNT, "operator": "Exists"}]},
            {"id": "ami-std", "requirements": [{"key": wk.ARCH, "operator": "In", "values": ["amd64"]},
                                               {"key": wk.AWS_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"}]}]
    assert image_for(amis, {wk.ARCH: "amd64", wk.AWS_INSTANCE_GPU_COUNT: "1"}) == "ami-gpu"
    assert image_for(amis, {wk.ARCH: "amd64"}) == "ami-std"
    assert image_for(amis, {wk.ARCH: "arm64"}) is None


def test_conditions_keep_their_transition_time_while_their_status_stays() -> None:
    first = conditions([], {"SubnetsReady": None, "SecurityGroupsReady": "no security group matches",
                            "AMIsReady": None, "InstanceProfileReady": None}, generation=1, now="t1")
    by_type = {c["type"]: c for c in first}
    assert by_type["Ready"]["status"] == "False" and "SecurityGroupsReady=no security group matches" in by_type["Ready"]["message"]
    second = {c["type"]: c for c in conditions(first, dict.fromkeys(("SubnetsReady", "SecurityGroupsReady", "AMIsReady",
                                                                      "InstanceProfileReady")), generation=2, now="t2")}
    assert second["SubnetsReady"]["lastTransitionTime"] == "t1" and second["Ready"]["lastTransitionTime"] == "t2"
    assert second["Ready"]["status"] == "True" and second["Ready"]["observedGeneration"] == 2


def test_a_cluster_cidr_that_is_not_one_is_refused_by_flag(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    assert main(["controller", "--cloud-provider", "aws", "--cluster-name", "c", "--cluster-endpoint",
                 "https://api.example", "--cluster-cidr", "nonsense"]) == 2
    assert "--cluster-cidr 'nonsense': expected a CIDR such as 10.100.0.0/16" in capsys.readouterr().err
