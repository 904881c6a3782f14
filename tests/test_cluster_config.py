"""Where karpy's cluster commands find their cluster, as kubectl does: --kubeconfig, else $KUBECONFIG, else the
in-cluster service account, else ~/.kube/config; and, when none works, which ones were tried."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client import Configuration

from karpy.kubeclient.raw import load_configuration


def kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No $KUBECONFIG, not in a pod, and an empty home."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_the_flag_wins_over_the_environment(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(nowhere / "env", "http://127.0.0.1:1001")))
    configuration = Configuration()
    load_configuration(str(kubeconfig(nowhere / "flag", "http://127.0.0.1:1002")), configuration)
    assert configuration.host == "http://127.0.0.1:1002"


def test_kubeconfig_from_the_environment_lists_merge_as_kubectl_merges(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = kubeconfig(nowhere / "a", "http://127.0.0.1:1003")
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{nowhere / 'absent'}")
    configuration = Configuration()
    assert load_configuration(None, configuration) == os.environ["KUBECONFIG"]
    assert configuration.host == "http://127.0.0.1:1003"


def test_home_kubeconfig_is_the_last_resort(nowhere: Path) -> None:
    kubeconfig(nowhere / "home" / ".kube" / "config", "http://127.0.0.1:1004")
    configuration = Configuration()
    assert load_configuration(None, configuration).endswith("/.kube/config")
    assert configuration.host == "http://127.0.0.1:1004"


def test_a_named_file_that_fails_is_reported_not_skipped(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig(nowhere / "home" / ".kube" / "config", "http://127.0.0.1:1005")
    monkeypatch.setenv("KUBECONFIG", str(nowhere / "missing"))
    with pytest.raises(kubernetes.config.ConfigException, match=r"\$KUBECONFIG .*missing: no such file"):
        load_configuration(None, Configuration())
    (nowhere / "garbage").write_text("clusters: [")
    with pytest.raises(kubernetes.config.ConfigException, match="--kubeconfig .*garbage"):
        load_configuration(str(nowhere / "garbage"), Configuration())


@pytest.mark.parametrize("command", [["controller", "--cloud-provider", "fake", "--catalog", "fake-400"],
                                     ["explain", "node", "n1", "--catalog", "fake-400"],
                                     ["extender", "--in-cluster", "--port", "0"]])
def test_commands_name_every_place_they_looked_when_no_cluster_is_found(nowhere: Path, command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    env["HOME"] = str(nowhere / "home")
    result = subprocess.run([sys.executable, "-m", "karpy.main", *command], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    for place in ("--kubeconfig", "$KUBECONFIG", "in-cluster", ".kube/config"):
        assert place in result.stderr, result.stderr
