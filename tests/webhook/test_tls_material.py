"""`karpy webhook` and `karpy extender --cert-dir` refuse to start on certificates they cannot serve, naming the file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from karpy.certs.authority import generate, write

pytestmark = pytest.mark.slow      # starts karpy server processes


def _start(command: str, cert_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "karpy.main", command, "--host", "127.0.0.1", "--port", "0",
                           "--cert-dir", str(cert_dir)], capture_output=True, text=True, timeout=30)


@pytest.fixture
def good(cert_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "certs"
    shutil.copytree(cert_dir, out)
    return out


BREAKAGES = {
    "garbage-certificate": ("tls.crt", lambda d: (d / "tls.crt").write_text("not a certificate\n"), "not a PEM certificate"),
    "empty-certificate": ("tls.crt", lambda d: (d / "tls.crt").write_bytes(b""), "not a PEM certificate"),
    "garbage-key": ("tls.key", lambda d: (d / "tls.key").write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
                    "not a PEM private key"),
    "key-of-another-certificate": ("tls.key", lambda d: write(generate(["localhost"]), d / "other") and
                                   (d / "tls.key").write_bytes((d / "other" / "tls.key").read_bytes()),
                                   "is not the private key of the certificate"),
    "key-where-the-certificate-goes": ("tls.crt", lambda d: (d / "tls.crt").write_bytes((d / "tls.key").read_bytes()),
                                       "not a PEM certificate"),
}


@pytest.mark.parametrize("command", ["webhook", "extender"])
@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_unusable_tls_material_stops_the_server_naming_the_file(good: Path, command: str, breakage: str) -> None:
    culprit, damage, words = BREAKAGES[breakage]
    damage(good)
    result = _start(command, good)
    assert result.returncode != 0
    assert str(good / culprit) in result.stderr and words in result.stderr, result.stderr
    assert "Serving" not in result.stdout + result.stderr and "Traceback" not in result.stderr
