"""What the extender decides from what karpy knows: removals, promises, packing, and the gap it reports."""

from __future__ import annotations

import datetime as dt

from karpy.apis.resources import Resources
from karpy.extender.decisions import Lifetimes, NodeFacts, PodNeeds, facts_of, filter_nodes, gap_reason, score_nodes
from tests.builders import node

NOW = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.timezone.utc)
LIVES = Lifetimes(after_empty=30, until_expired=3600)


def at(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def karpy_node(name: str, *, annotations: dict[str, str] | None = None, **kw: object) -> dict:
    n = node(name, provisioner="default", initialized=True, **kw)  # type: ignore[arg-type]
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


def test_names_alone_pass_and_score_in_the_middle() -> None:
    only_names = [NodeFacts(name="n1"), NodeFacts(name="n2")]
    assert filter_nodes(PodNeeds("default/web", Resources.of(cpu="1")), only_names)[0] == ["n1", "n2"]
    assert score_nodes(PodNeeds("default/web", Resources.of(cpu="1")), only_names) == {"n1": 5, "n2": 5}
