"""Garbage collection: instances that no NodeClaim or Node accounts for are terminated after a grace period;
claims whose node never registered are given up after the registration timeout, their instance terminated."""

from __future__ import annotations

import datetime as dt

import pytest

from karpy.apis import nodeclaim as api
from karpy.apis.requirements import Requirements
from karpy.controller.cloudprovider.types import Instance, NodeRequest
from karpy.controller.launch.launcher import Launcher
from karpy.controller.node.garbagecollection import LAUNCH_GRACE_SECONDS, GarbageCollection, orphans
from karpy.controller.provisioning.provisioner import Provisioner
from karpy.kubeclient.raw import path_of
from tests.builders import provisioner, unschedulable_pod
from tests.controller.conftest import CATALOG, Env
from tests.controller.test_faults import kill_at

pytestmark = pytest.mark.slow      # starts the local cluster


def test_an_instance_is_an_orphan_only_when_nothing_accounts_for_it_for_the_grace_period() -> None:
    a, b = Instance("fake://a", "a", {}, claim_name="a"), Instance("fake://b", "b", {}, claim_name="b")
    seen = {"fake://b": 100.0}
    none: set[str] = set()
    assert orphans([a, b], claims={"a"}, provider_ids=none, node_names=none, first_seen=seen,
                   now=100.0 + LAUNCH_GRACE_SECONDS - 1) == []
    assert orphans([a, b], claims={"a"}, provider_ids=none, node_names=none, first_seen=seen,
                   now=100.0 + LAUNCH_GRACE_SECONDS) == ["fake://b"]
    assert orphans([a, b], claims=none, provider_ids={"fake://b"}, node_names={"a"}, first_seen=seen, now=1e9) == []


def test_an_instance_without_a_claim_or_node_is_terminated(env: Env) -> None:
    loose = env.cloud.create(NodeRequest(node_name="nobody", provisioner="default", requirements=Requirements(),
                                         instance_type_options=tuple(CATALOG.instance_types())))
    gc = GarbageCollection(env.state, env.cloud, Launcher(env.state, env.cloud, lambda: CATALOG), grace_seconds=0)
    gc.reconcile()
    assert env.cloud.delete_calls == [loose.provider_id] and env.cloud.list() == []


def test_a_launched_node_with_its_claim_is_kept(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m"))
    launcher = Launcher(env.state, env.cloud, lambda: CATALOG)
    Provisioner(env.state, env.cloud, CATALOG, launcher=launcher).reconcile()
    GarbageCollection(env.state, env.cloud, launcher, grace_seconds=0).reconcile()
    assert env.cloud.delete_calls == [] and len(env.cloud.list()) == 1


def test_a_claim_whose_instance_never_appears_is_removed_after_the_registration_timeout(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m"))

    dies = kill_at("before-create")
    with pytest.raises(SystemExit):
        Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG, fault=dies)).reconcile()
    claims = path_of(api.GROUP_VERSION, api.PLURAL)
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=16)
    gc = GarbageCollection(env.state, env.cloud, Launcher(env.state, env.cloud, lambda: CATALOG, fault=dies), now=lambda: later)
    gc.reconcile()
    assert env.client.get(claims)["items"] == []
    assert env.cloud.create_calls == [] and env.cloud.list() == []


def test_a_claim_younger_than_the_registration_timeout_is_kept(env: Env) -> None:
    env.apply(provisioner("default"), unschedulable_pod("web-0", cpu="500m"))

    dies = kill_at("before-create")
    with pytest.raises(SystemExit):
        Provisioner(env.state, env.cloud, CATALOG, launcher=Launcher(env.state, env.cloud, lambda: CATALOG, fault=dies)).reconcile()
    GarbageCollection(env.state, env.cloud, Launcher(env.state, env.cloud, lambda: CATALOG, fault=dies)).reconcile()
    assert len(env.client.get(path_of(api.GROUP_VERSION, api.PLURAL))["items"]) == 1
