"""The example Provisioner and AWSNodeTemplate users start from (manifests/examples/, docs/getting-started.md)
pass the webhook's validation as written and after its defaulting, and plan nodes for the example workload."""

from __future__ import annotations

import base64
import json
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from karpy.webhook.app import Settings, create_app
from tests.builders import admission_review

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
PATHS = {"Provisioner": "karpenter-sh-v1alpha5-provisioner", "AWSNodeTemplate": "karpenter-k8s-aws-v1alpha1-awsnodetemplate"}


def example(name: str, **variables: str) -> list[dict[str, Any]]:
    """The documents of an example file with its ${VARIABLES} filled as `envsubst` fills them."""
    text = string.Template((EXAMPLES / name).read_text()).substitute(variables)
    return [d for d in yaml.safe_load_all(text) if d]


def test_the_example_provisioner_and_node_template_are_admitted_as_written_and_defaulted() -> None:
    client = create_app(Settings(aws=True)).test_client()
    documents = example("provisioner.yaml", CLUSTER_NAME="prod")
    assert sorted(d["kind"] for d in documents) == ["AWSNodeTemplate", "Provisioner"]
    for doc in documents:
        mutated = client.post(f"/mutate-{PATHS[doc['kind']]}", json=admission_review(doc)).get_json()["response"]
        assert mutated["allowed"] is True, mutated.get("status")
        patch = json.loads(base64.b64decode(mutated["patch"])) if mutated.get("patch") else []
        for candidate in (doc, jsonpatch.apply_patch(doc, patch)):
            answer = client.post(f"/validate-{PATHS[doc['kind']]}", json=admission_review(candidate)).get_json()["response"]
            assert answer["allowed"] is True, (doc["kind"], answer.get("status"))


@pytest.mark.slow      # runs karpy plan as a process
def test_the_example_workload_plans_onto_the_example_provisioner(tmp_path: Path) -> None:
    files = {"provisioner.yaml": example("provisioner.yaml", CLUSTER_NAME="prod"),
             "inflate.yaml": [{**d, "spec": {**d["spec"], "replicas": 5}} for d in example("inflate.yaml")]}
    args = []
    for name, docs in files.items():
        (tmp_path / name).write_text(yaml.safe_dump_all(docs))
        args += ["-f", str(tmp_path / name)]
    result = subprocess.run([sys.executable, "-m", "karpy.main", "plan", *args, "-o", "json"],
                            capture_output=True, text=True, timeout=120, check=True)
    plan = json.loads(result.stdout)
    assert plan["summary"]["scheduled"] == 5 and plan["unschedulable"] == []
    for node in plan["nodes"]:
        assert node["instanceType"].split(".")[0][0] in "cmr" and node["provisioner"] == "default"
