"""`karpy plan` refuses unknown fields in every object it reads, as kubectl's strict field validation does:
exit 2, one line naming the file, the document and the field path; and it says so when given no documents."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest

from karpy.main import main
from karpy.plan import inputs
from karpy.plan.fields import model_of, unknown_fields
from tests.builders import catalog, daemonset, deployment, instance_type, node, pod, provisioner
from tests.plan.conftest import Plan


def typo(obj: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    edit(out)
    return out


def workload(kind: str, api_version: str = "apps/v1") -> dict[str, Any]:
    out = deployment("web", replicas=2)
    out.update(kind=kind, apiVersion=api_version)
    if kind == "Job":
        out["spec"]["parallelism"] = out["spec"].pop("replicas")
    return out


def pdb() -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}


UNKNOWN = [
    pytest.param(typo(pod("web"), lambda p: p["spec"]["containers"][0]["resources"].update(requets={"cpu": "64"})),
                 'Pod "web"', "spec.containers[0].resources.requets", id="pod-requests"),
    pytest.param(typo(pod("web"), lambda p: p["spec"].update(tolerations=[{"key": "k", "efect": "NoSchedule"}])),
                 'Pod "web"', "spec.tolerations[0].efect", id="pod-toleration"),
    pytest.param(typo(node("n1"), lambda n: n["status"].update(allocatible={"cpu": "4"})),
                 'Node "n1"', "status.allocatible", id="node"),
    pytest.param(typo(workload("Deployment"), lambda d: d["spec"]["template"]["spec"].update(nodeSelecter={})),
                 'Deployment "web"', "spec.template.spec.nodeSelecter", id="deployment"),
    pytest.param(typo(workload("ReplicaSet"), lambda d: d["spec"].update(replica=3)),
                 'ReplicaSet "web"', "spec.replica", id="replicaset"),
    pytest.param(typo(workload("StatefulSet"), lambda d: d["metadata"].update(lables={})),
                 'StatefulSet "web"', "metadata.lables", id="statefulset"),
    pytest.param(typo(workload("Job", "batch/v1"), lambda d: d["spec"].update(paralelism=3)),
                 'Job "web"', "spec.paralelism", id="job"),
    pytest.param(typo(daemonset("agent"), lambda d: d["spec"]["template"]["spec"]["containers"][0].update(resourses={})),
                 'DaemonSet "agent"', "spec.template.spec.containers[0].resourses", id="daemonset"),
    pytest.param(typo({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
                      lambda n: n["metadata"].update(label={"a": "b"})), 'Namespace "team"', "metadata.label", id="namespace"),
    pytest.param(typo(pdb(), lambda p: p["spec"].update(minAvailible=1)),
                 'PodDisruptionBudget "web"', "spec.minAvailible", id="pdb"),
    pytest.param(typo(provisioner("default"), lambda p: p["metadata"].update(anotations={})),
                 'Provisioner "default"', "metadata.anotations", id="provisioner-metadata"),
    pytest.param(typo(provisioner("default"), lambda p: p["spec"].update(ttlSecondsAfterEmty=30)),
                 'Provisioner "default"', "spec.ttlSecondsAfterEmty", id="provisioner-spec"),
    pytest.param(typo(catalog(instance_type("m5.large")), lambda c: c["instanceTypes"][0]["offerings"][0].update(prize=1)),
                 "InstanceTypeCatalog", "instanceTypes[0].offerings[0].prize", id="catalog-offering"),
    pytest.param(typo(catalog(instance_type("m5.large")), lambda c: c.update(instanceType=[])),
                 "InstanceTypeCatalog", "instanceType: unknown field", id="catalog-top-level"),
]


@pytest.mark.parametrize(("document", "where", "field"), UNKNOWN)
def test_an_unknown_field_is_refused_naming_file_document_and_path(plan: Plan, tmp_path: Path, document: dict[str, Any],
                                                                   where: str, field: str) -> None:
    run = plan(provisioner("base"), document)
    assert run.code == 2 and run.out == ""
    assert any(line.startswith(f"karpy plan: {tmp_path / 'input-1.yaml'}: document 2 ({where}") and field in line
               for line in run.err.splitlines()), run.err


def test_every_field_of_well_formed_objects_is_known(plan: Plan) -> None:
    run = plan(provisioner("default"), pod("a", tolerations=[{"key": "k", "operator": "Exists"}]), node("n1"),
               workload("Deployment"), workload("Job", "batch/v1"), daemonset("agent"), pdb(),
               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"a": "b"}}})
    assert run.code == 0, run.err


def test_paths_follow_lists_and_maps_of_objects() -> None:
    assert model_of("v1", "Pod") == "V1Pod" and model_of("example.com/v1", "Pod") is None
    body = {"spec": {"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"nmae": "s"}}]}}],
                     "overhead": {"cpu": "1"}, "nodeSelector": {"anything": "goes"}}}
    assert list(unknown_fields(body, "V1Pod")) == ["spec.volumes[0].projected.sources[0].secret.nmae"]


@pytest.mark.parametrize("content", [pytest.param("", id="empty"), pytest.param("---\n# nothing\n---\n", id="separators")])
def test_input_without_documents_is_refused_saying_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      content: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(content)
    assert main(["plan", "-f", str(path)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"karpy plan: no objects passed to plan: {path} holds no documents\n")


@pytest.mark.parametrize("forked_from", [2, 10_000], ids=["forked", "here"])
def test_pods_checked_while_the_rest_is_read_report_in_document_order_their_unknown_fields_first(
        plan: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked_from: int) -> None:
    monkeypatch.setattr(inputs, "FORKED_CHECK_PODS", forked_from)
    unknown_and_unreadable = typo(pod("both", cpu="lots"), lambda p: p["spec"].update(nodeSelecter={}))
    run = plan(provisioner("base"), pod("fine"), pod("unreadable", cpu="lots"), unknown_and_unreadable,
               typo(provisioner("base"), lambda p: p["spec"].update(ttlSecondsAfterEmty=30)),
               typo(pod("typo"), lambda p: p["metadata"].update(lables={})))
    assert run.code == 2 and run.out == ""
    lines = run.err.splitlines()
    assert [line.split("(")[1].split(")")[0] for line in lines] == [
        'Pod "unreadable"', 'Pod "both"', 'Provisioner "base"', 'Pod "typo"'], run.err
    assert "cpu" in lines[0] and "spec.nodeSelecter: unknown field" in lines[1] and "lots" not in lines[1]
    assert "metadata.lables: unknown field" in lines[3]
