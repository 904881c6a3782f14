"""`kubectl apply` of Provisioners through the local cluster's admission: karpy's webhook over TLS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.conftest import Server
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parents[2]
DEMO = """apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
spec:
  requirements:
    - key: karpenter.sh/capacity-type
      operator: In
      values: ["spot", "on-demand"]
  limits:
    resources:
      cpu: 1000
  ttlSecondsAfterEmpty: 30
"""


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory, webhook_server: Server) -> Iterator[Kube]:
    """A cluster installed as docs/install.md does it on the local cluster: CRDs, then the webhook
    configurations that `karpy certs inject-ca --url` points at the running webhook."""
    cluster, kube = start(tmp_path_factory.mktemp("hooked"), system_nodes=0)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
    rendered = subprocess.run(
        [sys.executable, "-m", "karpy.main", "certs", "inject-ca", "--ca", str(webhook_server.ca),
         "--url", webhook_server.base_url, "-f", str(ROOT / "manifests" / "webhook" / "webhook.yaml")],
        capture_output=True, text=True, check=True).stdout
    assert {d["kind"] for d in yaml.safe_load_all(rendered)} == {"ValidatingWebhookConfiguration",
                                                                   "MutatingWebhookConfiguration"}
    kube.kubectl("apply", "-f", "-", input=rendered)
    yield kube
    kube.api_client.close()
    cluster.stop()


def test_apply_is_defaulted_by_the_mutating_webhook(hooked: Kube, tmp_path: Path) -> None:
    manifest = tmp_path / "provisioner.yaml"
    manifest.write_text(DEMO)
    out = hooked.kubectl("apply", "-f", str(manifest)).stdout
    assert "provisioner.karpenter.sh/default created" in out
    stored = hooked.custom.get_cluster_custom_object("karpenter.sh", "v1alpha5", "provisioners", "default")
    assert {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]} in stored["spec"]["requirements"]
    assert not any(r["key"] == "karpenter.sh/capacity-type" and r["values"] == ["on-demand"] for r in stored["spec"]["requirements"])


def test_a_denial_reaches_kubectl_as_from_a_real_cluster(hooked: Kube, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(DEMO.replace("name: default", "name: bad").replace("operator: In", "operator: Within")
                        + "  consolidation:\n    enabled: true\n")
    result = hooked.kubectl("apply", "-f", str(manifest), check=False)
    assert result.returncode == 1
    assert "Error from server (BadRequest)" in result.stderr
    assert 'admission webhook "validation.webhook.provisioners.karpenter.sh" denied the request' in result.stderr
    assert "spec.requirements[0].operator" in result.stderr
    assert "spec.ttlSecondsAfterEmpty" in result.stderr


def test_an_unreachable_webhook_fails_closed(tmp_path: Path) -> None:
    cluster, kube = start(tmp_path, system_nodes=0)
    try:
        kube.kubectl("apply", "-f", str(ROOT / "manifests" / "crds"))
        config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                  "metadata": {"name": "down"}, "webhooks": [{
                      "name": "down.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "failurePolicy": "Fail", "timeoutSeconds": 2,
                      "clientConfig": {"url": "https://127.0.0.1:9/validate"},
                      "rules": [{"apiGroups": ["karpenter.sh"], "apiVersions": ["v1alpha5"], "operations": ["CREATE"],
                                 "resources": ["provisioners"]}]}]}
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(config))
        manifest = tmp_path / "p.yaml"
        manifest.write_text(DEMO)
        result = kube.kubectl("apply", "-f", str(manifest), check=False)
        assert result.returncode == 1 and 'failed calling webhook "down.example.com"' in result.stderr
        config["webhooks"][0]["failurePolicy"] = "Ignore"
        kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(config))
        assert kube.kubectl("apply", "-f", str(manifest)).returncode == 0
    finally:
        kube.api_client.close()
        cluster.stop()
