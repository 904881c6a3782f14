"""`karpy certs`: a CA and a serving certificate a TLS client accepts, and caBundle injection."""

from __future__ import annotations

import base64
import ipaddress
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from karpy.certs.authority import generate

ROOT = Path(__file__).resolve().parents[2]


def karpy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "karpy.main", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.slow      # runs karpy certs as a process
def test_generate_writes_pem_files_with_private_key_0600(tmp_path: Path) -> None:
    result = karpy("certs", "generate", "--out-dir", str(tmp_path / "out"), "--dns-name", "karpy-webhook.karpenter.svc",
                   "--dns-name", "10.0.0.7", "--dns-name", "::1")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["karpy-webhook.karpenter.svc"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7"), ipaddress.ip_address("::1")]


def test_serving_certificate_is_signed_by_the_ca_and_valid_for_a_year() -> None:
    bundle = generate(["localhost"])
    ca = x509.load_pem_x509_certificate(bundle.ca_crt)
    cert = x509.load_pem_x509_certificate(bundle.tls_crt)
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert 364 <= days <= 366


@pytest.mark.slow      # runs karpy certs as a process
def test_regenerating_over_an_existing_directory_keeps_the_key_private(tmp_path: Path) -> None:
    (tmp_path / "tls.key").write_text("old")
    (tmp_path / "tls.key").chmod(0o644)
    assert karpy("certs", "generate", "--out-dir", str(tmp_path)).returncode == 0
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    assert (tmp_path / "tls.key").read_text().startswith("-----BEGIN PRIVATE KEY-----")


@pytest.mark.slow      # runs karpy certs as a process
def test_inject_ca_sets_every_webhook_ca_bundle(tmp_path: Path) -> None:
    assert karpy("certs", "generate", "--out-dir", str(tmp_path)).returncode == 0
    result = karpy("certs", "inject-ca", "--ca", str(tmp_path / "ca.crt"), "-f", str(ROOT / "manifests/webhook/webhook.yaml"))
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    expected = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()
    hooks = [h for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]]
    assert len(hooks) == 4
    assert all(h["clientConfig"]["caBundle"] == expected for h in hooks)
    assert {d["kind"] for d in docs} >= {"Service", "Deployment"}


@pytest.mark.slow      # runs karpy certs as a process
def test_inject_ca_refuses_a_file_that_is_not_a_certificate(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("hello")
    result = karpy("certs", "inject-ca", "--ca", str(tmp_path / "ca.crt"), "-f", str(ROOT / "manifests/webhook/webhook.yaml"))
    assert result.returncode == 2
    assert "not a PEM certificate" in result.stderr
    assert "Traceback" not in result.stderr
