"""The order of a claim's steps (claims.next_step), and when it turns on whether the claim's Node exists."""

from __future__ import annotations

import itertools
from typing import Any

from karpy.apis import launch_record as rec
from karpy.controller.launch.claims import Situation, Step, next_step, node_matters

NOW = "2026-01-01T00:00:00Z"


def claim(*, deleting: bool = False, bind: bool = True, launched: bool = False, **conditions: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "default-abcde",
                            "annotations": {rec.PODS: rec.pods_annotation([rec.PodReference("default", "web", "u1")], bind=bind)}}
    if deleting:
        meta["deletionTimestamp"] = NOW
    status: dict[str, Any] = {"providerID": "fake://default-abcde", "nodeName": "default-abcde"} if launched else {}
    status["conditions"] = rec.with_conditions({}, NOW, **conditions)
    return {"metadata": meta, "spec": {}, "status": status}


def every_claim() -> list[dict[str, Any]]:
    out = []
    for deleting, bind, launched, registered, bound in itertools.product([False, True], repeat=5):
        out.append(claim(deleting=deleting, bind=bind, launched=launched,
                         **{k: True for k, on in ((rec.REGISTERED, registered), (rec.PODS_BOUND, bound)) if on}))
    return out


def test_the_steps_come_in_the_launch_order() -> None:
    registered, bound = {rec.REGISTERED: True}, {rec.REGISTERED: True, rec.PODS_BOUND: True}
    assert next_step(claim(), Situation(node_exists=False)) is Step.CREATE
    assert next_step(claim(launched=True), Situation(node_exists=False)) is Step.NODE
    assert next_step(claim(launched=True, **registered), Situation(node_exists=True)) is Step.BIND
    assert next_step(claim(launched=True, **bound), Situation(node_exists=True)) is Step.DONE
    assert next_step(claim(bind=False, launched=True, **registered), Situation(node_exists=True)) is Step.DONE
    assert next_step(claim(launched=True, **bound), Situation(node_exists=True, node_initialized=True)) is Step.INITIALIZE
    assert next_step(claim(launched=True, **bound, Initialized=True), Situation(node_exists=True, node_initialized=True)) \
        is Step.DONE
    assert next_step(claim(launched=True, **registered), Situation(node_exists=False)) is Step.DELETE
    assert next_step(claim(deleting=True, launched=True), Situation(node_exists=True)) is Step.FINALIZE


def test_the_node_is_read_only_where_the_next_step_turns_on_it() -> None:
    for c in every_claim():
        for initialized in (False, True):
            turns = next_step(c, Situation(node_exists=True, node_initialized=initialized)) \
                is not next_step(c, Situation(node_exists=False))
            assert turns == node_matters(c), c     # so skipping the read elsewhere never changes the step


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    first = {"status": {"conditions": rec.with_conditions({}, NOW, Launched=True)}}
    again = rec.with_conditions(first, "2026-01-02T00:00:00Z", Launched=True, Registered=False)
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in again] == [
        ("Launched", "True", NOW), ("Registered", "False", "2026-01-02T00:00:00Z")]
