"""The mark consolidation leaves on a node its drained pods should go to: by owner, until a deadline."""

from __future__ import annotations

import datetime as dt

from karpy.apis.moving_in import MovingIn, by_owner, merged, owner_of, parse
from tests.builders import pod

NOW = dt.datetime(2026, 11, 25, 12, 0, 0, tzinfo=dt.timezone.utc)
LATER = NOW + dt.timedelta(minutes=5)


def test_a_mark_reads_back_as_written_and_anything_else_reads_as_none() -> None:
    mark = MovingIn({"uid-b": 2, "uid-a": 1}, LATER)
    assert mark.encode() == '{"until":"2026-11-25T12:05:00Z","owners":{"uid-a":1,"uid-b":2}}'
    assert parse(mark.encode()) == mark
    for bad in (None, "", "not json", "[]", '{"owners": {"u": 1}}', '{"until": "soon", "owners": {"u": 1}}',
                '{"until": "2026-11-25T12:05:00Z", "owners": {"u": 0, "v": true, "w": "2"}}', 42):
        assert parse(bad) is None, bad


def test_a_node_waits_for_an_owner_until_it_holds_the_planned_count_or_the_deadline_passes() -> None:
    mark = MovingIn({"web": 3, "api": 1}, LATER)
    assert mark.open_to({"web": 1}, NOW) == {"web", "api"}
    assert mark.open_to({"web": 3, "api": 1}, NOW) == frozenset()
    assert mark.open_to({"web": 4}, NOW) == {"api"}
    assert mark.open_to({}, LATER) == frozenset()


def test_moves_count_by_owner_under_the_replacements_launched_name_and_unowned_pods_are_left_out() -> None:
    pods = [pod("web-1", owner=("ReplicaSet", "web")), pod("web-2", owner=("ReplicaSet", "web")),
            pod("api-1", owner=("ReplicaSet", "api")), pod("bare", owner=None)]
    web, api = owner_of(pods[0]), owner_of(pods[2])
    assert web and api and web != api and owner_of(pods[3]) is None
    moves = [("default/web-1", "replacement-0"), ("default/web-2", "node-b"), ("default/api-1", "replacement-0"),
             ("default/bare", "node-b"), ("default/gone", "node-b")]
    moving = by_owner(moves, pods, renamed={"replacement-0": "default-abcde"})
    assert moving == {"default-abcde": {web: 1, api: 1}, "node-b": {web: 1}}


def test_a_second_action_adds_to_pods_still_on_their_way_and_a_lapsed_mark_is_started_afresh() -> None:
    first = merged(None, {"web": 2}, {"web": 1}, now=NOW, until=LATER)
    assert first == MovingIn({"web": 3}, LATER)
    # one of the first action's pods has not arrived yet (the node holds 2 of 3) when the second sends 2 more
    second = merged(first, {"web": 2}, {"web": 2, "api": 1}, now=NOW + dt.timedelta(seconds=30),
                    until=LATER + dt.timedelta(seconds=30))
    assert second == MovingIn({"web": 5, "api": 1}, LATER + dt.timedelta(seconds=30))
    lapsed = merged(first, {"web": 1}, {"api": 1}, now=LATER, until=LATER + dt.timedelta(minutes=5))
    assert lapsed == MovingIn({"api": 1}, LATER + dt.timedelta(minutes=5))
