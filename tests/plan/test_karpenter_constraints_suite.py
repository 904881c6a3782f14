"""Karpenter v0.16.3's scheduling suite (pkg/controllers/provisioning/scheduling/suite_test.go), ported:
the "Custom Constraints", "Preferential Fallback", "Taints", "Instance Type Compatibility" and "Networking
constraints" and "Binpacking" contexts, one row or test per Karpenter `It`, planned in process by `expect_provisioned`
against the fake cloud provider's instance types (test_karpenter_scheduling_suite.py ports "Topology" and
"In-Flight Nodes"). Not ported: the Its about operating systems (the fake arm type offers four) and
"Provider Specific Labels"."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import catalog
from tests.expectations import expect_not_scheduled, expect_provisioned, expect_scheduled
from tests.plan.test_karpenter_scheduling_suite import (
    CATALOG,
    INTEGER,
    Cluster,
    _fake_type,
    default_provisioner,
    node_requirements,
    upod,
)

ZONE = "topology.kubernetes.io/zone"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ALL_ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
LABELS = {"test-key": "test-value"}


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def preferring(*requirements: dict[str, Any]) -> dict[str, Any]:
    """test.PodOptions.NodePreferences: one preferred term of weight 1."""
    return {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": list(requirements)}}]}


def affinity(required: list[dict[str, Any]] | None = None, preferred: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    node_affinity: dict[str, Any] = {}
    if required:
        node_affinity.update(node_requirements(*required)["nodeAffinity"])
    if preferred:
        node_affinity.update(preferring(*preferred))
    return {"affinity": {"nodeAffinity": node_affinity}}


def terms(*required_terms: list[dict[str, Any]]) -> dict[str, Any]:
    """Several required nodeSelectorTerms (ORed)."""
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in required_terms]}}}}


def weighted(*preferences: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": {"matchExpressions": t}} for w, t in preferences]}}}


class Not(str):
    """A label value the node must not carry (Gomega's ToNot(HaveKeyWithValue(...)))."""


NOT_SCHEDULED = None
P = pytest.param

# (provisioner spec, pod spec, labels its node must carry (None: the key absent; Not(v): any value but v) or NOT_SCHEDULED)
CASES = [
    # --- Custom Constraints / Provisioner with Labels
    P({"labels": LABELS}, {}, LABELS, id="labels/an-unconstrained-pod-gets-the-provisioners-labels"),
    P({"labels": LABELS}, {"nodeSelector": {"test-key": "different-value"}}, NOT_SCHEDULED, id="labels/conflicting-node-selector"),
    P({}, {"nodeSelector": LABELS}, NOT_SCHEDULED, id="labels/node-selector-with-an-undefined-key"),
    P({"labels": LABELS}, affinity([req("test-key", "In", "test-value", "another-value")]), LABELS, id="labels/matching-requirements"),
    P({"labels": LABELS}, affinity([req("test-key", "In", "another-value")]), NOT_SCHEDULED, id="labels/conflicting-requirements"),
    # --- Custom Constraints / Well Known Labels
    P({"requirements": [req(ZONE, "In", "test-zone-2")]}, {}, {ZONE: "test-zone-2"}, id="well-known/provisioner-constraints"),
    P({"requirements": [req(ZONE, "In", "test-zone-1", "test-zone-2")]}, {"nodeSelector": {ZONE: "test-zone-2"}}, {ZONE: "test-zone-2"},
      id="well-known/node-selectors"),
    P({}, {"nodeSelector": {"kubernetes.io/hostname": "red-node"}}, NOT_SCHEDULED, id="well-known/hostname-selector"),
    P({"requirements": [req(ZONE, "In", "test-zone-1")]}, {"nodeSelector": {ZONE: "unknown"}}, NOT_SCHEDULED,
      id="well-known/unknown-node-selector"),
    P({"requirements": [req(ZONE, "In", "test-zone-1")]}, {"nodeSelector": {ZONE: "test-zone-2"}}, NOT_SCHEDULED,
      id="well-known/node-selector-outside-the-provisioner"),
    P({}, affinity([req(ZONE, "In", "test-zone-3")]), {ZONE: "test-zone-3"}, id="well-known/in"),
    P({"requirements": [req(INTEGER, "Gt", "8")]}, {}, {INTEGER: "16"}, id="well-known/gt"),
    P({"requirements": [req(INTEGER, "Lt", "8")]}, {}, {INTEGER: "2"}, id="well-known/lt"),
    P({}, affinity([req(ZONE, "In", "unknown")]), NOT_SCHEDULED, id="well-known/in-unknown"),
    P({}, affinity([req(ZONE, "NotIn", "test-zone-1", "test-zone-2", "unknown")]), {ZONE: "test-zone-3"}, id="well-known/not-in"),
    P({}, affinity([req(ZONE, "NotIn", *ALL_ZONES, "unknown")]), NOT_SCHEDULED, id="well-known/not-in-every-zone"),
    P({}, affinity([req(ZONE, "In", *ALL_ZONES, "unknown")], [req(ZONE, "In", "test-zone-2", "unknown")]), {ZONE: "test-zone-2"},
      id="well-known/compatible-preference-in"),
    P({}, affinity([req(ZONE, "In", *ALL_ZONES, "unknown")], [req(ZONE, "In", "unknown")]), {}, id="well-known/incompatible-preference-in"),
    P({}, affinity([req(ZONE, "In", *ALL_ZONES, "unknown")], [req(ZONE, "NotIn", "test-zone-1", "test-zone-3")]), {ZONE: "test-zone-2"},
      id="well-known/compatible-preference-not-in"),
    P({}, affinity([req(ZONE, "In", *ALL_ZONES, "unknown")], [req(ZONE, "NotIn", *ALL_ZONES)]), {},
      id="well-known/incompatible-preference-not-in"),
    P({}, {"nodeSelector": {ZONE: "test-zone-3"}, **affinity([req(ZONE, "In", *ALL_ZONES)], [req(ZONE, "In", *ALL_ZONES)])},
      {ZONE: "test-zone-3"}, id="well-known/selector-preference-and-requirement"),
    P({}, {"nodeSelector": {ZONE: "test-zone-3", INSTANCE_TYPE: "arm-instance-type"},
           **affinity([req(ZONE, "In", "test-zone-1", "test-zone-3"), req(INSTANCE_TYPE, "In", "default-instance-type", "arm-instance-type")],
                      [req(ZONE, "NotIn", "unknown"), req(INSTANCE_TYPE, "NotIn", "unknown")])},
      {ZONE: "test-zone-3", INSTANCE_TYPE: "arm-instance-type"}, id="well-known/multidimensional"),
    # --- Custom Constraints / Scheduling Logic
    P({}, affinity([req("test-key", "In", "test-value")]), NOT_SCHEDULED, id="logic/in-with-an-undefined-key"),
    P({}, affinity([req("test-key", "NotIn", "test-value")]), {"test-key": Not("test-value")},
      id="logic/not-in-with-an-undefined-key"),
    P({}, affinity([req("test-key", "Exists")]), NOT_SCHEDULED, id="logic/exists-with-an-undefined-key"),
    P({}, affinity([req("test-key", "DoesNotExist")]), {"test-key": None}, id="logic/does-not-exist-with-an-undefined-key"),
    P({"requirements": [req("test-key", "In", "test-value")]}, {}, LABELS, id="logic/an-unconstrained-pod-gets-the-required-label"),
    P({"requirements": [req("test-key", "In", "test-value")]}, affinity([req("test-key", "In", "test-value")]), LABELS,
      id="logic/in-the-same-value"),
    P({"requirements": [req("test-key", "In", "test-value")]}, affinity([req("test-key", "NotIn", "test-value")]), NOT_SCHEDULED,
      id="logic/not-in-the-only-value"),
    P({"requirements": [req("test-key", "In", "test-value")]}, affinity([req("test-key", "Exists")]), {}, id="logic/exists-with-a-defined-key"),
    P({"requirements": [req("test-key", "In", "test-value")]}, affinity([req("test-key", "DoesNotExist")]), NOT_SCHEDULED,
      id="logic/does-not-exist-with-a-defined-key"),
    P({"requirements": [req("test-key", "In", "test-value")]}, affinity([req("test-key", "In", "another-value")]), NOT_SCHEDULED,
      id="logic/in-another-value"),
    P({"requirements": [req("test-key", "In", "test-value")]}, affinity([req("test-key", "NotIn", "another-value")]), LABELS,
      id="logic/not-in-another-value"),
    P({}, affinity([req(ZONE, "In", "non-existent-zone"), req(ZONE, "Exists")]), NOT_SCHEDULED,
      id="logic/exists-does-not-widen-an-in"),
    # --- Preferential Fallback / Required
    P({"requirements": [req(ZONE, "In", "test-zone-1"), req(INSTANCE_TYPE, "In", "default-instance-type")]},
      terms([req(ZONE, "In", "invalid")]), NOT_SCHEDULED, id="fallback/the-final-required-term-is-never-relaxed"),
    P({}, terms([req(ZONE, "In", "invalid")], [req(ZONE, "In", "invalid")], [req(ZONE, "In", "test-zone-1")], [req(ZONE, "In", "test-zone-2")]),
      {ZONE: "test-zone-1"}, id="fallback/required-terms-are-tried-in-order"),
    # --- Preferential Fallback / Preferred
    P({}, weighted((1, [req(ZONE, "In", "invalid")]), (1, [req(INSTANCE_TYPE, "In", "invalid")])), {}, id="fallback/every-preference-relaxed"),
    P({"requirements": [req(ZONE, "In", "test-zone-1", "test-zone-2")]},
      weighted((100, [req(INSTANCE_TYPE, "In", "test-zone-3")]), (50, [req(ZONE, "In", "test-zone-2")]), (1, [req(ZONE, "In", "test-zone-1")])),
      {ZONE: "test-zone-2"}, id="fallback/relaxed-to-the-next-lighter-weight"),
    P({}, {"affinity": {"nodeAffinity": {**preferring(req(ZONE, "NotIn", "test-zone-3")),
                                         **node_requirements(req(ZONE, "In", "test-zone-3"))["nodeAffinity"]}}},
      {ZONE: "test-zone-3"}, id="fallback/a-preference-against-the-requirement-gives-way"),
    P({}, {"affinity": {"nodeAffinity": preferring(req(ZONE, "In", "invalid"), req(ZONE, "NotIn", "invalid"))}}, {},
      id="fallback/self-contradicting-preferences-give-way"),
]


@pytest.mark.parametrize("spec, pod_spec, labels", CASES)
def test_custom_constraints_and_preferential_fallback(spec: dict[str, Any], pod_spec: dict[str, Any],
                                                      labels: dict[str, str | None] | None) -> None:
    p = upod(**pod_spec)
    run = expect_provisioned(CATALOG, default_provisioner(**spec), p)
    if labels is NOT_SCHEDULED:
        expect_not_scheduled(run, p)
        return
    node = expect_scheduled(run, p)
    for key, value in labels.items():
        if isinstance(value, Not):
            assert node["labels"].get(key) != value, (key, node["labels"])
        else:
            assert node["labels"].get(key) == value, (key, node["labels"])


# Custom Constraints / Scheduling Logic / It("should schedule compatible pods to the same node")
def test_compatible_pods_share_a_node() -> None:
    prov = default_provisioner(requirements=[req("test-key", "In", "test-value", "another-value")])
    a, b = upod(**affinity([req("test-key", "In", "test-value")])), upod(**affinity([req("test-key", "NotIn", "another-value")]))
    run = expect_provisioned(CATALOG, prov, a, b)
    assert expect_scheduled(run, a)["name"] == expect_scheduled(run, b)["name"]
    assert expect_scheduled(run, a)["labels"]["test-key"] == "test-value"


# Custom Constraints / Scheduling Logic / It("should schedule incompatible pods to the different node")
def test_incompatible_pods_get_nodes_of_their_own() -> None:
    prov = default_provisioner(requirements=[req("test-key", "In", "test-value", "another-value")])
    a, b = upod(**affinity([req("test-key", "In", "test-value")])), upod(**affinity([req("test-key", "In", "another-value")]))
    run = expect_provisioned(CATALOG, prov, a, b)
    assert expect_scheduled(run, a)["labels"]["test-key"] == "test-value"
    assert expect_scheduled(run, b)["labels"]["test-key"] == "another-value"
    assert expect_scheduled(run, a)["name"] != expect_scheduled(run, b)["name"]


# Custom Constraints / Constraints Validation: v1alpha5.RestrictedLabels and RestrictedLabelDomains at v0.16.3
@pytest.mark.parametrize("key", ["karpenter.sh/emptiness-timestamp", "kubernetes.io/hostname",
                                 "kubernetes.io/test", "k8s.io/test", "karpenter.sh/test"])
def test_pods_requiring_restricted_labels_are_not_scheduled(key: str) -> None:
    p = upod(**affinity([req(key, "In", "test")]))
    expect_not_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)


# Constraints Validation / It("should schedule pods that have node selectors with label in restricted domains exceptions list")
@pytest.mark.parametrize("domain", ["kops.k8s.io", "node.kubernetes.io"])
def test_labels_in_the_restricted_domains_exceptions_are_put_on_the_node(domain: str) -> None:
    p = upod()
    run = expect_provisioned(CATALOG, default_provisioner(requirements=[req(f"{domain}/test", "In", "test-value")]), p)
    assert expect_scheduled(run, p)["labels"][f"{domain}/test"] == "test-value"


# Constraints Validation / It("should schedule pods that have node selectors with label in wellknown label list")
def test_pods_selecting_well_known_labels_are_scheduled() -> None:
    pods = [upod(nodeSelector={ZONE: "test-zone-1"}), upod(nodeSelector={INSTANCE_TYPE: "default-instance-type"}),
            upod(nodeSelector={"kubernetes.io/arch": "arm64"}), upod(nodeSelector={"kubernetes.io/os": "linux"}),
            upod(nodeSelector={"karpenter.sh/capacity-type": "spot"})]
    run = expect_provisioned(CATALOG, default_provisioner(), *pods)
    for p in pods:
        expect_scheduled(run, p)


# ============================== Describe("Taints") ==============================

# Taints / It("should taint nodes with provisioner taints")
def test_nodes_carry_the_provisioners_taints() -> None:
    taint = {"key": "test", "value": "bar", "effect": "NoSchedule"}
    p = upod(tolerations=[{"effect": "NoSchedule", "operator": "Exists"}])
    assert taint in expect_scheduled(expect_provisioned(CATALOG, default_provisioner(taints=[taint]), p), p)["taints"]


# Taints / It("should schedule pods that tolerate provisioner constraints")
@pytest.mark.parametrize("tolerations, scheduled", [
    P([{"key": "test-key", "operator": "Exists", "effect": "NoSchedule"}], True, id="exists"),
    P([{"key": "test-key", "value": "test-value", "operator": "Equal", "effect": "NoSchedule"}], True, id="equal"),
    P([], False, id="missing-toleration"),
    P([{"key": "invalid", "operator": "Exists"}], False, id="key-mismatch"),
    P([{"key": "test-key", "operator": "Equal", "effect": "NoSchedule"}], False, id="value-mismatch"),
])
def test_only_pods_tolerating_the_provisioners_taints_are_scheduled(tolerations: list[dict[str, str]], scheduled: bool) -> None:
    prov = default_provisioner(taints=[{"key": "test-key", "value": "test-value", "effect": "NoSchedule"}])
    p = upod(tolerations=tolerations)
    run = expect_provisioned(CATALOG, prov, p)
    if scheduled:
        expect_scheduled(run, p)
    else:
        expect_not_scheduled(run, p)


# Taints / It("should provision nodes with taints and schedule pods if the taint is only a startup taint")
def test_startup_taints_do_not_keep_pods_off() -> None:
    p = upod()
    prov = default_provisioner(startupTaints=[{"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"}])
    expect_scheduled(expect_provisioned(CATALOG, prov, p), p)


# Taints / It("should not generate taints for OpExists")
def test_a_toleration_generates_no_taint() -> None:
    p = upod(tolerations=[{"key": "test-key", "operator": "Exists", "effect": "NoExecute"}])
    assert expect_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)["taints"] == []


# ============================== Describe("Instance Type Compatibility") ==============================
BOTH_ARCHS = [req("kubernetes.io/arch", "In", "arm64", "amd64")]
AMD64 = [req("kubernetes.io/arch", "In", "amd64")]


# It("should not schedule if requesting more resources than any instance type has")
def test_a_pod_larger_than_every_instance_type_is_not_scheduled() -> None:
    p = upod(cpu="512")
    expect_not_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)


# It("should launch pods with different archs / instance type node selectors / zone selectors on different instances")
@pytest.mark.parametrize("first, second", [
    P({"kubernetes.io/arch": "amd64"}, {"kubernetes.io/arch": "arm64"}, id="archs"),
    P({"beta.kubernetes.io/instance-type": "small-instance-type"}, {INSTANCE_TYPE: "default-instance-type"}, id="instance-types"),
    P({ZONE: "test-zone-1"}, {ZONE: "test-zone-2"}, id="zones"),
])
def test_pods_selecting_different_values_get_different_nodes(first: dict[str, str], second: dict[str, str]) -> None:
    a, b = upod(nodeSelector=first), upod(nodeSelector=second)
    run = expect_provisioned(CATALOG, default_provisioner(requirements=BOTH_ARCHS), a, b)
    assert expect_scheduled(run, a)["name"] != expect_scheduled(run, b)["name"]


# It("should exclude instance types that are not supported by the pod constraints (node affinity/instance type)")
def test_an_instance_type_outside_the_provisioners_arch_is_not_used() -> None:
    p = upod(**affinity([req(INSTANCE_TYPE, "In", "arm-instance-type")]))
    expect_not_scheduled(expect_provisioned(CATALOG, default_provisioner(requirements=AMD64), p), p)


# It("should exclude instance types that are not supported by the provider constraints (arch)")
def test_limits_alone_count_as_requests_and_only_the_excluded_arch_could_hold_them() -> None:
    p = upod(cpu=None)
    p["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "14"}}
    expect_not_scheduled(expect_provisioned(CATALOG, default_provisioner(requirements=AMD64), p), p)


def fake_instance_types(count: int, extra: dict[int, dict[str, str]] | None = None) -> dict[str, Any]:
    """fake.InstanceTypes(count): fake-it-i with i+1 cpu, 2(i+1) GiB and 10(i+1) pods; `extra` adds resources by index."""
    return catalog(*[_fake_type(f"fake-it-{i}", cpu=str(i + 1), memory=f"{(i + 1) * 2}Gi", pods=str((i + 1) * 10),
                                extra=(extra or {}).get(i)) for i in range(count)])


def _gpu_catalog() -> dict[str, Any]:
    """fake.InstanceTypes(5) with a made-up device on each of the first two."""
    return fake_instance_types(5, {0: {"karpenter.sh/super-great-gpu": "25"}, 1: {"karpenter.sh/even-better-gpu": "25"}})


def _asking(**devices: str) -> dict[str, Any]:
    p = upod()
    p["spec"]["containers"][0]["resources"] = {"limits": {f"karpenter.sh/{name.replace('_', '-')}": v for name, v in devices.items()}}
    return p


# It("should launch pods with resources that aren't on any single instance type on different instances")
def test_pods_asking_for_devices_no_one_type_has_both_of_get_a_node_each() -> None:
    a, b = _asking(super_great_gpu="1"), _asking(even_better_gpu="1")
    run = expect_provisioned(_gpu_catalog(), default_provisioner(), a, b)
    assert expect_scheduled(run, a)["instanceType"] == "fake-it-0"
    assert expect_scheduled(run, b)["instanceType"] == "fake-it-1"


# It("should fail to schedule a pod with resources requests that aren't on a single instance type")
def test_a_pod_asking_for_devices_no_one_type_has_both_of_is_not_scheduled() -> None:
    p = _asking(super_great_gpu="1", even_better_gpu="1")
    expect_not_scheduled(expect_provisioned(_gpu_catalog(), default_provisioner(), p), p)


# ============================== Describe("Networking constraints") / Context("HostPort") ==============================
def _with_port(**port: Any) -> dict[str, Any]:
    p = upod()
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 1234, "hostPort": 80, **port}]
    return p


@pytest.mark.parametrize("first, second, together", [
    P({}, {}, False, id="same-port-default-protocol"),
    P({"protocol": "UDP"}, {"protocol": "UDP"}, False, id="same-port-and-protocol"),
    P({}, {"hostIP": "1.2.3.4"}, False, id="same-port-default-ip-is-every-ip"),
    P({"protocol": "TCP", "hostIP": "1.2.3.4"}, {"protocol": "TCP", "hostIP": "0.0.0.0"}, False, id="same-port-one-ip-all-interfaces"),
    P({"protocol": "TCP"}, {"protocol": "UDP"}, True, id="same-port-other-protocol"),
    P({"protocol": "TCP", "hostIP": "1.2.3.4"}, {"protocol": "TCP", "hostIP": "4.5.6.7"}, True, id="same-port-other-ip"),
])
def test_host_ports(first: dict[str, Any], second: dict[str, Any], together: bool) -> None:
    a, b = _with_port(**first), _with_port(**second)
    run = expect_provisioned(CATALOG, default_provisioner(), a, b)
    assert (expect_scheduled(run, a)["name"] == expect_scheduled(run, b)["name"]) is together


# HostPort / It("should co-locate pods that don't use HostPort")
def test_container_ports_without_host_ports_do_not_keep_pods_apart() -> None:
    a, b = upod(), upod()
    for p in (a, b):
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 1234, "protocol": "TCP"}]
    run = expect_provisioned(CATALOG, default_provisioner(), a, b)
    assert expect_scheduled(run, a)["name"] == expect_scheduled(run, b)["name"]


# HostPort / It("shouldn't co-locate pods that use the same HostPort but a different IP, where one ip is 0.0.0.0 (existingNodes)")
def test_a_host_port_taken_on_an_in_flight_node_sends_the_next_pod_elsewhere() -> None:
    cluster = Cluster()
    cluster.apply(default_provisioner())
    (a,) = cluster.provision(_with_port(protocol="TCP", hostIP="1.2.3.4"))
    (b,) = cluster.provision(_with_port(protocol="TCP", hostIP="0.0.0.0"))
    assert cluster.scheduled(a)["metadata"]["name"] != cluster.scheduled(b)["metadata"]["name"]


# ============================== Describe("Binpacking") ==============================
def _requesting(count: int = 1, **requests: str) -> list[dict[str, Any]]:
    pods = [upod() for _ in range(count)]
    for p in pods:
        p["spec"]["containers"][0]["resources"] = {"requests": dict(requests)}
    return pods


def _instance_types_of(run: Any, pods: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """The names of the nodes `pods` went to, and their instance types."""
    nodes = [expect_scheduled(run, p) for p in pods]
    return {n["name"] for n in nodes}, {n["instanceType"] for n in nodes}


# It("should schedule a small pod on the smallest instance") / ("... on the smallest possible instance type")
@pytest.mark.parametrize("memory", ["100M", "2000M"])
def test_a_small_pod_gets_the_smallest_instance_type(memory: str) -> None:
    pods = _requesting(memory=memory)
    assert _instance_types_of(expect_provisioned(CATALOG, default_provisioner(), *pods), pods)[1] == {"small-instance-type"}


# It("should schedule multiple small pods on the smallest possible instance type")
def test_small_pods_share_one_smallest_node() -> None:
    pods = _requesting(5, memory="10M")
    names, types = _instance_types_of(expect_provisioned(CATALOG, default_provisioner(), *pods), pods)
    assert (len(names), types) == (1, {"small-instance-type"})


AMD: dict[str, Any] = {"nodeSelector": {"kubernetes.io/arch": "amd64"}}
# default-instance-type, pod-eni-instance-type and aws-neuron-instance-type cost the same: the plain types come
# before the one with an accelerator no pod asked for (scheduling.nodes.carries_accelerator)


# It("should create new nodes when a node is at capacity")
# (40 small nodes' list prices add up to 20 default ones'; each node's volume and address make the 20 cheaper)
def test_new_nodes_when_one_is_full() -> None:
    pods = [upod(**AMD, **p["spec"]) for p in _requesting(40, memory="1.8G")]
    names, types = _instance_types_of(expect_provisioned(CATALOG, default_provisioner(), *pods), pods)
    assert (len(names), types) == (20, {"default-instance-type"})


# It("should pack small and large pods together")
def test_small_pods_fill_the_room_large_pods_leave() -> None:
    pods = [upod(**AMD, **p["spec"]) for p in _requesting(40, memory="1.8G") + _requesting(20, memory="400M")]
    names, types = _instance_types_of(expect_provisioned(CATALOG, default_provisioner(), *pods), pods)
    assert (len(names), types) == (20, {"default-instance-type"})


# It("should pack nodes tightly")
def test_a_small_pod_beside_a_large_one_gets_a_smaller_node() -> None:
    large, small = _requesting(cpu="4.5") + _requesting(cpu="1")
    run = expect_provisioned(fake_instance_types(5), default_provisioner(), large, small)
    assert expect_scheduled(run, large)["instanceType"] != expect_scheduled(run, small)["instanceType"]


# It("should handle zero-quantity resource requests")
def test_a_zero_request_of_a_resource_no_type_has_is_fine() -> None:
    (p,) = _requesting(1, **{"foo.com/weird-resources": "0"})
    p["spec"]["containers"][0]["resources"]["limits"] = {"foo.com/weird-resources": "0"}
    expect_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)


# It("should not schedule pods that exceed every instance type's capacity")
def test_a_pod_asking_more_memory_than_any_type_is_not_scheduled() -> None:
    (p,) = _requesting(memory="2Ti")
    expect_not_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)


# It("should create new nodes when a node is at capacity due to pod limits per node")
def test_the_pod_count_fills_a_node() -> None:
    pods = [upod(**AMD, **p["spec"]) for p in _requesting(25, memory="1m", cpu="1m")]
    names, types = _instance_types_of(expect_provisioned(CATALOG, default_provisioner(), *pods), pods)
    assert (len(names), types) == (5, {"small-instance-type"})


def _with_init(memory: str) -> dict[str, Any]:
    (p,) = _requesting(memory="1Gi", cpu="1")
    p["spec"]["initContainers"] = [{"name": "init", "image": "pause", "resources": {"requests": {"memory": memory, "cpu": "2"}}}]
    return p


# It("should take into account initContainer resource requests when binpacking")
def test_init_containers_size_the_node() -> None:
    p = _with_init("1Gi")
    assert expect_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)["instanceType"] == "default-instance-type"


# It("should not schedule pods when initContainer resource requests are greater than available instance types")
def test_an_init_container_larger_than_every_type_is_not_scheduled() -> None:
    p = _with_init("1Ti")
    expect_not_scheduled(expect_provisioned(CATALOG, default_provisioner(), p), p)


# It("should select for valid instance types, regardless of price")
def test_the_cheapest_type_is_chosen_and_every_type_that_fits_is_an_option() -> None:
    def sized(name: str, cpu: str, memory: str, price: float) -> dict[str, Any]:
        return {**_fake_type(name, cpu=cpu, memory=memory),
                "offerings": [{"zone": "test-zone-1a", "capacityType": "on-demand", "price": price}]}

    p = upod()
    p["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1m", "memory": "1Mi"}}
    types = catalog(sized("medium", "2", "2Gi", 3.0), sized("small", "1", "1Gi", 2.0), sized("large", "4", "4Gi", 1.0))
    node = expect_scheduled(expect_provisioned(types, default_provisioner(), p), p)
    assert node["instanceType"] == "large"
    assert sorted(node["instanceTypeOptions"]) == ["large", "medium", "small"]
