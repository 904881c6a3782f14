"""What the extender decides from what karpy knows: removals, promises, packing, and the gap it reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

from karpy.apis.resources import Resources
from karpy.extender.decisions import (
    Lifetimes,
    NodeFacts,
    PodNeeds,
    facts_of,
    filter_nodes,
    gap_reason,
    score_nodes,
    shape_of,
    steady_until,
)
from tests.builders import node

NOW = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.timezone.utc)
LIVES = Lifetimes(after_empty=30, until_expired=3600)


def at(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def karpy_node(name: str, *, annotations: dict[str, str] | None = None, **kw: Any) -> dict:
    n = node(name, provisioner="default", initialized=True, **kw)
    n["metadata"]["annotations"] = dict(annotations or {})
    return n


def facts(n: dict, *, used: str = "0", pending: dict[str, Resources] | None = None, lives: Lifetimes | None = LIVES) -> NodeFacts:
    return facts_of(n, used=Resources.of(cpu=used), pending=pending or {}, lifetimes=lives, now=NOW)


def test_nodes_karpy_removes_soon_fail_with_the_reason() -> None:
    nodes = [
        facts(karpy_node("draining", deleting=True)),
        facts(karpy_node("empty-due", annotations={"karpenter.sh/emptiness-timestamp": at(25)})),
        facts(karpy_node("empty-later", annotations={"karpenter.sh/emptiness-timestamp": at(-1000)})),
        # 10 s left: a pod landing there makes it busy again before emptiness acts
        facts(karpy_node("empty-soon", annotations={"karpenter.sh/emptiness-timestamp": at(20)})),
        facts(karpy_node("expiring", created=at(3590))),
        facts(karpy_node("young", created=at(60))),
        facts(node("not-karpy", created=at(10**6))),
    ]
    passed, failed, kinds = filter_nodes(PodNeeds("default/web", Resources.of(cpu="100m")), nodes)
    assert passed == ["empty-later", "empty-soon", "young", "not-karpy"]
    assert failed["draining"] == "node is being deleted (cordoned and draining)"
    assert "ttlSecondsAfterEmpty" in failed["empty-due"] and "5s" in failed["empty-due"]
    assert "ttlSecondsUntilExpired" in failed["expiring"] and "10s" in failed["expiring"]
    assert gap_reason(3, kinds) == "0/3 nodes are available: 3 node(s) are being removed by karpy."


def test_without_the_provisioners_ttls_only_deletion_counts() -> None:
    n = karpy_node("empty", annotations={"karpenter.sh/emptiness-timestamp": at(10**5)})
    assert filter_nodes(PodNeeds("default/web", Resources()), [facts(n, lives=None)])[0] == ["empty"]


def test_capacity_promised_to_other_pods_is_kept_for_them() -> None:
    launching = karpy_node("launching", annotations={"karpy.dev/launched-for": "default/a,default/b"},
                           allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"})
    pending = {"default/a": Resources.of(cpu="2"), "default/b": Resources.of(cpu="1500m")}
    f = facts(launching, pending=pending)
    assert filter_nodes(PodNeeds("default/a", Resources.of(cpu="2")), [f])[0] == ["launching"]       # its own node
    assert filter_nodes(PodNeeds("default/small", Resources.of(cpu="500m")), [f])[0] == ["launching"]  # fits beside both
    passed, failed, kinds = filter_nodes(PodNeeds("default/big", Resources.of(cpu="1")), [f])
    assert passed == [] and "promised to 2 pod(s)" in failed["launching"]
    assert "have their free capacity promised" in gap_reason(1, kinds)
    # once a pod is bound it is no longer pending: its promise is kept by the binding itself
    bound = facts(launching, used="2", pending={"default/b": Resources.of(cpu="1500m")})
    assert filter_nodes(PodNeeds("default/big", Resources.of(cpu="500m")), [bound])[0] == ["launching"]


def test_scores_put_the_promised_node_first_then_tighter_packing_and_near_expiry_last() -> None:
    big = {"cpu": "8", "memory": "32Gi", "pods": "50"}
    nodes = [
        facts(karpy_node("promised", annotations={"karpy.dev/launched-for": "default/web"}, allocatable=big),
              pending={"default/web": Resources.of(cpu="1")}),
        facts(karpy_node("busy", allocatable=big, created=at(60)), used="6"),
        facts(karpy_node("idle", allocatable=big, created=at(60)), used="0"),
        facts(karpy_node("old", allocatable=big, created=at(3300)), used="6"),      # 300 s left of 3600
    ]
    scores = score_nodes(PodNeeds("default/web", Resources.of(cpu="1", memory="1Gi")), nodes)
    assert scores["promised"] == 10
    assert scores["busy"] > scores["idle"] >= 1
    assert scores["old"] == 0
    assert all(0 <= s <= 10 for s in scores.values())


def test_a_pod_goes_first_to_the_nodes_waiting_for_its_owners_pods_until_they_hold_them_or_the_mark_lapses() -> None:
    big = {"cpu": "8", "memory": "32Gi", "pods": "50"}
    mark = '{"until": "2026-11-23T12:05:00Z", "owners": {"web-uid": 2}}'
    waiting = karpy_node("waiting", annotations={"karpy.dev/moving-in": mark}, allocatable=big, created=at(60))
    others = [facts(karpy_node("busy", allocatable=big, created=at(60)), used="6"),
              facts(node("plain", allocatable=big), lives=None)]
    web = PodNeeds("default/web-new", Resources.of(cpu="1"), owner="web-uid")

    def scores(held: dict[str, int], now: dt.datetime = NOW) -> dict[str, int]:
        waiting_facts = facts_of(waiting, used=Resources.of(cpu="1"), pending={}, lifetimes=LIVES, now=now, held=held)
        return score_nodes(web, [waiting_facts, *others])

    assert scores({"web-uid": 1}) == {"waiting": 10, "busy": 0, "plain": 0}
    unsteered = score_nodes(PodNeeds("default/api", Resources.of(cpu="1"), owner="api-uid"),
                            [facts_of(waiting, used=Resources.of(cpu="1"), pending={}, lifetimes=LIVES, now=NOW,
                                      held={"web-uid": 1}), *others])
    assert unsteered["busy"] > unsteered["waiting"] >= 1              # other owners' pods: scored as always
    assert scores({"web-uid": 2})["busy"] > scores({"web-uid": 2})["waiting"] >= 1     # it holds them all now
    lapsed = scores({"web-uid": 1}, now=NOW + dt.timedelta(minutes=5))
    assert lapsed["busy"] > lapsed["waiting"] >= 1
    waiting_facts = facts_of(waiting, used=Resources.of(cpu="1"), pending={}, lifetimes=LIVES, now=NOW, held={})
    assert steady_until(shape_of(waiting), waiting_facts, lifetimes=LIVES, now=NOW) == NOW     # never kept while waiting


def test_names_alone_pass_and_score_in_the_middle() -> None:
    only_names = [NodeFacts(name="n1"), NodeFacts(name="n2")]
    assert filter_nodes(PodNeeds("default/web", Resources.of(cpu="1")), only_names)[0] == ["n1", "n2"]
    assert score_nodes(PodNeeds("default/web", Resources.of(cpu="1")), only_names) == {"n1": 5, "n2": 5}


def needs(**spec: Any) -> PodNeeds:
    from karpy.extender.decisions import needs_of
    from tests.builders import pod

    return needs_of(pod("web", **spec))


def judge(p: PodNeeds, *nodes: dict, used: dict[str, dict[str, str]] | None = None) -> tuple[list[str], dict[str, str], str]:
    node_facts = [facts_of(n, used=Resources.of(**(used or {}).get(n["metadata"]["name"], {})) if used else None,
                           pending={}, lifetimes=None, now=NOW) for n in nodes]
    passed, failed, kinds = filter_nodes(p, node_facts)
    return passed, failed, gap_reason(len(failed), kinds)


def test_a_node_whose_allocatable_is_below_the_request_fails_with_insufficient_cpu() -> None:
    small = node("small", allocatable={"cpu": "1930m", "memory": "7Gi", "pods": "29"})
    passed, failed, reason = judge(needs(cpu="3"), small)
    assert passed == [] and failed == {"small": "Insufficient cpu"}
    assert reason == "0/1 nodes are available: 1 Insufficient cpu."
    assert judge(needs(cpu="1930m"), small)[0] == ["small"]


def test_requests_of_pods_bound_there_are_subtracted_from_allocatable() -> None:
    n = node("n", allocatable={"cpu": "4", "memory": "8Gi", "pods": "3"})
    assert judge(needs(cpu="2"), n, used={"n": {"cpu": "3"}})[1] == {"n": "Insufficient cpu"}
    assert judge(needs(cpu="1"), n, used={"n": {"cpu": "3"}})[0] == ["n"]
    assert judge(needs(cpu="1", memory="1Gi"), n, used={"n": {"cpu": "3", "memory": "7500Mi"}})[1] == {"n": "Insufficient memory"}
    full = judge(needs(cpu="100m"), n, used={"n": {"pods": "3"}})                    # every pod slot taken
    assert full[1] == {"n": "Insufficient pods"}
    gpu = judge(needs(cpu="100m", requests={"nvidia.com/gpu": "1"}), n)              # a resource the node lacks
    assert gpu[1] == {"n": "Insufficient nvidia.com/gpu"}


def test_untolerated_noschedule_and_noexecute_taints_fail_and_prefer_noschedule_does_not() -> None:
    tainted = node("gpu", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    evicting = node("bad", taints=[{"key": "broken", "effect": "NoExecute"}])
    soft = node("soft", taints=[{"key": "spare", "effect": "PreferNoSchedule"}])
    passed, failed, reason = judge(needs(), tainted, evicting, soft)
    assert passed == ["soft"] and set(failed) == {"gpu", "bad"}
    assert reason == ("0/2 nodes are available: 1 node(s) had untolerated taint {broken}, "
                      "1 node(s) had untolerated taint {dedicated: gpu}.")
    tolerant = needs(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                                  {"operator": "Exists", "effect": "NoExecute"}])
    assert judge(tolerant, tainted, evicting, soft)[0] == ["gpu", "bad", "soft"]


def test_cordoned_nodes_fail_unless_the_pod_tolerates_the_unschedulable_taint() -> None:
    cordoned = node("cordoned", unschedulable=True)
    assert judge(needs(), cordoned)[2] == "0/1 nodes are available: 1 node(s) were unschedulable."
    tolerant = needs(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}])
    assert judge(tolerant, cordoned)[0] == ["cordoned"]


def test_node_selector_and_required_node_affinity_are_judged_against_the_nodes_labels() -> None:
    a = node("a", zone="us-east-1a", labels={"team": "web"})
    b = node("b", zone="us-east-1b")
    assert judge(needs(nodeSelector={"team": "web"}), a, b)[0] == ["a"]
    assert judge(needs(nodeSelector={"team": "web"}), b)[2] == \
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
    ]}}}
    assert judge(needs(affinity=affinity), a, b, node("c", zone="us-east-1c"))[0] == ["a", "b"]
    not_in = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}]}}}
    assert judge(needs(affinity=not_in), a, b)[0] == ["b"]
    preferred_only = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["x"]}]}}]}}
    assert judge(needs(affinity=preferred_only), a, b)[0] == ["a", "b"]


def test_scores_and_promises_stay_exact_with_amounts_past_float_range() -> None:
    vast = Resources.of(cpu="4", memory="1e400")
    roomy = NodeFacts(name="roomy", allocatable=vast, used=Resources.of(memory="1e399"),
                      promised={"default/other": Resources.of(memory="1e399")})
    full = NodeFacts(name="full", allocatable=vast, used=Resources.of(cpu="4", memory="1e400"))
    ask = Resources.of(cpu="1", memory="1e399")
    scores = score_nodes(PodNeeds("default/p", ask), [roomy, full])
    assert 1 <= scores["roomy"] < scores["full"] == 9
    passed, _, _ = filter_nodes(PodNeeds("default/p", ask), [roomy])
    assert passed == ["roomy"]
    passed, failed, _ = filter_nodes(PodNeeds("default/p", Resources.of(memory="9e399")), [roomy])
    assert passed == [] and "roomy" in failed


def test_facts_kept_between_calls_change_only_at_the_moment_steady_until_names() -> None:
    """A node's facts are reused until steady_until; at every second before it they are what facts_of would say."""
    cases = [
        karpy_node("expiring-later", created=at(3000)),                                   # near expiry, then removal
        karpy_node("empty", created=at(60), annotations={"karpenter.sh/emptiness-timestamp": at(0)}),
        karpy_node("young", created=at(60)),
        karpy_node("draining", deleting=True),
        node("not-karpy", created=at(10**6)),
    ]
    for n in cases:
        shape = shape_of(n)
        kept = facts_of(shape, used=None, pending={}, lifetimes=LIVES, now=NOW)
        until = steady_until(shape, kept, lifetimes=LIVES, now=NOW)
        assert until > NOW
        for second in range(0, 4000, 7):
            moment = NOW + dt.timedelta(seconds=second)
            fresh = facts_of(shape, used=None, pending={}, lifetimes=LIVES, now=moment)
            if moment < until:
                assert fresh == kept, (n["metadata"]["name"], second)
            else:
                assert fresh != kept, (n["metadata"]["name"], second)   # it changed at the moment named, not later
                break


def test_facts_that_follow_pending_pods_or_count_down_are_never_kept() -> None:
    launching = shape_of(karpy_node("launching", annotations={"karpy.dev/launched-for": "default/a"}))
    due = shape_of(karpy_node("empty-due", annotations={"karpenter.sh/emptiness-timestamp": at(28)}))
    for shape in (launching, due):
        f = facts_of(shape, used=None, pending={}, lifetimes=LIVES, now=NOW)
        assert steady_until(shape, f, lifetimes=LIVES, now=NOW) == NOW


def test_a_ttl_past_the_calendar_never_turns() -> None:
    shape = shape_of(karpy_node("forever", created=at(60)))
    lives = Lifetimes(after_empty=None, until_expired=10**20)
    f = facts_of(shape, used=None, pending={}, lifetimes=lives, now=NOW)
    assert steady_until(shape, f, lifetimes=lives, now=NOW) == dt.datetime.max.replace(tzinfo=dt.timezone.utc)
