"""What kubectl users rely on, against the local cluster with the real kubectl: workload status and
conditions (`kubectl wait`, `kubectl rollout status`), apply merging lists as the API server does,
resource validation and QoS, the events table and `kubectl explain` for Karpenter's CRDs."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from karpy.kubeclient.raw import RawClient, path_of
from tests.builders import pod
from tests.expectations import eventually
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parents[2]
PAUSE = "registry.k8s.io/pause:3.9"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    cluster, kube = start(tmp_path_factory.mktemp("kubectl"), system_nodes=2, boot_delay=0.2)
    yield kube
    kube.api_client.close()
    cluster.stop()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def apply(kube: Kube, obj: dict[str, Any]) -> str:
    return kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj)).stdout


# --- workload status ------------------------------------------------------------------------------

def test_kubectl_wait_available_and_rollout_status_work_for_a_deployment(live: Kube) -> None:
    d = name("web")
    live.kubectl("create", "deployment", d, f"--image={PAUSE}", "--replicas=3")
    live.kubectl("wait", "--for=condition=Available", f"deployment/{d}", "--timeout=20s")
    assert "successfully rolled out" in live.kubectl("rollout", "status", f"deployment/{d}", "--timeout=20s").stdout
    status = live.apps.read_namespaced_deployment(d, "default").status
    assert (status.replicas, status.ready_replicas, status.available_replicas, status.updated_replicas) == (3, 3, 3, 3)
    assert status.observed_generation == live.apps.read_namespaced_deployment(d, "default").metadata.generation
    conditions = {c.type: c for c in status.conditions}
    assert conditions["Available"].reason == "MinimumReplicasAvailable"
    assert conditions["Progressing"].reason == "NewReplicaSetAvailable"
    rs = live.apps.list_namespaced_replica_set("default", label_selector=f"app={d}").items[0]
    assert rs.status.fully_labeled_replicas == 3 and rs.status.available_replicas == 3
    live.kubectl("delete", "deployment", d)


def test_an_unavailable_deployment_is_not_available(live: Kube) -> None:
    d = name("huge")
    template = {"metadata": {"labels": {"app": d}},
                "spec": {"containers": [{"name": "c", "image": PAUSE, "resources": {"requests": {"cpu": "64"}}}]}}
    apply(live, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": d, "namespace": "default"},
                 "spec": {"replicas": 2, "selector": {"matchLabels": {"app": d}}, "template": template}})
    result = live.kubectl("wait", "--for=condition=Available", f"deployment/{d}", "--timeout=3s", check=False)
    assert result.returncode != 0
    def unavailable() -> bool:
        conditions = {c.type: c for c in live.apps.read_namespaced_deployment(d, "default").status.conditions or []}
        return conditions.get("Available") is not None and conditions["Available"].status == "False"
    eventually(unavailable)
    assert "0 of 2 updated replicas are available" in live.kubectl("rollout", "status", f"deployment/{d}", "--timeout=1s", check=False).stdout
    live.kubectl("delete", "deployment", d)


def test_rollout_status_works_for_statefulsets_and_daemonsets(live: Kube) -> None:
    s, ds = name("db"), name("agent")
    template = {"metadata": {"labels": {"app": s}}, "spec": {"containers": [{"name": "c", "image": PAUSE}]}}
    apply(live, {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": s, "namespace": "default"},
                 "spec": {"replicas": 2, "serviceName": s, "selector": {"matchLabels": {"app": s}}, "template": template}})
    apply(live, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": ds, "namespace": "default"},
                 "spec": {"selector": {"matchLabels": {"app": ds}},
                          "template": {**template, "metadata": {"labels": {"app": ds}}}}})
    assert "roll out complete: 2 new pods" in live.kubectl("rollout", "status", f"statefulset/{s}", "--timeout=20s").stdout
    assert "successfully rolled out" in live.kubectl("rollout", "status", f"daemonset/{ds}", "--timeout=20s").stdout
    status = live.apps.read_namespaced_daemon_set(ds, "default").status
    assert status.desired_number_scheduled == status.number_ready == status.number_available == 2
    assert status.updated_number_scheduled == 2
    sts = live.apps.read_namespaced_stateful_set(s, "default").status
    assert sts.ready_replicas == 2 and sts.current_revision == sts.update_revision
    live.kubectl("delete", "statefulset", s)
    live.kubectl("delete", "daemonset", ds)


def test_a_job_whose_pod_succeeded_is_complete(live: Kube) -> None:
    j = name("once")
    live.kubectl("create", "job", j, f"--image={PAUSE}")
    client = RawClient(live.api_client)

    def running_pod() -> str | None:
        mine = [p for p in live.core.list_namespaced_pod("default").items
                if any(r.name == j and r.kind == "Job" for r in p.metadata.owner_references or [])]
        return mine[0].metadata.name if mine and mine[0].status.phase == "Running" else None
    job_pod = eventually(running_pod)
    assert live.kubectl("wait", "--for=condition=Complete", f"job/{j}", "--timeout=1s", check=False).returncode != 0
    # the container exits 0, as its kubelet would report it
    client.patch(path_of("v1", "pods", "default", job_pod, "status"), {"status": {"phase": "Succeeded"}})
    live.kubectl("wait", "--for=condition=Complete", f"job/{j}", "--timeout=20s")
    job = client.get(path_of("batch/v1", "jobs", "default", j))
    assert (job["status"]["succeeded"], job["status"]["active"]) == (1, 0) and job["status"].get("completionTime")
    assert "Complete" in live.kubectl("get", "job", j).stdout
    assert len([p for p in live.core.list_namespaced_pod("default").items
                if any(r.name == j for r in p.metadata.owner_references or [])]) == 1      # no second run
    live.kubectl("delete", "job", j)


# --- apply ----------------------------------------------------------------------------------------

def test_applying_an_edited_webhook_configuration_keeps_every_field(live: Kube) -> None:
    n = name("validation")
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
              "metadata": {"name": n},
              "webhooks": [{"name": "validation.webhook.karpenter.sh", "admissionReviewVersions": ["v1"],
                            "clientConfig": {"caBundle": "Y2E=", "service": {"name": "karpenter", "namespace": "karpenter",
                                                                             "port": 443}},
                            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 10,
                            "rules": [{"apiGroups": ["karpenter.sh"], "apiVersions": ["v1alpha5"],
                                       "operations": ["CREATE", "UPDATE"], "resources": ["provisioners"]}]}]}
    apply(live, config)
    before = live.admission.read_validating_webhook_configuration(n).to_dict()["webhooks"][0]
    edited = json.loads(json.dumps(config))
    edited["webhooks"][0]["timeoutSeconds"] = 5
    apply(live, edited)
    after = live.admission.read_validating_webhook_configuration(n).to_dict()["webhooks"][0]
    assert after["timeout_seconds"] == 5
    assert {k: v for k, v in after.items() if k != "timeout_seconds"} == \
        {k: v for k, v in before.items() if k != "timeout_seconds"}
    assert after["rules"] and after["client_config"]["ca_bundle"] == "Y2E=" and after["failure_policy"] == "Fail"
    assert after["admission_review_versions"] == ["v1"]
    live.kubectl("delete", "validatingwebhookconfiguration", n)


# --- pods: quantities, defaults, QoS ---------------------------------------------------------------

@pytest.mark.parametrize(("resources", "field"), [
    ({"requests": {"cpu": "lots"}}, "spec.containers[0].resources.requests[cpu]"),
    ({"requests": {"memory": "-1Gi"}}, "spec.containers[0].resources.requests[memory]"),
    ({"limits": {"cpu": "-2"}}, "spec.containers[0].resources.limits[cpu]"),
    ({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "spec.containers[0].resources.requests[cpu]"),
])
def test_bad_quantities_are_rejected_naming_the_field(live: Kube, resources: dict[str, Any], field: str) -> None:
    body = pod(name("bad"))
    body["spec"]["containers"][0]["resources"] = resources
    with pytest.raises(ApiException) as e:
        live.core.create_namespaced_pod("default", body)
    assert e.value.status == 422
    assert field in json.loads(e.value.body)["message"]
    result = live.kubectl("apply", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert result.returncode != 0 and field in result.stderr


def test_a_deployment_with_a_bad_quantity_in_its_template_is_rejected(live: Kube) -> None:
    d = name("bad")
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": d, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": d}},
                     "template": {"metadata": {"labels": {"app": d}},
                                  "spec": {"containers": [{"name": "c", "image": PAUSE,
                                                           "resources": {"requests": {"cpu": "lots"}}}]}}}}
    result = live.kubectl("apply", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert result.returncode != 0
    assert "spec.template.spec.containers[0].resources.requests[cpu]" in result.stderr


@pytest.mark.parametrize(("resources", "qos"), [
    ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
    ({"requests": {"cpu": "100m"}}, "Burstable"),
    ({"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
    ({}, "BestEffort"),
])
def test_requests_default_from_limits_and_describe_shows_the_qos_class(live: Kube, resources: dict[str, Any], qos: str) -> None:
    n = name("qos")
    body = pod(n, cpu=None)
    body["spec"]["containers"][0]["resources"] = resources
    created = live.core.create_namespaced_pod("default", body)
    assert created.status.qos_class == qos
    limits = resources.get("limits") or {}
    assert {k: v for k, v in (created.spec.containers[0].resources.requests or {}).items() if k in limits and
            k not in resources.get("requests", {})} == {k: v for k, v in limits.items() if k not in resources.get("requests", {})}
    described = live.kubectl("describe", "pod", n).stdout
    assert re.search(rf"^QoS Class:\s+{qos}$", described, re.MULTILINE), described
    live.core.delete_namespaced_pod(n, "default", grace_period_seconds=0)


# --- events and explain ----------------------------------------------------------------------------

def test_kubectl_get_events_shows_the_real_columns(live: Kube) -> None:
    n = name("seen")
    live.core.create_namespaced_pod("default", pod(n))
    eventually(lambda: f"pod/{n}" in live.kubectl("get", "events").stdout)
    lines = live.kubectl("get", "events").stdout.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    row = next(line for line in lines if f"pod/{n}" in line)
    assert "Normal" in row and "Scheduled" in row and "Successfully assigned" in row
    wide = live.kubectl("get", "events", "-o", "wide").stdout.splitlines()[0]
    assert "COUNT" in wide and "FIRST SEEN" in wide
    live.core.delete_namespaced_pod(n, "default", grace_period_seconds=0)


def test_kubectl_explain_reads_the_crd_schemas(live: Kube) -> None:
    live.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    spec = live.kubectl("explain", "provisioner.spec").stdout
    assert "KIND:       Provisioner" in spec and "requirements" in spec and "ttlSecondsAfterEmpty" in spec
    assert "subnetSelector" in live.kubectl("explain", "awsnodetemplate.spec").stdout
    assert "operator" in live.kubectl("explain", "provisioner.spec.requirements").stdout
