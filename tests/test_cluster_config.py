"""Where karpy's cluster commands find their cluster, by client-go's loading rules as kubectl applies them:
--kubeconfig (one file, which must exist), else the files $KUBECONFIG lists (merged, missing ones skipped), else the
in-cluster service account, else ~/.kube/config when $KUBECONFIG is unset; and, when none works, which ones were tried."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client import Configuration

from karpy.kubeclient.raw import load_configuration
from tests.conftest import start_server, stop_server


def kubeconfig(path: Path, server: str, *, cluster: str = "c", current_context: str | None = "c") -> Path:
    """A kubeconfig whose context `cluster` reaches `server`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", **({"current-context": current_context} if current_context else {}),
        "clusters": [{"name": cluster, "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "u"}}],
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


def test_environment_list_skips_missing_files_and_merges_the_rest(nowhere: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    first = kubeconfig(nowhere / "a", "http://127.0.0.1:1003")
    second = kubeconfig(nowhere / "b", "http://127.0.0.1:1013", cluster="other")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(nowhere / "absent"), str(first), str(second), str(first)]))
    configuration = Configuration()
    assert load_configuration(None, configuration) == f"{first}{os.pathsep}{second}"
    assert configuration.host == "http://127.0.0.1:1003"
    # client-go warns only when all are missing (the loader's own logger: a pool another test's thread still
    # holds may warn here too)
    assert not [r for r in caplog.records if r.name == "kubeclient" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize(("contexts", "host"), [
    pytest.param(["c", "other"], "http://127.0.0.1:1006", id="first-current-context-wins"),
    pytest.param([None, "other"], "http://127.0.0.1:1016", id="first-file-without-one-defers"),
])
def test_merged_files_keep_the_first_of_each_name_and_the_first_current_context(
        nowhere: Path, monkeypatch: pytest.MonkeyPatch, contexts: list[str | None], host: str) -> None:
    first = kubeconfig(nowhere / "a", "http://127.0.0.1:1006", current_context=contexts[0])
    # the second file's cluster "c" loses to the first's; its own cluster "other" is added
    second = kubeconfig(nowhere / "b", "http://127.0.0.1:1026", current_context=contexts[1])
    with open(second) as f:
        merged_in = yaml.safe_load(f)
    merged_in["clusters"].append({"name": "other", "cluster": {"server": "http://127.0.0.1:1016"}})
    merged_in["contexts"].append({"name": "other", "context": {"cluster": "other", "user": "u"}})
    second.write_text(yaml.safe_dump(merged_in))
    (nowhere / "empty").write_text("")                                          # an empty file adds nothing
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(nowhere / "empty"), str(first), str(second)]))
    configuration = Configuration()
    load_configuration(None, configuration)
    assert configuration.host == host


def test_home_kubeconfig_is_the_last_resort(nowhere: Path) -> None:
    kubeconfig(nowhere / "home" / ".kube" / "config", "http://127.0.0.1:1004")
    configuration = Configuration()
    assert load_configuration(None, configuration).endswith("/.kube/config")
    assert configuration.host == "http://127.0.0.1:1004"


def test_environment_naming_only_missing_files_warns_once_and_does_not_fall_back_to_home(
        nowhere: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    kubeconfig(nowhere / "home" / ".kube" / "config", "http://127.0.0.1:1005")
    monkeypatch.setenv("KUBECONFIG", f"{nowhere / 'missing'}{os.pathsep}{nowhere / 'gone'}")
    with pytest.raises(kubernetes.config.ConfigException) as raised:
        load_configuration(None, Configuration())
    assert "$KUBECONFIG" in str(raised.value) and "missing" in str(raised.value)
    assert "in-cluster configuration" in str(raised.value) and ".kube/config (not read" in str(raised.value)
    warnings = [r.getMessage() for r in caplog.records if r.name == "kubeclient" and r.levelno >= logging.WARNING]
    assert warnings == [f"Config not found: {nowhere / 'missing'}, {nowhere / 'gone'}"]


def test_a_named_file_that_fails_is_reported_not_skipped(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(kubernetes.config.ConfigException, match="--kubeconfig .*absent: no such file"):
        load_configuration(str(nowhere / "absent"), Configuration())
    (nowhere / "garbage").write_text("clusters: [")
    with pytest.raises(kubernetes.config.ConfigException, match="--kubeconfig .*garbage"):
        load_configuration(str(nowhere / "garbage"), Configuration())
    monkeypatch.setenv("KUBECONFIG", f"{kubeconfig(nowhere / 'good', 'http://127.0.0.1:1007')}{os.pathsep}{nowhere / 'garbage'}")
    with pytest.raises(kubernetes.config.ConfigException, match=r"\$KUBECONFIG .*error loading config file .*garbage"):
        load_configuration(None, Configuration())


@pytest.mark.slow      # starts karpy processes
def test_extender_serves_without_a_cluster_when_kubeconfig_names_only_missing_files(
        nowhere: Path, monkeypatch: pytest.MonkeyPatch, cert_dir: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(nowhere / "missing"))
    log = nowhere / "extender.log"
    server = start_server(["extender", "--cert-dir", str(cert_dir), "--threads", "2"], ca=cert_dir / "ca.crt", log=log)
    try:
        bound = server.post("/scheduler/bind", json={"PodName": "web", "PodNamespace": "default", "PodUID": "u", "Node": "n1"})
        assert bound.status_code == 200 and bound.json()["Error"], bound.text
    finally:
        assert stop_server(server) == 0
    text = log.read_text()
    assert f"Config not found: {nowhere / 'missing'}" in text and "(no cluster)" in text, text


@pytest.mark.parametrize("command", [["controller", "--cloud-provider", "fake", "--catalog", "fake-400"],
                                     ["explain", "node", "n1", "--catalog", "fake-400"],
                                     ["extender", "--in-cluster", "--port", "0"]])
@pytest.mark.slow      # starts karpy processes
def test_commands_name_every_place_they_looked_when_no_cluster_is_found(nowhere: Path, command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    env["HOME"] = str(nowhere / "home")
    result = subprocess.run([sys.executable, "-m", "karpy.main", *command], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    for place in ("--kubeconfig", "$KUBECONFIG", "in-cluster", ".kube/config"):
        assert place in result.stderr, result.stderr
