"""`karpy convert`: v1alpha5 Provisioners and AWSNodeTemplates as v1 NodePools and EC2NodeClasses.

Every Provisioner and AWSNodeTemplate fixture of the test suite that v0.16 accepts converts to objects Karpenter
v1's CRDs accept (schema and CEL rules, in-process); a few conversions are checked field for field; the command
prints YAML or JSON and refuses bad input with one line naming file, document and field."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.apis.awsnodetemplate_validation import read_awsnodetemplate
from karpy.apis.provisioner_defaults import default_provisioner
from karpy.apis.provisioner_validation import read_provisioner
from karpy.apis.v1.convert import ConvertError, convert
from karpy.main import main
from tests.builders import awsnodetemplate, provisioner
from tests.simulator.test_v1_validation import errors as v1_errors

ROOT = Path(__file__).resolve().parents[2]
BUILDERS = {"provisioner": provisioner, "awsnodetemplate": awsnodetemplate}


def suite_fixtures() -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for every v1alpha5 Provisioner and v1alpha1 AWSNodeTemplate the tests write: YAML texts
    holding `kind: Provisioner` and the builders' calls whose arguments are literals."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():      # this file's own unconvertible cases are checked below
            continue
        text = path.read_text()
        if not re.search(r"kind: Provisioner|\b(provisioner|awsnodetemplate)\(", text):
            continue
        tree = ast.parse(text)
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "kind: Provisioner" in node.value:
                try:
                    docs = [d for d in yaml.safe_load_all(node.value) if isinstance(d, dict)]
                except yaml.YAMLError:
                    continue
                found += [(f"{where}:{node.lineno}", d) for d in docs if d.get("kind") in ("Provisioner", "AWSNodeTemplate")]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS:
                try:
                    args = [ast.literal_eval(a) for a in node.args]
                    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
                except ValueError:
                    continue
                if any(k.arg is None for k in node.keywords):
                    continue
                found.append((f"{where}:{node.lineno}", BUILDERS[node.func.id](*args, **kwargs)))
    return found


def accepted_by_v016(obj: dict[str, Any]) -> bool:
    if obj["kind"] == "Provisioner":
        return read_provisioner(default_provisioner(obj))[0] is not None
    return read_awsnodetemplate(obj)[0] is not None


FIXTURES = [f for f in suite_fixtures() if accepted_by_v016(f[1])]


def test_the_suite_has_many_v1alpha5_fixtures() -> None:
    kinds = [obj["kind"] for _, obj in FIXTURES]
    assert kinds.count("Provisioner") >= 20 and kinds.count("AWSNodeTemplate") >= 3, kinds


@pytest.mark.parametrize(("where", "obj"), FIXTURES, ids=[f"{w}-{o['kind']}" for w, o in FIXTURES])
def test_every_suite_fixture_converts_to_objects_the_v1_crds_accept(where: str, obj: dict[str, Any]) -> None:
    inputs = [obj]
    if obj["kind"] == "Provisioner" and "provider" not in obj["spec"]:
        # the node class it refers to, so kubelet settings have their v1 home
        ref = (obj["spec"].get("providerRef") or {}).get("name") or obj["metadata"]["name"]
        inputs.append(awsnodetemplate(ref))
    converted = convert(inputs)
    assert [o["kind"] for o in converted][:1] == [{"Provisioner": "NodePool", "AWSNodeTemplate": "EC2NodeClass"}[obj["kind"]]]
    for out in converted:
        assert v1_errors(out) == [], (where, out)


# --- exact conversions ---------------------------------------------------------------------------------------

PROVISIONER = """
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
  labels: {owner: platform}
spec:
  providerRef:
    name: default
  taints:
    - key: example.com/special-taint
      effect: NoSchedule
  startupTaints:
    - key: example.com/another-taint
      effect: NoSchedule
  labels:
    billing-team: my-team
  requirements:
    - key: "karpenter.k8s.aws/instance-category"
      operator: In
      values: ["c", "m", "r"]
    - key: "karpenter.k8s.aws/instance-generation"
      operator: Gt
      values: ["2"]
    - key: "topology.kubernetes.io/zone"
      operator: In
      values: ["us-west-2a", "us-west-2b"]
  kubeletConfiguration:
    clusterDNS: ["10.0.1.100"]
    containerRuntime: containerd
    systemReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi}
    evictionHard: {memory.available: 5%}
    maxPods: 20
  limits:
    resources:
      cpu: "1000"
      memory: 1000Gi
  ttlSecondsUntilExpired: 2592000
  ttlSecondsAfterEmpty: 30
  weight: 10
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata:
  name: default
spec:
  amiFamily: Bottlerocket
  subnetSelector:
    karpenter.sh/discovery: karpenter-demo
  securityGroupSelector:
    karpenter.sh/discovery: "karpenter-demo,shared"
  blockDeviceMappings:
    - deviceName: /dev/xvdb
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        deleteOnTermination: true
  tags:
    MyTag: "1234"
  userData: |
    [settings.kubernetes]
    kube-api-qps = 30
"""

EXPECTED = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  labels: {owner: platform}
spec:
  template:
    metadata:
      labels: {billing-team: my-team}
    spec:
      requirements:
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['2']}
      - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a, us-west-2b]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h0m0s
      taints:
      - {key: example.com/special-taint, effect: NoSchedule}
      startupTaints:
      - {key: example.com/another-taint, effect: NoSchedule}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 30s}
  limits: {cpu: '1000', memory: 1000Gi}
  weight: 10
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiFamily: Bottlerocket
  amiSelectorTerms:
  - {alias: bottlerocket@latest}
  subnetSelectorTerms:
  - tags: {karpenter.sh/discovery: karpenter-demo}
  securityGroupSelectorTerms:
  - tags: {karpenter.sh/discovery: karpenter-demo}
  - tags: {karpenter.sh/discovery: shared}
  role: $KARPENTER_NODE_ROLE
  tags: {MyTag: '1234'}
  userData: |
    [settings.kubernetes]
    kube-api-qps = 30
  blockDeviceMappings:
  - deviceName: /dev/xvdb
    ebs: {deleteOnTermination: true, volumeSize: 100Gi, volumeType: gp3}
  kubelet:
    clusterDNS: [10.0.1.100]
    maxPods: 20
    systemReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi}
    evictionHard: {memory.available: 5%}
"""


def test_a_provisioner_and_its_template_convert_as_karpenter_convert_maps_them() -> None:
    converted = convert(list(yaml.safe_load_all(PROVISIONER)))
    assert converted == list(yaml.safe_load_all(EXPECTED))
    assert all(v1_errors(o) == [] for o in converted)


def test_consolidation_an_inline_provider_and_ami_selectors() -> None:
    pool, node_class = convert([provisioner("web", consolidation={"enabled": True}, provider={
        "instanceProfile": "KarpenterNodeInstanceProfile", "subnetSelector": {"aws-ids": "subnet-1, subnet-2"},
        "securityGroupSelector": {"Name": "a,b", "team": "x"}, "metadataOptions": {"httpTokens": "optional"}})])
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
    assert pool["spec"]["template"]["spec"]["expireAfter"] == "Never"
    assert pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "web" == node_class["metadata"]["name"]
    assert node_class["spec"]["instanceProfile"] == "KarpenterNodeInstanceProfile" and "role" not in node_class["spec"]
    assert node_class["spec"]["subnetSelectorTerms"] == [{"id": "subnet-1"}, {"id": "subnet-2"}]
    assert node_class["spec"]["securityGroupSelectorTerms"] == [{"tags": {"Name": "a", "team": "x"}},
                                                                {"tags": {"Name": "b", "team": "x"}}]
    assert node_class["spec"]["metadataOptions"] == {"httpTokens": "optional"}
    (template,) = convert([awsnodetemplate("custom", amiFamily="Custom",
                                           amiSelector={"aws::name": "my-ami-*", "aws::owners": "self,123456789012"})])
    assert template["spec"]["amiSelectorTerms"] == [{"owner": "self", "name": "my-ami-*"},
                                                    {"owner": "123456789012", "name": "my-ami-*"}]
    for obj in (pool, node_class, template):
        assert v1_errors(obj) == [], obj


def test_kubectl_get_output_converts_without_the_server_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl get provisioners,awsnodetemplates -o yaml` prints a List of stored objects."""
    stored = {"uid": "1234", "resourceVersion": "7", "generation": 2, "creationTimestamp": "2024-01-01T00:00:00Z",
              "finalizers": ["karpenter.sh/termination"],
              "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"}}
    listed = {"apiVersion": "v1", "kind": "List", "items": [
        {**provisioner("p", providerRef={"name": "t"}), "status": {"resources": {"cpu": "4"}}},
        {**awsnodetemplate("t"), "status": {"subnets": [{"id": "subnet-1", "zone": "us-west-2a"}]}}]}
    for item in listed["items"]:
        item["metadata"].update(stored)
    (tmp_path / "list.yaml").write_text(yaml.safe_dump(listed))
    assert main(["convert", "-f", str(tmp_path / "list.yaml")]) == 0
    pool, node_class = yaml.safe_load_all(capsys.readouterr().out)
    assert pool["metadata"] == {"name": "p", "annotations": {"team": "a"}}
    assert node_class["metadata"] == {"name": "t", "annotations": {"team": "a"}}
    assert "status" not in pool and "status" not in node_class


def test_a_provisioner_without_ttls_keeps_its_nodes_and_other_documents_pass_through() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    pool, *rest = convert([provisioner("quiet", providerRef={"name": "t"}), service])
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"}
    assert rest == [service]


@pytest.mark.parametrize(("inputs", "index", "message"), [
    pytest.param([awsnodetemplate("lt", launchTemplate="my-template", securityGroupSelector=None)], 0, "spec.launchTemplate: Karpenter v1 launches "
                 "without launch templates", id="launch-template"),
    pytest.param([awsnodetemplate("u", amiFamily="Ubuntu")], 0, "spec.amiFamily: Ubuntu is not an AMI family of "
                 "Karpenter v1", id="ubuntu"),
    pytest.param([provisioner("k", providerRef={"name": "t"}, kubeletConfiguration={"maxPods": 5})], 0,
                 'spec.kubeletConfiguration: Karpenter v1 keeps kubelet settings on the EC2NodeClass: convert '
                 'AWSNodeTemplate "t" in the same run', id="kubelet-without-template"),
    pytest.param([provisioner("a", providerRef={"name": "t"}, kubeletConfiguration={"maxPods": 5}),
                  provisioner("b", providerRef={"name": "t"}, kubeletConfiguration={"maxPods": 6}), awsnodetemplate("t")],
                 1, 'spec.kubeletConfiguration: differs from Provisioner "a"\'s, which shares AWSNodeTemplate "t"',
                 id="kubelet-conflict"),
    pytest.param([provisioner("bad", ttlSecondsAfterEmpty=-1)], 0, "spec.ttlSecondsAfterEmpty: cannot be negative",
                 id="invalid-provisioner"),
    pytest.param([awsnodetemplate("web"), provisioner("web", provider={"subnetSelector": {"a": "b"},
                                                                       "securityGroupSelector": {"a": "b"}})],
                 1, 'spec.provider: EC2NodeClass "web" would also come from document 1', id="inline-provider-name-clash"),
])
def test_inputs_v1_cannot_express_are_refused_naming_the_field(inputs: list[dict[str, Any]], index: int,
                                                               message: str) -> None:
    with pytest.raises(ConvertError) as caught:
        convert(inputs)
    (problem,) = caught.value.problems
    assert problem.index == index and str(problem.error).startswith(message), str(problem.error)


# --- the command ---------------------------------------------------------------------------------------------

def test_the_command_prints_yaml_by_default_and_json_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v1alpha5.yaml"
    path.write_text(PROVISIONER)
    assert main(["convert", "-f", str(path)]) == 0
    out = capsys.readouterr().out
    assert list(yaml.safe_load_all(out)) == list(yaml.safe_load_all(EXPECTED))
    assert re.search(r"^---$", out, re.MULTILINE)
    assert main(["convert", "-f", str(path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "List" and doc["items"] == list(yaml.safe_load_all(EXPECTED))


def test_the_command_refuses_invalid_input_with_one_line_naming_file_document_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([awsnodetemplate("ok"), provisioner("bad", providerRef={"name": "ok"},
                                                                           ttlSecondsUntilExpired=-5)]))
    assert main(["convert", "-f", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f'karpy convert: {path}: document 2 (Provisioner "bad"): '
                                         "spec.ttlSecondsUntilExpired: cannot be negative (got -5)"]
    path.write_text("kind: [unclosed\n")
    assert main(["convert", "-f", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"karpy convert: {path}: not valid YAML or JSON")
