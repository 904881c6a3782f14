"""The Helm chart and the plain manifests: parseable, least privilege, and the values Karpenter users pass."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.gotemplate import Renderer, TemplateError

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "manifests" / "chart"


def test_values_accept_the_flags_karpenter_users_already_pass() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {"clusterName", "clusterEndpoint", "replicas", "logLevel"} <= set(values)
    assert "resources" in values["controller"]
    assert "defaultInstanceProfile" in values["aws"]
    assert {"create", "name"} <= set(values["serviceAccount"])
    templates = "".join(p.read_text() for p in (CHART / "templates").iterdir())
    for ref in (".Values.clusterName", ".Values.clusterEndpoint", ".Values.aws.defaultInstanceProfile",
                ".Values.serviceAccount.create", ".Values.serviceAccount.name"):
        assert ref in templates, ref
    flags = set(re.findall(r"- (--[a-z-]+)", (CHART / "templates" / "controller.yaml").read_text()))
    from karpy.main import build_parser

    controller = build_parser()._subparsers._group_actions[0].choices["controller"]
    known = {o for a in controller._actions for o in a.option_strings}
    assert flags <= known, flags - known


def test_controller_rbac_is_least_privilege() -> None:
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "controller" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if rule["resources"] == ["pods"]:
            assert "delete" not in rule["verbs"]          # pods are evicted, never deleted
    assert any(r["resources"] == ["pods/binding", "pods/eviction"] for r in role["rules"])


def test_plain_manifests_parse() -> None:
    for path in (ROOT / "manifests").rglob("*.yaml"):
        if "templates" in path.parts:
            continue
        assert all(isinstance(d, dict) for d in yaml.safe_load_all(path.read_text()) if d is not None), path


# The chart, rendered without helm (tests/gotemplate.py renders the subset of Go templates it uses),
# against the plain manifests. Checked: every value a template reads exists in values.yaml, every value
# in values.yaml is read, and with the values that reproduce the plain manifests, each plain object has a
# chart object of the same kind and name whose spec (Deployments: the pod spec in full, so args, ports,
# probes, env, resources, securityContexts, volumes, affinity; Services, PDBs, RBAC and webhooks: all of
# it except the caBundle, which differs by construction) is equal. Not checked: helm's own parser (a
# construct outside the subset fails here rather than passing), and anything only a live install shows.

PLAIN = [ROOT / "manifests" / "controller" / "deployment.yaml", ROOT / "manifests" / "controller" / "rbac.yaml",
         ROOT / "manifests" / "webhook" / "webhook.yaml", ROOT / "manifests" / "extender" / "deployment.yaml"]


def render(cluster: list[dict[str, Any]] | None = None,
           **overrides: Any) -> tuple[dict[tuple[str, str], dict[str, Any]], Renderer]:
    """The chart's objects by (kind, name) with `overrides` (a__b for a.b) over values.yaml; `cluster` holds the
    objects `lookup` finds, as on a `helm upgrade`."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in overrides.items():
        node = values
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    renderer = Renderer(CHART, values, release="karpy", namespace="karpenter", cluster=cluster)
    objects = {}
    for template in sorted((CHART / "templates").glob("*.yaml")):
        for doc in yaml.safe_load_all(renderer.render(template.read_text())):
            if doc:
                objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects, renderer


def plain_objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for p in PLAIN for d in yaml.safe_load_all(p.read_text()) if d}


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["metadata"] = {k: v for k, v in doc["metadata"].items() if k in ("name", "namespace")}
    for hook in doc.get("webhooks", []):
        hook["clientConfig"].pop("caBundle", None)
    if doc["kind"] == "Deployment":
        for container in doc["spec"]["template"]["spec"]["containers"]:
            container.pop("imagePullPolicy", None)
            container["image"] = "IMAGE"
    return doc


def flatten(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict) and node:
        return set().union(*(flatten(v, f"{prefix}{k}.") for k, v in node.items())) | {prefix.rstrip(".")}
    return {prefix.rstrip(".")}


def test_every_value_the_templates_read_exists_and_every_value_is_read() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    _, renderer = render(clusterName="c", clusterEndpoint="https://c", aws__defaultInstanceProfile="p",
                         aws__region="r", aws__interruptionQueue="q", extender__enabled=True,
                         extender__secondScheduler__enabled=True, extender__clusterIP="10.0.0.1")
    _, with_secret = render(clusterName="c", clusterEndpoint="https://c", webhook__tls__secretName="s", webhook__tls__caBundle="Y2E=")
    read = renderer.referenced | with_secret.referenced
    known = flatten(values) - {""}
    assert read <= known, read - known
    leaves = {p for p in known if not any(q.startswith(p + ".") for q in known)}
    unread = {p for p in leaves if not any(p == r or p.startswith(r + ".") for r in read)}
    assert not unread, unread


# The values the plain manifests correspond to: the placeholders they ask the user to replace, the extender on.
PLAIN_VALUES: dict[str, Any] = dict(clusterName="CLUSTER_NAME", clusterEndpoint="CLUSTER_ENDPOINT", cloudProvider="aws",
                                    extender__enabled=True)


def test_the_chart_and_the_plain_manifests_hold_the_same_objects_both_ways() -> None:
    plain = plain_objects()
    chart, _ = render(**PLAIN_VALUES)
    for key, want in plain.items():
        assert key in chart, f"the chart has no {key[0]} {key[1]}"
        assert comparable(chart[key]) == comparable(want), key
    # the chart's objects that are not plain manifests, and why: the Secret is made by the user (the steps in
    # docs/install.md), the scheduler configuration is a file given to kube-scheduler (compared below)
    assert set(chart) - set(plain) == {("Secret", "karpy-webhook-cert"), ("ConfigMap", "karpy-extender-scheduler-config")}
    scheduler = yaml.safe_load(chart[("ConfigMap", "karpy-extender-scheduler-config")]["data"]["scheduler-config.yaml"])
    assert scheduler == yaml.safe_load((ROOT / "manifests" / "extender" / "scheduler-config.yaml").read_text())


@pytest.mark.slow      # starts the controller against a moto server
def test_the_plain_controller_runs_the_aws_provider_once_the_cluster_is_named() -> None:
    (container,) = plain_objects()[("Deployment", "karpy-controller")]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--cloud-provider") + 1] == "aws"
    assert args[args.index("--cluster-name") + 1] == "CLUSTER_NAME"
    assert args[args.index("--cluster-endpoint") + 1] == "CLUSTER_ENDPOINT"
    result = subprocess.run([sys.executable, "-m", "karpy.main", *args], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "AWS_REGION": "us-east-1"})
    assert result.returncode == 2 and "--cluster-endpoint 'CLUSTER_ENDPOINT': not an https:// URL" in result.stderr


def test_cluster_endpoint_is_required_with_the_aws_provider() -> None:
    with pytest.raises(TemplateError, match="clusterEndpoint is required with cloudProvider aws"):
        render(clusterName="c", cloudProvider="aws")
    objects, _ = render(clusterName="c", cloudProvider="fake")
    assert "--cluster-endpoint" not in objects[("Deployment", "karpy-controller")]["spec"]["template"]["spec"][
        "containers"][0]["args"]


def test_an_upgrade_keeps_the_webhook_certificate_the_install_made() -> None:
    first, _ = render(clusterName="c", clusterEndpoint="https://c")
    secret = first[("Secret", "karpy-webhook-cert")]
    installed = {**secret, "metadata": {**secret["metadata"], "resourceVersion": "1"}}
    upgrades = [render(cluster=[installed], clusterName="c", clusterEndpoint="https://c", replicas=n)[0] for n in (1, 3)]
    for upgrade in [first, *upgrades]:
        assert upgrade[("Secret", "karpy-webhook-cert")]["data"] == secret["data"]
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            config = next(d for k, d in upgrade.items() if k[0] == kind)
            assert {h["clientConfig"]["caBundle"] for h in config["webhooks"]} == {secret["data"]["ca.crt"]}
    # without the Secret (a fresh install, or `helm template`) a new CA is made
    again, _ = render(clusterName="c", clusterEndpoint="https://c")
    assert again[("Secret", "karpy-webhook-cert")]["data"]["ca.crt"] != secret["data"]["ca.crt"]
    # a Secret that lacks a part is replaced whole, never mixed with new parts
    broken = {**installed, "data": {k: v for k, v in secret["data"].items() if k != "tls.key"}}
    mended, _ = render(cluster=[broken], clusterName="c", clusterEndpoint="https://c")
    assert mended[("Secret", "karpy-webhook-cert")]["data"]["ca.crt"] != secret["data"]["ca.crt"]


def test_a_second_scheduler_calls_the_extender_for_the_pods_that_name_it() -> None:
    assert ("Deployment", "karpy-scheduler") not in render(clusterName="c", clusterEndpoint="https://c",
                                                           extender__enabled=True)[0]      # off unless asked
    objects, _ = render(clusterName="c", clusterEndpoint="https://c", extender__enabled=True,
                        extender__secondScheduler__enabled=True)
    pod = objects[("Deployment", "karpy-scheduler")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][0] == "kube-scheduler" and container["image"].startswith("registry.k8s.io/kube-scheduler:")
    config_path = next(a.split("=", 1)[1] for a in container["command"] if a.startswith("--config="))
    mount = next(m for m in container["volumeMounts"] if config_path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    config_map = objects[("ConfigMap", volume["configMap"]["name"])]
    config = yaml.safe_load(config_map["data"][config_path.rsplit("/", 1)[1]])
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == ["karpy-scheduler"]      # pods opt in by this name
    lease = config["leaderElection"]
    assert lease["leaderElect"] is True and (lease["resourceName"], lease["resourceNamespace"]) == ("karpy-scheduler", "karpenter")
    leases = objects[("Role", "karpy-scheduler-leader-election")]["rules"]
    assert any(lease["resourceName"] in r.get("resourceNames", []) and "update" in r["verbs"] for r in leases)
    service = objects[("Service", "karpy-extender")]
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == f"http://karpy-extender.karpenter.svc:{service['spec']['ports'][0]['port']}/scheduler"
    # the same extender settings as the configuration for the cluster's own kube-scheduler
    plain = yaml.safe_load((ROOT / "manifests" / "extender" / "scheduler-config.yaml").read_text())["extenders"][0]
    assert {k: v for k, v in extender.items() if k != "urlPrefix"} == {k: v for k, v in plain.items() if k != "urlPrefix"}
    roles = {o["roleRef"]["name"] for k, o in objects.items() if k[0] in ("ClusterRoleBinding", "RoleBinding")
             and any(s["name"] == "karpy-scheduler" for s in o["subjects"])}
    assert {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"} <= roles


def test_a_pinned_cluster_ip_reaches_the_extender_without_cluster_dns() -> None:
    """A kube-scheduler on the host network resolves no cluster names: both configurations name the IP."""
    objects, _ = render(clusterName="c", clusterEndpoint="https://c", extender__enabled=True,
                        extender__secondScheduler__enabled=True, extender__clusterIP="10.100.0.50")
    assert objects[("Service", "karpy-extender")]["spec"]["clusterIP"] == "10.100.0.50"
    for name in ("karpy-extender-scheduler-config", "karpy-scheduler-config"):
        (extender,) = yaml.safe_load(objects[("ConfigMap", name)]["data"]["scheduler-config.yaml"])["extenders"]
        assert extender["urlPrefix"] == "http://10.100.0.50:8888/scheduler", name


def test_consolidation_is_steered_only_when_asked_and_the_extender_is_installed() -> None:
    def controller_args(**values: Any) -> list[str]:
        objects, _ = render(clusterName="c", clusterEndpoint="https://c", **values)
        return objects[("Deployment", "karpy-controller")]["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--consolidation-steering" in controller_args(extender__enabled=True, extender__steerConsolidation=True)
    assert "--consolidation-steering" not in controller_args(extender__enabled=True)
    assert "--consolidation-steering" not in controller_args(extender__steerConsolidation=True)


def test_every_pod_and_container_runs_locked_down() -> None:
    objects, _ = render(clusterName="c", clusterEndpoint="https://c", extender__enabled=True,
                        extender__secondScheduler__enabled=True)
    deployments = [d for d in objects.values() if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"karpy-controller", "karpy-webhook", "karpy-extender",
                                                            "karpy-scheduler"}
    for d in deployments + [d for d in plain_objects().values() if d["kind"] == "Deployment"]:
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
            assert sc["runAsNonRoot"] is True and sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]       # the one writable place


def test_generated_webhook_certificate_is_signed_by_the_injected_bundle() -> None:
    import base64

    from cryptography import x509

    objects, _ = render(clusterName="c", clusterEndpoint="https://c")
    secret = objects[("Secret", "karpy-webhook-cert")]
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "karpy-webhook.karpenter.svc" in names
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        config = next(d for k, d in objects.items() if k[0] == kind)
        assert {h["clientConfig"]["caBundle"] for h in config["webhooks"]} == {secret["data"]["ca.crt"]}


def test_a_user_secret_replaces_the_generated_one() -> None:
    objects, _ = render(clusterName="c", clusterEndpoint="https://c", webhook__tls__secretName="mine", webhook__tls__caBundle="Y2E=")
    assert not any(k[0] == "Secret" for k in objects)
    pod = objects[("Deployment", "karpy-webhook")]["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "mine"}} in pod["volumes"]
    config = objects[("ValidatingWebhookConfiguration", "validation.webhook.karpenter.sh")]
    assert {h["clientConfig"]["caBundle"] for h in config["webhooks"]} == {"Y2E="}


def test_image_and_karpenter_values_reach_the_pods() -> None:
    objects, _ = render(clusterName="prod", clusterEndpoint="https://api.prod", aws__defaultInstanceProfile="KarpenterNode",
                        image__repository="registry.example.com/karpy", image__tag="v1", replicas=3,
                        serviceAccount__annotations={"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/k"})
    controller = objects[("Deployment", "karpy-controller")]
    assert controller["spec"]["replicas"] == 3
    (container,) = controller["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/karpy:v1"
    args = container["args"]
    for flag, value in (("--cluster-name", "prod"), ("--cluster-endpoint", "https://api.prod"),
                        ("--default-instance-profile", "KarpenterNode")):
        assert args[args.index(flag) + 1] == value
    assert objects[("ServiceAccount", "karpy")]["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/k"}
    webhook = objects[("Deployment", "karpy-webhook")]["spec"]["template"]["spec"]["containers"][0]
    assert webhook["image"] == "registry.example.com/karpy:v1"


@pytest.mark.slow      # runs kubectl kustomize
def test_the_plain_manifests_take_the_image_from_one_place(tmp_path: Path) -> None:
    """`kustomize edit set image` rewrites manifests/kustomization.yaml's images entry; kubectl's built-in
    kustomize then names that image in every Deployment."""
    import shutil
    import subprocess

    shutil.copytree(ROOT / "manifests", tmp_path / "m", ignore=shutil.ignore_patterns("chart"))
    kustomization = yaml.safe_load((tmp_path / "m" / "kustomization.yaml").read_text())
    kustomization["images"] = [{"name": "karpy", "newName": "registry.example.com/karpy", "newTag": "v9"}]
    (tmp_path / "m" / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    out = subprocess.run(["kubectl", "kustomize", str(tmp_path / "m")], capture_output=True, text=True, check=True).stdout
    deployments = [d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {"karpy-controller", "karpy-webhook"}
    assert {c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]} == {"registry.example.com/karpy:v9"}
    listed = set(kustomization["resources"])
    # not Kubernetes objects to install: the chart, the AWS stack, the examples users copy
    shipped = {str(p.relative_to(ROOT / "manifests")) for p in (ROOT / "manifests").rglob("*.yaml")
               if not {"chart", "aws", "examples"} & set(p.parts) and p.name != "kustomization.yaml"}
    assert shipped - listed == {"extender/deployment.yaml", "extender/scheduler-config.yaml"}   # optional, by design


def test_no_webhook_is_configured_for_the_v1_objects() -> None:
    """As in Karpenter v1: NodePools, NodeClaims and EC2NodeClasses are validated by their CRDs' CEL rules alone."""
    configurations = [o for (kind, _), o in plain_objects().items()
                      if kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")]
    served = {(group, version, resource) for c in configurations for hook in c["webhooks"] for rule in hook["rules"]
              for group in rule["apiGroups"] for version in rule["apiVersions"] for resource in rule["resources"]}
    assert served == {("karpenter.sh", "v1alpha5", "provisioners"), ("karpenter.k8s.aws", "v1alpha1", "awsnodetemplates")}


def test_every_value_the_docs_set_is_a_value_of_the_chart() -> None:
    """The `--set` flags of the install steps in the docs name values the chart has, and the getting-started
    install renders (placeholders for the shell variables)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    known = flatten(values) - {""}
    for doc in ("getting-started.md", "install.md", "extender.md"):
        text = (ROOT / "docs" / doc).read_text()
        keys = re.findall(r"--set ([A-Za-z][\w.]*(?:\.\"[^\"]+\")?)=", text)
        assert keys, doc
        for key in keys:
            path = key.split('."')[0]               # serviceAccount.annotations."eks\\.amazonaws\\.com/role-arn"
            assert path in known, f"docs/{doc}: --set {key}: the chart has no value {path}"
    objects, _ = render(clusterName="demo", clusterEndpoint="https://api.demo", aws__defaultInstanceProfile="p",
                        aws__interruptionQueue="demo",
                        serviceAccount__annotations={"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"})
    args = objects[("Deployment", "karpy-controller")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--interruption-queue") + 1] == "demo"
