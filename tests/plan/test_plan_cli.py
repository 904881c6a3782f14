"""`karpy plan` as a command: bad input is one line naming file, document and field; never a traceback."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from karpy.commands import PLAN_GC_THRESHOLD
from karpy.controller.provisioning.scheduling.scheduler import Results, Scheduler
from karpy.plan.documents import read_documents
from tests.builders import catalog, deployment, instance_type, pod, provisioner
from tests.plan.conftest import Plan, PlanRun


def karpy_plan(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "karpy.main", "plan", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


@pytest.mark.slow      # runs karpy plan as a process
def test_plan_from_files_and_stdin_as_a_user_would(tmp_path: Path) -> None:
    (tmp_path / "provisioner.yaml").write_text(yaml.safe_dump(provisioner("default")))
    (tmp_path / "app.json").write_text(json.dumps(deployment("web", replicas=3, cpu="1")))
    result = karpy_plan("-f", str(tmp_path / "provisioner.yaml"), "-f", str(tmp_path / "app.json"), "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["scheduled"] == 3
    piped = karpy_plan("-f", "-", "-o", "json", stdin=yaml.safe_dump_all([provisioner("default"), pod("p")]))
    assert json.loads(piped.stdout)["summary"]["scheduled"] == 1


def test_table_output_shows_nodes_unschedulable_pods_and_a_summary(plan: Plan) -> None:
    run = plan(provisioner("default"), pod("web", cpu="1"), pod("huge", cpu="10000"), output="table")
    assert run.code == 0
    lines = run.out.splitlines()
    assert lines[0].split() == ["NODE", "PROVISIONER", "INSTANCE", "TYPE", "ZONE", "CAPACITY", "$/HOUR", "COST", "$/HOUR", "PODS",
                                "REASONS"]
    assert lines[1].split()[-2:] == ["1", "capacity"]
    assert "Unschedulable pods:" in lines
    assert any(line.startswith("default/huge") and "cpu=10k" in line for line in lines)
    assert lines[-1].startswith("1/2 pod(s) scheduled, 1 new node(s), $")


BAD = [
    pytest.param([provisioner("default", requirements=[{"key": "team", "operator": "Within", "values": ["a"]}])],
                 'document 1 (Provisioner "default"): spec.requirements[0].operator: \'Within\' is not one of', id="bad-operator"),
    pytest.param([provisioner("default", ttlSecondsAfterEmpty="soon")], "document 1 (Provisioner \"default\"): spec.ttlSecondsAfterEmpty",
                 id="wrong-type"),
    pytest.param([provisioner("default"), pod("p", cpu="lots")], 'document 2 (Pod "p"): spec.containers[0].resources.requests.cpu',
                 id="bad-quantity"),
    pytest.param([provisioner("default"), {"apiVersion": "v1", "kind": "Node", "metadata": {}}], "document 2 (Node): metadata.name",
                 id="node-without-name"),
    pytest.param([provisioner("default"), deployment("web", replicas=-1)], 'document 2 (Deployment "web"): spec.replicas',
                 id="negative-replicas"),
    pytest.param([provisioner("default"), {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}],
                 'document 2 (Widget "w"): unsupported document example.com/v1/Widget', id="unknown-kind"),
    pytest.param([provisioner("default"), provisioner("default")], "document 2 (Provisioner \"default\"): Provisioner 'default' is given more than once", id="duplicate"),
    pytest.param([catalog(instance_type("x", price=-1))], "instanceTypes[0].offerings[0].price", id="bad-catalog-price"),
    pytest.param([catalog({"name": "x", "offerings": [{"zone": "a", "price": 1}]})], "instanceTypes[0].capacity: missing",
                 id="catalog-without-capacity"),
    pytest.param([provisioner("default"), pod("p", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Near", "values": ["x"]}]}]}}})],
        'document 2 (Pod "p"): spec.affinity.nodeAffinity', id="bad-affinity-operator"),
]


@pytest.mark.parametrize(("documents", "message"), BAD)
def test_invalid_input_is_one_line_per_problem_and_exit_2(tmp_path: Path, documents: list[dict], message: str,
                                                          karpy_plan_here: Callable[..., PlanRun]) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    result = karpy_plan_here("-f", str(path))
    assert result.code == 2
    assert result.out == ""
    assert any(line.startswith(f"karpy plan: {path}: ") and message in line for line in result.err.splitlines()), result.err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("kind: [unclosed", "not valid YAML or JSON at line 2, column 1", id="bad-yaml"),
        pytest.param("- just\n- a list\n", "document 1: not a mapping", id="not-a-mapping"),
        pytest.param(b"\xff\xfe\x00", "not UTF-8", id="binary"),
    ],
)
def test_unreadable_files_are_named(tmp_path: Path, content: str | bytes, message: str,
                                    karpy_plan_here: Callable[..., PlanRun]) -> None:
    path = tmp_path / "plan.yaml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    result = karpy_plan_here("-f", str(path))
    assert result.code == 2
    assert message in result.err


def test_missing_file_and_unknown_catalog_are_named(tmp_path: Path, karpy_plan_here: Callable[..., PlanRun]) -> None:
    result = karpy_plan_here("-f", str(tmp_path / "nope.yaml"))
    assert result.code == 2 and "nope.yaml: No such file or directory" in result.err
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(provisioner("default")))
    result = karpy_plan_here("-f", str(tmp_path / "p.yaml"), "--catalog", "gcp")
    assert result.code == 2 and "--catalog gcp: not a built-in catalog (aws, fake-400) nor a file" in result.err


@pytest.mark.slow      # runs karpy plan as a process
def test_bad_input_as_a_process_is_one_line_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("kind: [unclosed")
    result = karpy_plan("-f", str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"karpy plan: {path}: ") and "Traceback" not in result.stderr


def test_catalog_from_a_file(plan: Plan, tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog(instance_type("tiny", cpu="1", memory="1Gi", price=0.01, zones=("lab-1",)))))
    run = plan(provisioner("default"), pod("p", cpu="500m"), catalog=str(path))
    node = run.json["nodes"][0]
    assert (node["instanceType"], node["zone"], node["pricePerHour"]) == ("tiny", "lab-1", 0.01)


def test_unsupported_but_harmless_kinds_are_ignored_with_a_warning(plan: Plan) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {}}
    run = plan(provisioner("default"), service, pod("p"))
    assert run.code == 0
    assert 'document 2 (Service "web"): ignored' in run.err


def test_no_provisioner_means_every_pod_is_unschedulable(plan: Plan) -> None:
    run = plan(pod("p"))
    assert run.json["unschedulable"] == [{"pod": "default/p", "reason": "no provisioner can launch nodes"}]


def test_what_native_code_prints_while_planning_goes_to_stderr_not_into_the_json() -> None:
    # HiGHS writes a debug line to the process's stdout (file descriptor 1) now and then: as a C library does
    script = ("import os, sys\n"
              "from karpy.commands import native_stdout_to_stderr\n"
              "print('before', flush=True)\n"
              "with native_stdout_to_stderr():\n"
              "    os.write(1, b'solver noise\\n')\n"
              "print('after', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["before", "after"]
    assert "solver noise" in done.stderr


@pytest.mark.parametrize(
    "separator", [pytest.param("\n---\n", id="json-documents"), pytest.param("\n--- \n# a comment\n", id="yaml-among-json")])
def test_json_documents_read_as_their_yaml_would(tmp_path: Path, separator: str) -> None:
    docs = [provisioner("default"), pod("web", cpu="1"), deployment("api", replicas=2, cpu="500m")]
    as_json, as_yaml = tmp_path / "plan.json", tmp_path / "plan.yaml"
    as_json.write_text(separator.join(json.dumps(d) for d in docs))
    as_yaml.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    read = read_documents([str(as_json)])
    assert [d.body for d in read] == [d.body for d in read_documents([str(as_yaml)])] == docs
    assert [d.index for d in read] == [1, 2, 3]



def test_plan_collects_garbage_in_large_steps_and_puts_the_collector_back_as_it_was(
        plan: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []
    solve = Scheduler.solve

    def watched(self: Scheduler, **kwargs: Any) -> Results:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return solve(self, **kwargs)

    monkeypatch.setattr(Scheduler, "solve", watched)
    run = plan(provisioner("default"), pod("web", cpu="1"))
    assert run.code == 0 and run.json["summary"]["scheduled"] == 1
    [(threshold, frozen)] = seen
    assert threshold[0] == PLAN_GC_THRESHOLD and frozen > 0                # while planning: large steps, the input set aside
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0     # after: as it was


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_json_output_is_laid_out_as_the_standard_library_lays_it_out_in_any_terminal(
        monkeypatch: pytest.MonkeyPatch, encoding: str) -> None:
    import io

    from karpy.commands import print_json

    doc = {"nodes": [{"name": "n-1", "costPerHour": 0.0521, "pods": ["default/a"], "labels": {}, "taints": []}],
           "summary": {"nodes": 1, "reason": "zone \u2014 us-east-1a"}}
    out = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    monkeypatch.setattr(sys, "stdout", out)
    print_json(doc)
    out.flush()
    written = out.buffer.getvalue().decode(encoding)
    assert json.loads(written) == doc
    expected = json.dumps(doc, indent=2, ensure_ascii=encoding != "utf-8") + "\n"
    assert written == expected                         # UTF-8 where it can be written, else \u escapes
