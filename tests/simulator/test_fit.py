"""The local cluster's fit filters against kube-scheduler's documented behaviour, one table per plugin."""

from __future__ import annotations

from typing import Any, Sequence

import pytest

from karpy.simulator import fit


def pod(*, cpu: str | None = "100m", memory: str | None = None, labels: dict[str, str] | None = None,
        namespace: str = "default", **spec: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    spec.setdefault("containers", [{"name": "c", "resources": {"requests": requests}}])
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}}, "spec": spec}


def node(name: str = "n1", *, labels: dict[str, str] | None = None, cpu: str = "2", memory: str = "4Gi", pods: str = "110",
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False, ready: bool = True) -> fit.NodeState:
    return fit.NodeState.of({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def reasons(p: dict[str, Any], n: fit.NodeState, *, others: Sequence[fit.NodeState] = (), placed: Sequence[tuple[str, dict[str, Any]]] = ()) -> list[str]:
    cluster = fit.Cluster([n, *others])
    for node_name, q in placed:
        cluster.place(node_name, fit.PodFacts.of(q))
    return cluster.reasons(fit.PodFacts.of(p), cluster.nodes[n.name])


# --- NodeResourcesFit ----------------------------------------------------------------------------
@pytest.mark.parametrize("spec, want", [
    pytest.param({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}},
                                 {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
                 {"cpu": 1500, "memory": 1024 ** 3 * 1000}, id="containers-add-up"),
    pytest.param({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                  "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}},
                                     {"name": "j", "resources": {"requests": {"cpu": "500m"}}}]},
                 {"cpu": 2000}, id="largest-init-container-wins-over-the-sum"),
    pytest.param({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                  "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "250m"}}}]},
                 {"cpu": 1000}, id="small-init-container-adds-nothing"),
    pytest.param({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}], "overhead": {"cpu": "250m"}},
                 {"cpu": 1250}, id="pod-overhead-is-added"),
    pytest.param({"containers": [{"name": "a"}]}, {}, id="no-requests"),
])
def test_pod_requests_as_node_resources_fit_counts_them(spec: dict[str, Any], want: dict[str, int]) -> None:
    assert fit.pod_requests(spec) == want


@pytest.mark.parametrize("p, n, placed, want", [
    pytest.param(pod(cpu="1"), node(cpu="2"), [("n1", pod(cpu="1"))], [], id="exactly-full-fits"),
    pytest.param(pod(cpu="1"), node(cpu="2"), [("n1", pod(cpu="1500m"))], ["Insufficient cpu"], id="cpu-short"),
    pytest.param(pod(cpu="3", memory="8Gi"), node(cpu="2", memory="4Gi"), [], ["Insufficient cpu", "Insufficient memory"],
                 id="every-shortfall-is-listed"),
    pytest.param(pod(cpu="100m"), node(pods="1"), [("n1", pod(cpu=None))], ["Too many pods"], id="pod-count"),
    pytest.param(pod(cpu="100m", containers=[{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]), node(), [],
                 ["Insufficient nvidia.com/gpu"], id="extended-resource-the-node-lacks"),
    pytest.param(pod(cpu="1", overhead={"cpu": "1500m"}), node(cpu="2"), [], ["Insufficient cpu"], id="overhead-counts"),
    pytest.param(pod(cpu="1", initContainers=[{"name": "i", "resources": {"requests": {"cpu": "3"}}}]), node(cpu="2"), [],
                 ["Insufficient cpu"], id="init-container-counts"),
])
def test_node_resources_fit(p: dict[str, Any], n: fit.NodeState, placed: list[tuple[str, dict[str, Any]]], want: list[str]) -> None:
    assert reasons(p, n, placed=placed) == want


# --- NodeName, NodeUnschedulable, TaintToleration ------------------------------------------------------
TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize("p, n, want", [
    pytest.param(pod(nodeName="n2"), node("n1"), ["node(s) didn't match the requested node name"], id="node-name-other"),
    pytest.param(pod(nodeName="n1"), node("n1"), [], id="node-name-same"),
    pytest.param(pod(), node(unschedulable=True), ["node(s) were unschedulable"], id="cordoned"),
    pytest.param(pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
                 node(unschedulable=True), [], id="cordoned-tolerated"),
    pytest.param(pod(), node(taints=[TAINT]), ["node(s) had untolerated taint {dedicated: gpu}"], id="taint-untolerated"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
                 node(taints=[TAINT]), [], id="equal-same-value"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "value": "gpu"}]), node(taints=[TAINT]), [], id="equal-is-default-any-effect"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "cpu"}]), node(taints=[TAINT]),
                 ["node(s) had untolerated taint {dedicated: gpu}"], id="equal-other-value"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "operator": "Exists"}]), node(taints=[TAINT]), [], id="exists-any-value"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]), node(taints=[TAINT]),
                 ["node(s) had untolerated taint {dedicated: gpu}"], id="other-effect"),
    pytest.param(pod(tolerations=[{"operator": "Exists"}]), node(taints=[TAINT, {"key": "x", "effect": "NoExecute"}]), [],
                 id="empty-key-exists-tolerates-all"),
    pytest.param(pod(tolerations=[{"operator": "Equal", "value": "gpu"}]), node(taints=[TAINT]),
                 ["node(s) had untolerated taint {dedicated: gpu}"], id="empty-key-needs-exists"),
    pytest.param(pod(), node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), [], id="prefer-no-schedule-ignored"),
    pytest.param(pod(), node(taints=[{"key": "evict", "effect": "NoExecute"}]), ["node(s) had untolerated taint {evict: }"],
                 id="no-execute-filters"),
    pytest.param(pod(), node(ready=False), ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"],
                 id="not-ready-carries-the-not-ready-taint"),
    pytest.param(pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]), node(ready=False), [],
                 id="not-ready-tolerated"),
    pytest.param(pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]),
                 node(ready=False, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
                 ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"], id="not-ready-no-execute-alone-does-not-hide-no-schedule"),
])
def test_node_name_unschedulable_and_taints(p: dict[str, Any], n: fit.NodeState, want: list[str]) -> None:
    assert reasons(p, n) == want


# --- NodeAffinity -----------------------------------------------------------------------------
def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


ZONE_A = {"zone": "a", "cores": "8"}
MISMATCH = ["node(s) didn't match Pod's node affinity/selector"]


@pytest.mark.parametrize("p, want", [
    pytest.param(pod(nodeSelector={"zone": "a"}), [], id="selector-match"),
    pytest.param(pod(nodeSelector={"zone": "b"}), MISMATCH, id="selector-mismatch"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "In", "a", "b")]})), [], id="in"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "NotIn", "a")]})), MISMATCH, id="not-in"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("gpu", "NotIn", "x")]})), [], id="not-in-absent-key-matches"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "Exists")]})), [], id="exists"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "DoesNotExist")]})), MISMATCH, id="does-not-exist"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("cores", "Gt", "4")]})), [], id="gt"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("cores", "Lt", "4")]})), MISMATCH, id="lt"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "Gt", "4")]})), MISMATCH, id="gt-not-a-number"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "In", "a"), expr("cores", "In", "2")]})), MISMATCH,
                 id="expressions-are-anded"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "In", "b")]}, {"matchExpressions": [expr("cores", "In", "8")]})),
                 [], id="terms-are-ored"),
    pytest.param(pod(nodeSelector={"zone": "b"}, affinity=required({"matchExpressions": [expr("zone", "In", "a")]})), MISMATCH,
                 id="selector-and-affinity-both-apply"),
    pytest.param(pod(affinity=required({})), MISMATCH, id="empty-term-matches-nothing"),
    pytest.param(pod(affinity=required({"matchFields": [expr("metadata.name", "In", "n1")]})), [], id="match-fields-name"),
    pytest.param(pod(affinity=required({"matchFields": [expr("metadata.name", "NotIn", "n1")]})), MISMATCH, id="match-fields-not-in"),
    pytest.param(pod(affinity=required({"matchFields": [expr("metadata.name", "In", "n1")], "matchExpressions": [expr("zone", "In", "b")]})),
                 MISMATCH, id="fields-and-expressions-are-anded"),
])
def test_node_affinity(p: dict[str, Any], want: list[str]) -> None:
    assert reasons(p, node("n1", labels=ZONE_A)) == want


# --- NodePorts ----------------------------------------------------------------------------------
def with_port(port: int, protocol: str = "TCP", host_ip: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": 80, "hostPort": port, "protocol": protocol, **({"hostIP": host_ip} if host_ip else {})}
    return pod(containers=[{"name": "c", "ports": [entry]}])


PORTS = ["node(s) didn't have free ports for the requested pod ports"]


@pytest.mark.parametrize("p, existing, want", [
    pytest.param(with_port(80), with_port(80), PORTS, id="same-port"),
    pytest.param(with_port(80), with_port(81), [], id="other-port"),
    pytest.param(with_port(80, "UDP"), with_port(80), [], id="other-protocol"),
    pytest.param(with_port(80, host_ip="10.0.0.1"), with_port(80, host_ip="10.0.0.2"), [], id="other-host-ip"),
    pytest.param(with_port(80, host_ip="10.0.0.1"), with_port(80), PORTS, id="wildcard-conflicts-with-any-ip"),
])
def test_node_ports(p: dict[str, Any], existing: dict[str, Any], want: list[str]) -> None:
    assert reasons(p, node(), placed=[("n1", existing)]) == want


# --- PodTopologySpread -------------------------------------------------------------------------------
def spread(max_skew: int = 1, **extra: Any) -> dict[str, Any]:
    return pod(labels={"app": "web"}, topologySpreadConstraints=[{
        "maxSkew": max_skew, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}, **extra}])


WEB = pod(labels={"app": "web"})
ZONES = [node("a1", labels={"zone": "a"}), node("b1", labels={"zone": "b"})]
SKEW = ["node(s) didn't match pod topology spread constraints"]


@pytest.mark.parametrize("p, target, placed, want", [
    pytest.param(spread(), "a1", [], [], id="empty-cluster"),
    pytest.param(spread(), "a1", [("a1", WEB)], SKEW, id="skew-would-be-2"),
    pytest.param(spread(), "b1", [("a1", WEB)], [], id="the-emptier-zone"),
    pytest.param(spread(max_skew=2), "a1", [("a1", WEB)], [], id="max-skew-2"),
    pytest.param(spread(), "a1", [("a1", pod(labels={"app": "db"}))], [], id="other-pods-do-not-count"),
    pytest.param(spread(), "a1", [("a1", pod(labels={"app": "web"}, namespace="other"))], [], id="other-namespaces-do-not-count"),
    pytest.param(spread(whenUnsatisfiable="ScheduleAnyway"), "a1", [("a1", WEB), ("a1", WEB)], [], id="schedule-anyway-is-a-score"),
    pytest.param(spread(), "x1", [], ["node(s) didn't match pod topology spread constraints (missing required label)"],
                 id="node-without-the-key"),
    pytest.param(spread(minDomains=3), "b1", [("a1", WEB), ("b1", WEB)], SKEW, id="min-domains-makes-the-minimum-0"),
    pytest.param({**spread(), "spec": {**spread()["spec"], "nodeSelector": {"zone": "a"}}}, "a1", [("a1", WEB)], [],
                 id="domains-outside-node-affinity-are-not-eligible"),
])
def test_pod_topology_spread(p: dict[str, Any], target: str, placed: list[tuple[str, dict[str, Any]]], want: list[str]) -> None:
    nodes = {n.name: n for n in [node("a1", labels={"zone": "a"}), node("b1", labels={"zone": "b"}), node("x1")]}
    assert reasons(p, nodes[target], others=[n for name, n in nodes.items() if name != target], placed=placed) == want


# --- InterPodAffinity ---------------------------------------------------------------------------
def term(app: str, key: str = "kubernetes.io/hostname", **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}


def affine(kind: str, *terms: dict[str, Any], labels: dict[str, str] | None = None, namespace: str = "default") -> dict[str, Any]:
    return pod(labels=labels, namespace=namespace, affinity={kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}})


CACHE = pod(labels={"app": "cache"})
NO_AFFINITY = ["node(s) didn't match pod affinity rules"]
NO_ANTI = ["node(s) didn't match pod anti-affinity rules"]
EXISTING = ["node(s) didn't satisfy existing pods anti-affinity rules"]


@pytest.mark.parametrize("p, target, placed, want", [
    pytest.param(affine("podAffinity", term("cache")), "a1", [("a1", CACHE)], [], id="affinity-same-node"),
    pytest.param(affine("podAffinity", term("cache")), "b1", [("a1", CACHE)], NO_AFFINITY, id="affinity-other-node"),
    pytest.param(affine("podAffinity", term("cache", "zone")), "a2", [("a1", CACHE)], [], id="affinity-same-zone"),
    pytest.param(affine("podAffinity", term("cache")), "a1", [], NO_AFFINITY, id="affinity-nothing-to-join"),
    pytest.param(affine("podAffinity", term("web"), labels={"app": "web"}), "a1", [], [], id="affinity-first-of-its-own-kind"),
    pytest.param(affine("podAffinity", term("cache")), "a1", [("a1", pod(labels={"app": "cache"}, namespace="other"))], NO_AFFINITY,
                 id="affinity-own-namespace-only"),
    pytest.param(affine("podAffinity", term("cache", namespaces=["other"])), "a1",
                 [("a1", pod(labels={"app": "cache"}, namespace="other"))], [], id="affinity-named-namespace"),
    pytest.param(affine("podAffinity", term("cache", namespaceSelector={})), "a1",
                 [("a1", pod(labels={"app": "cache"}, namespace="other"))], [], id="affinity-empty-namespace-selector-is-all"),
    pytest.param(affine("podAntiAffinity", term("cache")), "a1", [("a1", CACHE)], NO_ANTI, id="anti-affinity-same-node"),
    pytest.param(affine("podAntiAffinity", term("cache")), "b1", [("a1", CACHE)], [], id="anti-affinity-other-node"),
    pytest.param(affine("podAntiAffinity", term("cache", "zone")), "a2", [("a1", CACHE)], NO_ANTI, id="anti-affinity-same-zone"),
    pytest.param(CACHE, "a1", [("a1", affine("podAntiAffinity", term("cache"), labels={"app": "solo"}))], EXISTING,
                 id="existing-pods-anti-affinity-is-symmetric"),
    pytest.param(CACHE, "b1", [("a1", affine("podAntiAffinity", term("cache"), labels={"app": "solo"}))], [],
                 id="existing-anti-affinity-other-node"),
    pytest.param(pod(labels={"app": "cache"}, namespace="other"), "a1",
                 [("a1", affine("podAntiAffinity", term("cache"), labels={"app": "solo"}))], [],
                 id="existing-anti-affinity-own-namespace-only"),
])
def test_inter_pod_affinity(p: dict[str, Any], target: str, placed: list[tuple[str, dict[str, Any]]], want: list[str]) -> None:
    nodes = {n.name: n for n in [node("a1", labels={"zone": "a"}), node("a2", labels={"zone": "a"}), node("b1", labels={"zone": "b"})]}
    assert reasons(p, nodes[target], others=[n for name, n in nodes.items() if name != target], placed=placed) == want


@pytest.mark.parametrize("selector, labels, want", [
    pytest.param(None, {"app": "web"}, False, id="null-matches-nothing"),
    pytest.param({}, {"app": "web"}, True, id="empty-matches-everything"),
    pytest.param({"matchLabels": {"app": "web"}, "matchExpressions": [expr("tier", "In", "fe")]}, {"app": "web"}, False,
                 id="labels-and-expressions-anded"),
])
def test_label_selector(selector: dict[str, Any] | None, labels: dict[str, str], want: bool) -> None:
    assert fit.selector_matches(selector, labels) is want


def test_message_counts_reasons_across_nodes() -> None:
    import collections
    assert fit.unschedulable_message(3, collections.Counter({"Insufficient cpu": 2, "node(s) were unschedulable": 1})) == \
        "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) were unschedulable."


# --- more of kube-scheduler's documented filter semantics ------------------------------------------
@pytest.mark.parametrize("p, n, want", [
    pytest.param(pod(tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]),
                 node(taints=[TAINT, {"key": "evict", "effect": "NoExecute"}]), ["node(s) had untolerated taint {evict: }"],
                 id="empty-key-exists-with-an-effect-tolerates-that-effect-only"),
    pytest.param(pod(tolerations=[{"key": "evict", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]),
                 node(taints=[{"key": "evict", "effect": "NoExecute"}]), [], id="no-execute-toleration-with-seconds-still-schedules"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}]),
                 node(taints=[TAINT]), ["node(s) had untolerated taint {dedicated: gpu}"], id="equal-with-another-effect"),
    pytest.param(pod(tolerations=[{"key": "dedicated", "operator": "Equal", "effect": "NoSchedule"}]),
                 node(taints=[{"key": "dedicated", "effect": "NoSchedule"}]), [], id="equal-empty-value-matches-an-empty-value"),
    pytest.param(pod(), node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}, TAINT]),
                 ["node(s) had untolerated taint {dedicated: gpu}"], id="prefer-no-schedule-beside-a-hard-taint"),
])
def test_taints_and_tolerations_by_effect_and_operator(p: dict[str, Any], n: fit.NodeState, want: list[str]) -> None:
    assert reasons(p, n) == want


@pytest.mark.parametrize("p, want", [
    pytest.param(pod(affinity=required({"matchExpressions": [expr("gpu", "In", "x")]})), MISMATCH, id="in-absent-key"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("gpu", "Gt", "1")]})), MISMATCH, id="gt-absent-key"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("cores", "Gt", "8")]})), MISMATCH, id="gt-is-strict"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("cores", "Lt", "9")]})), [], id="lt-below"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("gpu", "DoesNotExist")]})), [], id="does-not-exist-absent-key"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "NotIn", "b"), expr("cores", "Exists")]},
                                       {"matchExpressions": [expr("zone", "In", "z")]})), [], id="first-term-all-true"),
    pytest.param(pod(affinity=required({"matchExpressions": [expr("zone", "In", "z")]}, {})), MISMATCH,
                 id="an-empty-term-beside-a-failing-one-matches-nothing"),
    pytest.param(pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "z")]}}]}}), [], id="preferred-is-not-a-filter"),
])
def test_node_affinity_operators_and_terms(p: dict[str, Any], want: list[str]) -> None:
    assert reasons(p, node("n1", labels=ZONE_A)) == want


@pytest.mark.parametrize("p, n, placed, want", [
    pytest.param(pod(cpu="1", initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2"}}}]), node(cpu="2"),
                 [], [], id="init-container-alone-fits-exactly"),
    pytest.param(pod(cpu="1", initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2"}}}]), node(cpu="2"),
                 [("n1", pod(cpu="100m"))], ["Insufficient cpu"], id="init-container-peak-counts-against-placed-pods"),
    pytest.param(pod(cpu="1", initContainers=[{"name": "i", "resources": {"requests": {"memory": "3Gi"}}}]), node(cpu="2", memory="4Gi"),
                 [("n1", pod(cpu=None, memory="2Gi"))], ["Insufficient memory"], id="init-container-peak-per-resource"),
    pytest.param(pod(cpu="1", overhead={"memory": "1Gi"}), node(cpu="2", memory="4Gi"), [("n1", pod(cpu=None, memory="3500Mi"))],
                 ["Insufficient memory"], id="overhead-in-a-resource-the-containers-do-not-ask-for"),
    pytest.param(pod(cpu=None), node(cpu="2", pods="2"), [("n1", pod(cpu="2"))], [], id="a-pod-asking-nothing-fits-a-full-node"),
])
def test_node_resources_fit_with_init_containers_and_overhead(p: dict[str, Any], n: fit.NodeState,
                                                             placed: list[tuple[str, dict[str, Any]]], want: list[str]) -> None:
    assert reasons(p, n, placed=placed) == want


@pytest.mark.parametrize("p, existing, want", [
    pytest.param(with_port(80, host_ip="10.0.0.1"), with_port(80, host_ip="10.0.0.1"), PORTS, id="same-ip-same-port"),
    pytest.param(with_port(80), with_port(80, host_ip="10.0.0.2"), PORTS, id="wildcard-wanted-conflicts-with-a-used-ip"),
    pytest.param(with_port(80, "SCTP"), with_port(80, "SCTP"), PORTS, id="same-sctp-port"),
    pytest.param(pod(containers=[{"name": "c", "ports": [{"containerPort": 80}]}]), with_port(80), [],
                 id="a-container-port-without-host-port-takes-none"),
])
def test_node_ports_by_protocol_and_host_ip(p: dict[str, Any], existing: dict[str, Any], want: list[str]) -> None:
    assert reasons(p, node(), placed=[("n1", existing)]) == want


# --- the DaemonSet controller: which nodes get a daemon pod ----------------------------------------------
def ds_spec(**spec: Any) -> dict[str, Any]:
    return {"containers": [{"name": "agent", "resources": {"requests": {"cpu": "100m"}}}], **spec}


RUN, KEEP_ONLY, NEITHER = fit.DaemonPlacement(True, True), fit.DaemonPlacement(False, True), fit.DaemonPlacement(False, False)


@pytest.mark.parametrize("spec, n, want", [
    pytest.param(ds_spec(), node(), RUN, id="plain-node"),
    pytest.param(ds_spec(), node(cpu="0", pods="0"), RUN, id="resources-are-not-its-concern"),
    pytest.param(ds_spec(), node(unschedulable=True), RUN, id="cordoned-node-still-runs-one"),
    pytest.param(ds_spec(), node(taints=[TAINT]), KEEP_ONLY, id="no-schedule-keeps-new-pods-off-but-not-running-ones"),
    pytest.param(ds_spec(), node(taints=[{"key": "evict", "effect": "NoExecute"}]), NEITHER, id="no-execute-evicts"),
    pytest.param(ds_spec(), node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), RUN, id="prefer-no-schedule-is-ignored"),
    pytest.param(ds_spec(tolerations=[{"key": "dedicated", "operator": "Exists"}]), node(taints=[TAINT]), RUN,
                 id="tolerated-by-the-template"),
    pytest.param(ds_spec(), node(ready=False), KEEP_ONLY, id="not-ready-node-gets-no-new-pod"),
    pytest.param(ds_spec(), node(taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]), RUN,
                 id="not-ready-no-execute-tolerated-by-default"),
    pytest.param(ds_spec(), node(ready=False, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]), KEEP_ONLY,
                 id="a-not-ready-node-has-the-no-schedule-twin-too"),
    pytest.param(ds_spec(), node(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]), RUN,
                 id="unreachable-no-execute-tolerated-by-default"),
    pytest.param(ds_spec(), node(taints=[{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
                                         {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
                                         {"key": "node.kubernetes.io/pid-pressure", "effect": "NoSchedule"},
                                         {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]), RUN,
                 id="node-condition-taints-tolerated-by-default"),
    pytest.param(ds_spec(), node(taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]), KEEP_ONLY,
                 id="network-unavailable-not-tolerated-without-host-network"),
    pytest.param(ds_spec(hostNetwork=True), node(taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]),
                 RUN, id="network-unavailable-tolerated-with-host-network"),
    pytest.param(ds_spec(nodeSelector={"zone": "a"}), node(labels=ZONE_A), RUN, id="node-selector-match"),
    pytest.param(ds_spec(nodeSelector={"zone": "b"}), node(labels=ZONE_A), NEITHER, id="node-selector-mismatch-removes-too"),
    pytest.param(ds_spec(affinity=required({"matchExpressions": [expr("zone", "In", "b")]},
                                           {"matchExpressions": [expr("cores", "Gt", "4")]})), node(labels=ZONE_A), RUN,
                 id="affinity-terms-ored"),
    pytest.param(ds_spec(affinity=required({"matchExpressions": [expr("zone", "In", "a"), expr("cores", "Lt", "4")]})),
                 node(labels=ZONE_A), NEITHER, id="affinity-expressions-anded"),
    pytest.param(ds_spec(affinity=required({"matchFields": [expr("metadata.name", "In", "n1")]})), node("n1"), RUN,
                 id="affinity-on-the-node-name"),
    pytest.param(ds_spec(nodeName="n2"), node("n1"), NEITHER, id="template-node-name-other"),
])
def test_daemonset_controller_placement(spec: dict[str, Any], n: fit.NodeState, want: fit.DaemonPlacement) -> None:
    assert fit.daemon_placement(spec, n) == want


def test_daemon_pods_get_the_default_tolerations_once() -> None:
    own = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    tolerations = fit.daemon_pod_tolerations(ds_spec(tolerations=[own, {"key": "team", "operator": "Exists"}]))
    assert tolerations[:2] == [own, {"key": "team", "operator": "Exists"}]   # the template's own, as written
    assert sorted((t["key"], t["effect"]) for t in tolerations[2:]) == [
        ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unschedulable", "NoSchedule")]
