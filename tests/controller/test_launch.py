"""The launch path and the provider seam: nodes carry an owner reference to their Provisioner, deleting the
Provisioner drains and deletes them through the termination finalizer, and both providers conform to the
CloudProvider Protocol without reaching into scheduling."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import boto3
import pytest

from karpy.apis import labels as wk
from karpy.apis import nodeclaim as api
from karpy.controller.cloudprovider.aws.provider import AwsCloudProvider
from karpy.controller.cloudprovider.fake import FakeCloudProvider
from karpy.controller.cloudprovider.types import CloudProvider
from karpy.controller.launch.launcher import Launcher
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.controller.termination.controller import Terminator
from karpy.kubeclient.raw import path_of
from tests.aws.conftest import SETTINGS, TEMPLATE
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, ROOT, Env

pytestmark = pytest.mark.slow      # starts the local cluster

CLAIMS = path_of(api.GROUP_VERSION, api.PLURAL)


def test_deleting_a_provisioner_drains_and_deletes_its_nodes_through_the_finalizer(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m", owner=("ReplicationController", "web")))
    launcher = Launcher(env.state, env.cloud, lambda: CATALOG)
    Provisioner(env.state, env.cloud, CATALOG, launcher=launcher).reconcile()
    (node,) = env.client.get(path_of("v1", "nodes"))["items"]
    uid = env.client.get(path_of("karpenter.sh/v1alpha5", "provisioners", name="default"))["metadata"]["uid"]
    assert node["metadata"]["ownerReferences"] == [{"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
                                                    "name": "default", "uid": uid, "blockOwnerDeletion": True}]
    env.client.delete(path_of("karpenter.sh/v1alpha5", "provisioners", name="default"))
    name = node["metadata"]["name"]
    env.settle(lambda: (env.state.nodes.get("", name) or {}).get("metadata", {}).get("deletionTimestamp"))
    terminator = Terminator(env.state, env.cloud)

    def gone() -> bool:
        terminator.reconcile()
        launcher.reconcile()
        return env.client.get(path_of("v1", "nodes"))["items"] == [] and env.client.get(CLAIMS)["items"] == []
    env.settle(gone, timeout=20)
    assert env.cloud.delete_calls[0] == f"fake://{name}" and env.cloud.list() == []
    left = [p for p in env.client.get(path_of("v1", "pods", "default"))["items"] if p["spec"].get("nodeName") == name
            and not p["metadata"].get("deletionTimestamp")]
    assert left == []                                     # drained (evicted), not left behind


def test_a_node_deleted_by_hand_takes_its_claim_with_it(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m", owner=("ReplicationController", "web")))
    launcher = Launcher(env.state, env.cloud, lambda: CATALOG)
    Provisioner(env.state, env.cloud, CATALOG, launcher=launcher).reconcile()
    (node,) = env.client.get(path_of("v1", "nodes"))["items"]
    env.state.delete_node(node["metadata"]["name"])
    terminator = Terminator(env.state, env.cloud)

    def gone() -> bool:
        terminator.reconcile()
        launcher.reconcile()
        return env.client.get(CLAIMS)["items"] == []
    env.settle(gone, timeout=20)
    assert env.cloud.list() == []


def test_both_providers_have_every_member_of_the_protocol_with_its_parameters() -> None:
    members = sorted({n for n in dir(CloudProvider) if not n.startswith("_")} | set(CloudProvider.__annotations__))
    assert {"create", "delete", "get", "list", "instance_types", "catalog", "interruption_queue", "name"} <= set(members)
    for cls in (FakeCloudProvider, AwsCloudProvider):
        for member in members:
            assert hasattr(cls, member), f"{cls.__name__} lacks {member}"
            if callable(getattr(CloudProvider, member, None)):
                want = list(inspect.signature(getattr(CloudProvider, member)).parameters)
                assert list(inspect.signature(getattr(cls, member)).parameters) == want, (cls.__name__, member)


def test_the_fake_provider_is_a_cloud_provider(env: Env) -> None:
    provider: CloudProvider = FakeCloudProvider(env.client, CATALOG)     # the type checker's view of it
    assert provider.catalog() is CATALOG and provider.interruption_queue("interruptions") is None


def test_the_aws_provider_is_a_cloud_provider() -> None:
    provider: CloudProvider = AwsCloudProvider(boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing"),
                                               SETTINGS, lambda _: TEMPLATE)     # the type checker's view of it
    assert provider.name == "aws"                     # and no call reached AWS: clients are made, not used


def test_providers_import_nothing_from_scheduling_and_write_no_kubernetes_objects() -> None:
    for path in sorted((ROOT / "controller" / "cloudprovider").rglob("*.py")):
        tree = ast.parse(Path(path).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.startswith("karpy.controller.provisioning") for m in imported), path
        calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "client"}
        assert not calls & {"create", "patch", "delete", "bind"}, (path, calls)
    assert wk.TERMINATION_FINALIZER not in (ROOT / "controller" / "cloudprovider" / "fake.py").read_text()
