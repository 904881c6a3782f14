"""The committed CRDs (plain manifests and the chart's copy) are exactly what hack/generate_crds.py makes from apis/."""

from __future__ import annotations

from pathlib import Path

import yaml

from karpy.apis.crds import generate

ROOT = Path(__file__).resolve().parent.parent


def test_committed_crds_equal_generated_ones() -> None:
    for folder in ("manifests/crds", "manifests/chart/crds"):
        for name, text in generate().items():
            committed = (ROOT / folder / name).read_text()
            assert committed == text, f"{folder}/{name} is stale: run python3 hack/generate_crds.py"


def test_both_api_generations_are_installed_by_the_chart_and_the_plain_manifests() -> None:
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    names = set()
    for path in (ROOT / "manifests" / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        names.add(crd["metadata"]["name"])
        assert f"crds/{path.name}" in kustomization["resources"], path.name
        assert (ROOT / "manifests" / "chart" / "crds" / path.name).exists(), path.name
    assert {"provisioners.karpenter.sh", "awsnodetemplates.karpenter.k8s.aws", "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"} <= names
    nodepools = yaml.safe_load((ROOT / "manifests" / "crds" / "karpenter.sh_nodepools.yaml").read_text())
    (version,) = nodepools["spec"]["versions"]
    assert version["name"] == "v1" and "status" in version["subresources"]
    assert "x-kubernetes-validations" in version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_crd_schemas_are_structural_and_reject_unknown_spec_fields() -> None:
    crd = yaml.safe_load((ROOT / "manifests/crds/karpenter.sh_provisioners.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert "x-kubernetes-preserve-unknown-fields" not in spec
    assert spec["properties"]["limits"]["properties"]["resources"]["additionalProperties"]["x-kubernetes-int-or-string"]
    assert spec["properties"]["requirements"]["items"]["required"] == ["key", "operator"]
    assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True

    def walk(node: object) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node and "anyOf" not in node or node.get("x-kubernetes-int-or-string")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)


def test_scheduler_configuration_names_the_extender_and_never_blocks_on_it() -> None:
    config = yaml.safe_load((ROOT / "manifests" / "extender" / "scheduler-config.yaml").read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
    (extender,) = config["extenders"]
    assert extender["urlPrefix"].endswith("/scheduler")
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == ("filter", "prioritize", "bind")
    assert extender["ignorable"] is True and extender["nodeCacheCapable"] is True
    assert extender["weight"] >= 1 and extender["httpTimeout"].endswith("s")
    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "manifests" / "extender" / "deployment.yaml").read_text())}
    service_port = docs["Service"]["spec"]["ports"][0]["port"]
    assert f":{service_port}/scheduler" in extender["urlPrefix"]
    assert f"{docs['Service']['metadata']['name']}.{docs['Service']['metadata']['namespace']}.svc" in extender["urlPrefix"]
    args = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "extender" and "--in-cluster" in args
