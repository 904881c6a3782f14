"""The order of a claim's steps (claims.next_step), and when it turns on whether the claim's Node exists."""

from __future__ import annotations

import itertools
from typing import Any

from karpy.controller.launch.claims import Situation, Step, next_step, node_matters


def claim(*, deleting: bool = False, bind: bool = True, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "default-abcde"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"bind": bind}, "status": status}


def every_claim() -> list[dict[str, Any]]:
    out = []
    for deleting, bind, launched, created, bound in itertools.product([False, True], repeat=5):
        status: dict[str, Any] = {"providerID": "fake://default-abcde", "nodeName": "default-abcde"} if launched else {}
        out.append(claim(deleting=deleting, bind=bind, **status, **({"nodeCreated": True} if created else {}),
                         **({"podsBound": True} if bound else {})))
    return out


def test_the_steps_come_in_the_launch_order() -> None:
    assert next_step(claim(), Situation(node_exists=False)) is Step.CREATE
    launched: dict[str, Any] = {"providerID": "fake://n", "nodeName": "n"}
    assert next_step(claim(**launched), Situation(node_exists=False)) is Step.NODE
    assert next_step(claim(**launched, nodeCreated=True), Situation(node_exists=True)) is Step.BIND
    assert next_step(claim(**launched, nodeCreated=True, podsBound=True), Situation(node_exists=True)) is Step.DONE
    assert next_step(claim(bind=False, **launched, nodeCreated=True), Situation(node_exists=True)) is Step.DONE
    assert next_step(claim(**launched, nodeCreated=True), Situation(node_exists=False)) is Step.DELETE
    assert next_step(claim(deleting=True, **launched), Situation(node_exists=True)) is Step.FINALIZE


def test_the_node_is_read_only_where_the_next_step_turns_on_it() -> None:
    for c in every_claim():
        turns = next_step(c, Situation(node_exists=True)) is not next_step(c, Situation(node_exists=False))
        assert turns == node_matters(c), c         # so skipping the read elsewhere never changes the step
