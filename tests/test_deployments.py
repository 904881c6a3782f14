"""Each Deployment's own command line, run as its manifest says, answers its probes where the manifest
sends the kubelet: the manifests and the binary agree on addresses, ports, paths and schemes.

The command is adapted only as a test on one machine must: every address a loopback one (127.0.0.2, not the
servers' default, so --host must be honoured), every port a free
one (the same substitution in the flags and the probes), the certificate volume a local directory, and the
cluster the local one, reached through $KUBECONFIG as the in-cluster configuration would be."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml

from karpy.commands import listen_host
from tests.conftest import free_port
from tests.simulator.conftest import Kube, start

pytestmark = pytest.mark.slow      # starts the local cluster

ROOT = Path(__file__).resolve().parent.parent
# a loopback address other than the servers' local default, so a server that ignored --host would not answer
PROBED = "127.0.0.2"
DEPLOYMENTS = {
    "controller": ROOT / "manifests" / "controller" / "deployment.yaml",
    "webhook": ROOT / "manifests" / "webhook" / "webhook.yaml",
    "extender": ROOT / "manifests" / "extender" / "deployment.yaml",
}


def deployment(path: Path) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment")


def adapted(container: dict[str, Any], *, cert_dir: Path) -> tuple[list[str], dict[int, int]]:
    """The container's args for this machine, and the ports it maps (manifest port -> local port)."""
    container_ports = {p["containerPort"] for p in container.get("ports", [])}
    ports = {p: free_port() for p in container_ports}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    args: list[str] = []
    for arg in container["args"]:
        if arg == "0.0.0.0":
            arg = PROBED
        elif arg.isdigit() and int(arg) in ports:
            arg = str(ports[int(arg)])
        elif arg in mounts and mounts[arg] == "tls":
            arg = str(cert_dir)
        elif arg == "CLUSTER_ENDPOINT":         # the placeholder the plain manifests ask the user to fill
            arg = "https://cluster.example"
        args.append(arg)
    missing = {p for p in container_ports if str(p) not in container["args"]}
    assert not missing, f"container {container['name']} exposes {missing}, which its command never opens"
    return args, ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    local, kube = start(tmp_path_factory.mktemp("deploy"), system_nodes=1)
    kube.kubectl("apply", "-f", str(ROOT / "manifests" / "namespace.yaml"), "-f", str(ROOT / "manifests" / "crds"))
    yield kube
    kube.api_client.close()
    local.stop()


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")   # kubelets do not verify either
@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_each_deployment_answers_its_probes_where_its_manifest_sends_them(
        name: str, cluster: Kube, cert_dir: Path, tmp_path: Path) -> None:
    spec = deployment(DEPLOYMENTS[name])["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args, ports = adapted(container, cert_dir=cert_dir)
    named = {p["name"]: ports[p["containerPort"]] for p in container["ports"]}
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "KUBERNETES_SERVICE_HOST")}
    env["KUBECONFIG"] = str(cluster.kubeconfig)
    aws = None
    if args[0] == "controller" and args[args.index("--cloud-provider") + 1] == "aws":   # EC2 played by moto
        from moto.server import ThreadedMotoServer

        aws = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        aws.start()
        host, port = aws.get_host_and_port()
        env.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_REGION="us-east-1",
                   AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "karpy.main", *args], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        probes = [container[k]["httpGet"] for k in ("readinessProbe", "livenessProbe")]
        for probe in probes:
            port = probe["port"] if isinstance(probe["port"], int) else named[probe["port"]]
            url = f"{probe.get('scheme', 'HTTP').lower()}://{PROBED}:{port}{probe['path']}"
            assert wait_ok(url, process), f"{url} never answered 200: {log.read_text()}"
        if "http-metrics" in named:   # what the Service's scrape target points at
            metrics = requests.get(f"http://{PROBED}:{named['http-metrics']}/metrics", timeout=5)
            assert metrics.status_code == 200 and "# TYPE" in metrics.text
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)          # every long-running command stops on SIGTERM within 5 s
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        finally:
            if aws is not None:
                aws.stop()


def wait_ok(url: str, process: subprocess.Popen[bytes], *, seconds: float = 60) -> bool:
    """Poll as the kubelet probes: HTTPS without verifying the certificate."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if requests.get(url, timeout=2, verify=False).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.2)
    return False


def test_servers_listen_on_every_interface_in_a_pod_and_on_loopback_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert listen_host(None) == "127.0.0.1"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert listen_host(None) == "0.0.0.0"
    assert listen_host("127.0.0.1") == "127.0.0.1"
