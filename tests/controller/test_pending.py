"""The index of pods waiting for capacity, kept by the watch, always equals a full filter of the cache."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karpy.controller.provisioning.pending import PendingIndex, is_provisionable

NAMES = ["a", "b", "c"]
STATES = ["unschedulable", "fresh", "bound", "deleting", "running", "daemon"]


def pod(name: str, state: str, generation: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"{name}-{generation}"}
    spec: dict[str, Any] = {"containers": []}
    status: dict[str, Any] = {"phase": "Pending"}
    if state != "fresh":
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    if state == "bound":
        spec["nodeName"] = "n1"
    elif state == "deleting":
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elif state == "running":
        status["phase"] = "Running"
    elif state == "daemon":
        meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def gap(event: str, name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": event, "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": name, "uid": uid}}


# an event: a pod put (added or changed) or deleted, or a capacity-gap report written or deleted
events = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(NAMES), st.sampled_from(STATES), st.integers(0, 1)),
    st.tuples(st.just("pod-deleted"), st.sampled_from(NAMES), st.just(""), st.just(0)),
    st.tuples(st.just("gap"), st.sampled_from(NAMES), st.sampled_from(["g1", "g2"]), st.integers(0, 1)),
    st.tuples(st.just("gap-deleted"), st.sampled_from(NAMES), st.sampled_from(["g1", "g2"]), st.just(0)),
)


@pytest.mark.slow      # hypothesis replays 300 event sequences
@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=40))
def test_the_index_equals_a_full_filter_after_any_events(sequence: list[tuple[str, str, str, int]]) -> None:
    cache: dict[tuple[str, str], dict[str, Any]] = {}      # as the pod informer holds it
    gaps: dict[str, dict[str, Any]] = {}                   # as the gap-report informer holds it
    index = PendingIndex(lambda namespace, name: cache.get((namespace, name)))
    for kind, name, arg, generation in sequence:
        if kind == "pod":
            obj = pod(name, arg, generation)
            cache[("default", name)] = obj                   # the cache changes first, then the handlers hear
            index.on_pod("MODIFIED", obj)
        elif kind == "pod-deleted" and ("default", name) in cache:
            index.on_pod("DELETED", cache.pop(("default", name)))
        elif kind == "gap":
            obj = gap(f"{name}.{arg}", name, f"{name}-{generation}")
            gaps[obj["metadata"]["name"]] = obj
            index.on_gap_report("ADDED", obj)
        elif kind == "gap-deleted" and f"{name}.{arg}" in gaps:
            index.on_gap_report("DELETED", gaps.pop(f"{name}.{arg}"))
        reported = {g["involvedObject"]["uid"] for g in gaps.values()}
        expected = {p["metadata"]["name"] for p in cache.values() if is_provisionable(p, p["metadata"]["uid"] in reported)}
        assert {p["metadata"]["name"] for p in index.pods()} == expected
        # a batch takes its pods by uid: every uid ever seen finds exactly the pods that wait now, in their version
        seen = {f"{n}-{g}" for n in NAMES for g in (0, 1)}
        assert {(p["metadata"]["name"], p["metadata"]["uid"]) for p in index.by_uid(seen)} == \
            {(p["metadata"]["name"], p["metadata"]["uid"]) for p in cache.values() if p["metadata"]["name"] in expected}
        # each waiting pod's scheduling record is read from its cached version; no other uid has one
        waiting = {p["metadata"]["uid"]: p for p in cache.values() if p["metadata"]["name"] in expected}
        for uid in seen:
            record = index.record(uid)
            assert (record.raw if record is not None else None) is waiting.get(uid)


def test_a_pod_with_pod_affinity_is_read_with_its_batch_not_by_the_index() -> None:
    plain, spread = pod("a", "unschedulable", 0), pod("b", "unschedulable", 0)
    spread["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "b"}}}]}}
    cache = {("default", "a"): plain, ("default", "b"): spread}
    index = PendingIndex(lambda namespace, name: cache.get((namespace, name)))
    for obj in cache.values():
        index.on_pod("ADDED", obj)
    assert len(index) == 2
    record = index.record("a-0")
    assert record is not None and record.key == "default/a"
    assert index.record("b-0") is None          # its namespaceSelector terms read the namespaces' labels then
