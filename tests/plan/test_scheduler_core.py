"""The scheduling core called directly, without the command line: its pure pieces and invariants."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpy.apis.provisioner_validation import decode_provisioner
from karpy.apis.requirements import Requirement, Requirements
from karpy.controller.cloudprovider.catalog import built_in, catalog_from_document, fake_catalog
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.reasons import Why
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot, Scheduler, node_name
from karpy.controller.provisioning.scheduling.topology import Topology
from tests.builders import catalog, instance_type, node, pod, provisioner


def solve(*pods: dict[str, Any], provisioners: list[dict[str, Any]] | None = None, cat: Any = None) -> Any:
    provs = [decode_provisioner(p)[0] for p in (provisioners or [provisioner("default")])]
    snapshot = ClusterSnapshot(provs, cat or fake_catalog(10), pods=[PodInfo.parse(p) for p in pods])  # type: ignore[arg-type]  # valid manifests: no None
    return Scheduler(snapshot).solve()


@pytest.mark.slow      # plans large batches (seconds each)
def test_every_pending_pod_is_placed_exactly_once_or_reported() -> None:
    pods = [pod(f"p-{i}", cpu=f"{100 * (i % 7 + 1)}m", memory=f"{64 * (i % 5 + 1)}Mi") for i in range(200)]
    pods.append(pod("too-big", cpu="64"))
    results = solve(*pods)
    placed = [p.key for n in results.new_nodes for p in n.pods]
    assert len(placed) == len(set(placed)) == 200
    assert set(results.unschedulable) == {"default/too-big"}


@pytest.mark.slow      # plans large batches (seconds each)
def test_no_new_node_is_over_committed() -> None:
    pods = [pod(f"p-{i}", cpu=f"{137 * (i % 11 + 1)}m", memory=f"{300 * (i % 3 + 1)}Mi") for i in range(300)]
    for n in solve(*pods).new_nodes:
        used: dict[str, int] = {}
        for p in n.pods:
            for name, amount in p.requests.items():
                used[name] = used.get(name, 0) + amount
        assert all(amount <= n.instance_type.allocatable.get(name, 0) for name, amount in used.items()), n.name


def test_the_chosen_offering_is_the_cheapest_of_the_options() -> None:
    for n in solve(*[pod(f"p-{i}", cpu="900m") for i in range(30)]).new_nodes:
        first = n.options[0]
        assert n.instance_type is first
        assert n.offering.price_per_hour == min(o.price_per_hour for o in first.offerings if o.available)


def test_unavailable_offerings_are_never_chosen() -> None:
    cat = catalog_from_document(catalog(
        instance_type("cheap", price=0.01, zones=("z1",)) | {"offerings": [{"zone": "z1", "price": 0.01, "available": False}]},
        instance_type("dear", price=0.5, zones=("z1",)),
    ))
    results = solve(pod("p"), cat=cat)
    assert results.new_nodes[0].instance_type.name == "dear"


def test_node_names_are_stable_and_look_like_karpenters() -> None:
    assert node_name("default", 0) == node_name("default", 0)
    assert node_name("default", 0) != node_name("default", 1)
    assert node_name("default", 0).startswith("default-") and len(node_name("default", 0)) == len("default-") + 5


def test_topology_picks_the_least_crowded_zone() -> None:
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "w"}}}]
    p = PodInfo.parse(pod("w", labels={"app": "w"}, topologySpreadConstraints=spread))
    topology = Topology({"topology.kubernetes.io/zone": {"a", "b", "c"}})
    topology.register(p)
    topology.record(p, {"topology.kubernetes.io/zone": "a"})
    topology.record(p, {"topology.kubernetes.io/zone": "b"})
    domains, why = topology.domain_for(p, Requirements(), hostname="n1", existing_labels=None)
    assert why is None and domains == {"topology.kubernetes.io/zone": "c"}
    pinned = Requirements([Requirement.of("topology.kubernetes.io/zone", "In", ["a"])])
    domains, why = topology.domain_for(p, pinned, hostname="n1", existing_labels=None)
    assert domains is None and "maxSkew=1" in str(why)


def spreading_pods_and_guard(names: list[str], zones: set[str]) -> tuple[Topology, list[PodInfo], PodInfo]:
    """Pods `names` (app=w) spread over zones with maxSkew 1, and a guard whose anti-affinity keeps app=w pods out
    of its zone, all registered in a topology of `zones`."""
    zone = "topology.kubernetes.io/zone"
    spread = [{"maxSkew": 1, "topologyKey": zone, "labelSelector": {"matchLabels": {"app": "w"}}}]
    keep_away = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "w"}}, "topologyKey": zone}]}}
    spreading = [PodInfo.parse(pod(name, labels={"app": "w"}, topologySpreadConstraints=spread)) for name in names]
    guard = PodInfo.parse(pod("guard", labels={"app": "guard"}, affinity=keep_away))
    topology = Topology({zone: zones})
    for p in spreading + [guard]:
        topology.register(p)
    return topology, spreading, guard


def test_a_moving_pod_is_asked_only_about_others_anti_affinity_not_its_own_spread() -> None:
    zone = "topology.kubernetes.io/zone"
    topology, (w,), guard = spreading_pods_and_guard(["w"], {"a", "b"})
    topology.record(w, {zone: "a"})
    topology.record(w, {zone: "a"})
    in_a = Requirements([Requirement.of(zone, "In", ["a"])])
    assert topology.domain_for(w, in_a, hostname="n1", existing_labels=None)[0] is None        # its spread: skew 2
    assert topology.domain_for(w, in_a, hostname="n1", existing_labels=None, own=False) == ({}, None)
    topology.record(guard, {zone: "a"})
    chosen, why = topology.domain_for(w, in_a, hostname="n1", existing_labels=None, own=False)
    assert chosen is None and "anti-affinity" in str(why)                                      # the guard's, still


def test_forgetting_a_pod_takes_back_exactly_what_recording_it_counted() -> None:
    zone = "topology.kubernetes.io/zone"
    topology, (w, twin), guard = spreading_pods_and_guard(["w", "w2"], {"a", "b", "c"})
    in_a, in_b, in_c = (Requirements([Requirement.of(zone, "In", [z])]) for z in ("a", "b", "c"))
    topology.record(twin, {zone: "a"})
    topology.record(w, {zone: "b"})
    topology.record(guard, {}, Requirements([Requirement.of(zone, "In", ["b", "c"])]))   # owns both zones it may take
    assert topology.domain_for(w, in_a, hostname="n1", existing_labels=None)[0] is None   # a and b hold one, c none
    assert topology.domain_for(w, in_c, hostname="n1", existing_labels=None, own=False)[0] is None    # the guard's
    stamp = topology.widenings(w)
    topology.forget(twin)
    topology.forget(guard)
    assert topology.widenings(w) > stamp                  # rooms that turned w away must ask again
    assert topology.domain_for(w, in_a, hostname="n1", existing_labels=None) == ({zone: "a"}, None)
    assert topology.domain_for(w, in_b, hostname="n1", existing_labels=None)[0] is None   # w's own count stays
    assert topology.domain_for(w, in_c, hostname="n1", existing_labels=None, own=False) == ({}, None)
    topology.forget(twin)                                 # nothing left to take back
    assert topology.domain_for(w, in_a, hostname="n1", existing_labels=None) == ({zone: "a"}, None)


def test_aws_catalog_specialises_per_kubelet_configuration() -> None:
    aws = built_in("aws")
    prov = decode_provisioner(provisioner("default", kubeletConfiguration={"maxPods": 10, "systemReserved": {"cpu": "1"}}))[0]
    assert prov is not None
    plain = {t.name: t for t in aws.instance_types()}["m5.large"]
    tuned = {t.name: t for t in aws.instance_types(prov.spec.kubelet_configuration)}["m5.large"]
    assert plain.capacity["pods"] == 29_000 and tuned.capacity["pods"] == 10_000
    assert tuned.overhead["cpu"] == plain.overhead["cpu"] + 900           # system-reserved 1 instead of 100m
    assert tuned.overhead["memory"] < plain.overhead["memory"]            # fewer pods, less kube-reserved memory


def test_solve_leaves_the_pods_it_is_given_unchanged() -> None:
    # every soft constraint here is unsatisfiable, so the scheduler relaxes each of them before placing the pod
    soft = pod("soft", cpu="500m")
    soft["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["nowhere"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["plan9"]}]}}]}}
    soft["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "example.com/nowhere",
                                                  "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}]
    small = node("small", allocatable={"cpu": "1", "memory": "1Gi", "pods": "10"}, provisioner="default",
                 instance_type="fake-1", initialized=True)
    pods = [PodInfo.parse(soft), PodInfo.parse(pod("plain", cpu="250m")),
            PodInfo.parse(pod("running", cpu="900m", node_name="small", phase="Running"))]
    before = [repr(p) for p in pods]
    requirements_before = [str(p.requirements) for p in pods]
    raw_before = copy.deepcopy([small] + [p.raw for p in pods])
    snapshot = ClusterSnapshot([decode_provisioner(provisioner("default"))[0]], fake_catalog(10), nodes=[small],  # type: ignore[list-item]
                               pods=pods)
    results = Scheduler(snapshot).solve()
    assert sorted(p.key for n in results.new_nodes for p in n.pods) == ["default/plain", "default/soft"]
    assert [small] + [p.raw for p in pods] == raw_before
    placed_soft = next(p for n in results.new_nodes for p in n.pods if p.name == "soft")
    assert placed_soft.relaxations                      # the plan carries the relaxed pod ...
    assert [repr(p) for p in pods] == before            # ... and the pods given are as they were
    assert [str(p.requirements) for p in pods] == requirements_before
    assert list(snapshot.pods) == pods


def test_reasons_are_typed_and_keep_their_words() -> None:
    tainted = provisioner("tainted", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    results = solve(pod("too-big", cpu="64"), pod("zoned", nodeSelector={"topology.kubernetes.io/zone": "nowhere"}),
                    pod("labelled", nodeSelector={"example.com/team": "a"}),
                    provisioners=[provisioner("default"), tainted])
    too_big, zoned = results.unschedulable["default/too-big"], results.unschedulable["default/zoned"]
    assert too_big.kind is Why.PROVISIONERS and zoned.kind is Why.PROVISIONERS
    assert [p.kind for p in too_big.parts] == [Why.NO_INSTANCE_TYPE, Why.TAINT]
    assert str(too_big) == ("provisioner default: no instance type satisfies cpu=64; "
                            "provisioner tainted: did not tolerate taint dedicated=gpu:NoSchedule")
    assert [p.kind for p in zoned.parts] == [Why.NO_INSTANCE_TYPE, Why.TAINT]
    assert str(zoned.parts[0]) == "provisioner default: no instance type satisfies topology.kubernetes.io/zone In [nowhere]"
    assert [p.kind for p in results.unschedulable["default/labelled"].parts] == [Why.REQUIREMENTS, Why.TAINT]
    alone = solve(pod("too-big", cpu="64")).unschedulable["default/too-big"]
    assert alone.kind is Why.NO_INSTANCE_TYPE and str(alone) == "no instance type satisfies cpu=64"


def test_a_group_widens_only_when_a_domain_may_come_to_take_pods_it_turned_away() -> None:
    zone = "topology.kubernetes.io/zone"
    spread = [{"maxSkew": 1, "topologyKey": zone, "labelSelector": {"matchLabels": {"app": "w"}}}]
    w = PodInfo.parse(pod("w", labels={"app": "w"}, topologySpreadConstraints=spread))
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": zone}
    db = PodInfo.parse(pod("db", labels={"app": "db"}, affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}))
    apart = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    x = PodInfo.parse(pod("x", labels={"app": "x"}, affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}))
    topology = Topology({zone: {"a", "b"}})
    for p in (w, db, x):
        topology.register(p)
    topology.record(w, {zone: "a"})                    # the minimum stays 0 ("b" is empty): "a" is over the skew now
    assert topology.widenings(w) == 0
    topology.record(w, {zone: "b"})                    # the minimum rises: "a" takes the next pod again
    assert topology.widenings(w) == 1
    topology.record(db, {zone: "a"})                   # the affinity's first pod in "a"
    topology.record(db, {zone: "a"})                   # a second there opens nothing new
    assert topology.widenings(db) == 1
    for host in ("n1", "n2"):
        topology.record(x, {"kubernetes.io/hostname": host})
    assert topology.widenings(x) == 0                  # anti-affinity only ever narrows
    topology.add_domain(zone, "c")                     # a new zone: pods turned away may go there
    assert topology.widenings(w) == 2 and topology.widenings(db) == 2


def test_rooms_forget_the_nodes_that_turned_a_kind_away_once_its_topology_widens() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.scheduler import Rooms
    rooms = Rooms(2)
    for _ in range(3):
        rooms.append(np.array([4, 4]))
    placement, topology_kind = ("placement", 1), ("topology", 1)
    rooms.reject(placement, 0, 0)
    rooms.reject(topology_kind, 0, 2)
    assert rooms.candidates(np.array([1, 1]), [placement, topology_kind], 0).tolist() == [1]
    assert rooms.candidates(np.array([1, 1]), [("another",)], 0).tolist() == [0, 1, 2]
    assert rooms.candidates(np.array([1, 1]), [placement, topology_kind], 1).tolist() == [0, 1, 2]
    rooms.reject(placement, 1, 1)                      # a rejection at the new stamp starts the mask again
    assert rooms.candidates(np.array([1, 1]), [placement], 1).tolist() == [0, 2]
    assert rooms.candidates(np.array([5, 1]), [placement], 1).tolist() == []


def test_rooms_answer_as_if_worked_out_afresh_as_nodes_come_and_change() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.scheduler import KEPT_ROWS, Rooms
    rng = np.random.default_rng(11)
    # rooms of a few kinds (many ties), sized like bytes of memory; weights like dollars per byte, whose sums round
    rooms, price, weights = Rooms(6), np.array([1.0, 0.5, 0.25, 2.0, 4.0, 0.125]), rng.random(6) * 1e-9
    kinds = rng.integers(0, 2**36, (6, 6))
    rows: list[np.ndarray] = []
    needs = [rng.integers(0, 2**35, 6) for _ in range(KEPT_ROWS + 8)]     # more than it keeps: it starts again
    for step in range(600):
        if not rows or rng.random() < 0.2:                 # past 64 nodes, its arrays grow
            rows.append(kinds[int(rng.integers(6))])
            rooms.append(rows[-1])
        else:
            i = int(rng.integers(len(rows)))
            rows[i] = kinds[int(rng.integers(6))]
            rooms.set(i, rows[i])
        need = needs[int(rng.integers(8))] if step % 3 else needs[step % len(needs)]
        columns = np.array(rows)
        found = rooms.candidates(need, [], 0)
        assert found.tolist() == np.flatnonzero((columns >= need).all(axis=1)).tolist()
        short = need - columns[found]
        excess, left = np.maximum(short, 0) @ price, np.maximum(-short, 0) @ price
        assert list(rooms.cheapest_growth_first(found, need, price)) == found[np.lexsort((left, excess))].tolist()
        # weights whose sums round: worked out a node or two at a time, the same bits as all at once
        ranked = list(rooms.cheapest_growth_first(found, need, weights))
        if step % 10 == 0:
            fresh = Rooms(6)
            for row in rows:
                fresh.append(row)
            assert ranked == list(fresh.cheapest_growth_first(fresh.candidates(need, [], 0), need, weights))
            key = need.tobytes() + weights.tobytes()           # and the estimates themselves, bit for bit
            if key in rooms._growth and key in fresh._growth:
                for kept, afresh in zip(rooms._growth[key].values, fresh._growth[key].values):
                    assert kept[:len(rows)].tobytes() == afresh[:len(rows)].tobytes()


def test_covers_is_a_row_wise_all_for_fast_and_exact_amounts_held_either_way() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.nodes import covers
    rng = np.random.default_rng(7)
    matrix, need = rng.integers(0, 5, (50, 3)), rng.integers(0, 5, 3)
    wanted = (matrix >= need).all(axis=1)
    # held either way: a row per item, or a row per resource passed transposed (as Rooms and holding keep them)
    assert (covers(matrix, need) == wanted).all() and (covers(matrix.T.copy().T, need) == wanted).all()
    exact = matrix.astype(object) * 10**30
    assert (covers(exact, need.astype(object) * 10**30) == wanted).all()
    assert (covers(exact.T.copy().T, need.astype(object) * 10**30) == wanted).all()
    assert covers(np.zeros((4, 0)), np.zeros(0)).all() and covers(np.zeros((0, 4)).T, np.zeros(0)).all()


def test_the_first_nodes_ranked_are_a_prefix_of_the_whole_ranking() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.nodes import first_in_order, smallest
    rng = np.random.default_rng(3)
    for _ in range(500):
        n, count = int(rng.integers(1, 120)), int(rng.integers(1, 10))
        first, second = rng.integers(0, 4, n).astype(float), rng.integers(0, 5, n).astype(float)
        head, whole = first_in_order(first, second, count), np.lexsort((second, first))
        assert len(head) >= min(count, n) and (whole[:len(head)] == head).all()
        assert smallest(first, count).tolist() == np.lexsort((np.arange(n), first))[:count].tolist()


def test_nodes_in_a_zone_the_pods_topology_shuts_are_not_asked() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.scheduler import Rooms
    zone = "topology.kubernetes.io/zone"
    spread = [{"maxSkew": 1, "topologyKey": zone, "labelSelector": {"matchLabels": {"app": "w"}}}]
    w = PodInfo.parse(pod("w", labels={"app": "w"}, topologySpreadConstraints=spread))
    topology = Topology({zone: {"a", "b"}})
    topology.register(w)
    assert topology.keys() == topology.keys_of(w) == [zone]
    topology.record(w, {zone: "a"})
    assert topology.admitted(w, zone, ["a", "b"]) == {"b"} and topology.admitted(w, "another-key", ["a"]) == {"a"}
    rooms = Rooms(1)
    for _ in range(4):
        rooms.append(np.array([1]))
    rooms.settle(0, {zone: "a", "kubernetes.io/hostname": "n0"}, [zone])
    rooms.settle(1, {zone: "b"}, [zone])
    rooms.settle(2, {}, [zone])                           # its zone is chosen at launch: it may still take the pod
    found = np.arange(4)
    assert rooms.in_domains(found, zone, lambda domains: topology.admitted(w, zone, domains)).tolist() == [1, 2, 3]
    assert rooms.in_domains(found, "another-key", lambda domains: set()).tolist() == [0, 1, 2, 3]


def test_every_and_some_reduce_the_last_axis_as_numpy_does() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.nodes import every, row_sums, some
    rng = np.random.default_rng(5)
    conditions = rng.random((4, 6, 3)) > 0.4
    assert (every(conditions) == conditions.all(axis=-1)).all() and (some(conditions) == conditions.any(axis=-1)).all()
    matrix = rng.random((7, 3))
    assert (row_sums(matrix) == matrix.sum(axis=1)).all()
    assert every(np.zeros((2, 0), dtype=bool)).all() and not some(np.zeros((2, 0), dtype=bool)).any()


def test_dot_products_in_rankings_are_exact_whatever_the_order() -> None:
    import numpy as np

    from karpy.controller.provisioning.scheduling.nodes import dot
    # added left to right, 1e16 swallows the 1 and the result is 0; a BLAS library may add in any order
    assert dot(np.array([1e16, 1.0, -1e16]), np.array([1.0, 1.0, 1.0])) == 1.0
    assert dot(np.array([-1e16, 1.0, 1e16]), np.array([1.0, 1.0, 1.0])) == 1.0
    assert dot(np.array([0.5, 0.25]), np.array([2, 4])) == 2.0 and dot(np.zeros(0), np.zeros(0)) == 0.0
