"""What makes a pod a DaemonSet's: its controller ownerReference, as `kubectl drain` decides."""

from __future__ import annotations

from typing import Any

from karpy.apis.pods import owned_by_daemonset
from karpy.controller.provisioning.scheduling.pods import PodInfo


def pod_owned_by(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "ownerReferences": list(refs)},
            "spec": {"containers": [{"name": "c"}]}}


DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agents", "uid": "1"}
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "2"}


def test_a_pod_a_daemonset_controls_is_a_daemonset_pod_for_both_readers() -> None:
    p = pod_owned_by({**DS, "controller": True})
    assert owned_by_daemonset(p) and PodInfo.parse(p).is_daemon


def test_a_daemonset_that_owns_a_pod_without_controlling_it_does_not_make_it_a_daemonset_pod() -> None:
    p = pod_owned_by(DS, {**RS, "controller": True})
    assert not owned_by_daemonset(p) and not PodInfo.parse(p).is_daemon


def test_a_pod_without_owners_is_not_a_daemonset_pod() -> None:
    p = pod_owned_by()
    assert not owned_by_daemonset(p) and not PodInfo.parse(p).is_daemon
