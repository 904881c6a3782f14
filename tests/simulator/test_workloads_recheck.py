"""The local cluster's workload controllers act from a cache that can lag: an owner deleted a moment ago
may still be in it while its dependents, deleted with it, are already gone. As the real controllers do,
they reread the owner before creating what it controls, so a deleted Deployment does not come back as
an orphan ReplicaSet whose pods land on nodes until the garbage collector removes them."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.kubeclient.raw import RawClient, path_of
from karpy.simulator.workloads import Workloads
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts the local cluster

Obj = dict[str, Any]


class Cache:
    """What a lagging informer holds: the objects as they were, whatever the API server has now."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects

    def items(self) -> list[Obj]:
        return list(self.objects)


def caches(**held: list[Obj]) -> dict[str, Any]:
    plurals = ("deployments", "replicasets", "statefulsets", "jobs", "daemonsets", "pods", "nodes", "poddisruptionbudgets")
    return {plural: Cache(held.get(plural, [])) for plural in plurals}


def deployment(name: str) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "pause"}]}}}}


def replicaset(name: str, owner: Obj | None = None) -> Obj:
    rs = deployment(name) | {"kind": "ReplicaSet"}
    if owner is not None:
        rs["metadata"] = {**rs["metadata"], "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                                 "name": owner["metadata"]["name"],
                                                                 "uid": owner["metadata"]["uid"], "controller": True}]}
    return rs


def children(client: RawClient, plural: str, app: str) -> list[Obj]:
    group = "v1" if plural == "pods" else "apps/v1"
    items: list[Obj] = client.get(path_of(group, plural, "default"))["items"]
    return [o for o in items if (o["metadata"].get("labels") or {}).get("app") == app]


def deleted(client: RawClient, plural: str, obj: Obj) -> Obj:
    """Create `obj` and delete it at once: the object as a lagging cache still holds it."""
    created: Obj = client.create(path_of("apps/v1", plural, "default"), obj)
    client.delete(path_of("apps/v1", plural, "default", obj["metadata"]["name"]))
    return created


def test_a_deleted_deployment_still_in_the_cache_gets_no_new_replicaset(kube: Kube) -> None:
    client = RawClient(kube.api_client)
    d = deleted(client, "deployments", deployment("recheck-d"))
    Workloads(client, caches(deployments=[d])).reconcile()
    assert children(client, "replicasets", "recheck-d") == []


def test_a_deployment_the_api_server_has_gets_its_replicaset(kube: Kube) -> None:
    client = RawClient(kube.api_client)
    d = client.create(path_of("apps/v1", "deployments", "default"), deployment("recheck-live"))
    Workloads(client, caches(deployments=[d])).reconcile()
    assert [rs["metadata"]["ownerReferences"][0]["uid"] for rs in children(client, "replicasets", "recheck-live")] \
        == [d["metadata"]["uid"]]


def test_a_deleted_replicaset_still_in_the_cache_gets_no_new_pods(kube: Kube) -> None:
    client = RawClient(kube.api_client)
    rs = deleted(client, "replicasets", replicaset("recheck-rs"))
    Workloads(client, caches(replicasets=[rs])).reconcile()
    assert children(client, "pods", "recheck-rs") == []


def test_a_replicaset_recreated_under_the_same_name_is_not_taken_for_the_cached_one(kube: Kube) -> None:
    client = RawClient(kube.api_client)
    old = deleted(client, "replicasets", replicaset("recheck-same"))
    client.create(path_of("apps/v1", "replicasets", "default"), replicaset("recheck-same") | {"spec": {
        **replicaset("recheck-same")["spec"], "replicas": 0}})
    Workloads(client, caches(replicasets=[old])).reconcile()
    assert children(client, "pods", "recheck-same") == []
