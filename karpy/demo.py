"""`karpy demo`: the whole system on the local cluster, as a user would run it.

Starts `karpy sim`, `karpy webhook` and `karpy controller` as processes,
installs the CRDs and the webhook configurations, applies the Provisioner of
DESIGN.md through admission, scales deployment `inflate` from 0 to N,
waits for every pod to run, deletes the deployment and waits for karpy's
empty nodes to go. The controller's log lines are shown as they come; a
summary (and, with --plot, a chart of nodes, pending pods and $/h) follows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

from kubernetes.client.exceptions import ApiException

from karpy.apis import labels as wk
from karpy.apis.crds import all_definitions
from karpy.certs.inject import inject_ca_bundle
from karpy.kubeclient.raw import RawClient, api_client, path_of

PROVISIONER: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
    "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
             "limits": {"resources": {"cpu": 1000}}, "ttlSecondsAfterEmpty": 30},
}
WEBHOOK_PATHS = {
    "validation.webhook.provisioners.karpenter.sh": "/validate-karpenter-sh-v1alpha5-provisioner",
    "validation.webhook.awsnodetemplates.karpenter.k8s.aws": "/validate-karpenter-k8s-aws-v1alpha1-awsnodetemplate",
    "defaulting.webhook.provisioners.karpenter.sh": "/mutate-karpenter-sh-v1alpha5-provisioner",
    "defaulting.webhook.awsnodetemplates.karpenter.k8s.aws": "/mutate-karpenter-k8s-aws-v1alpha1-awsnodetemplate",
}


class DemoError(RuntimeError):
    """A step of the demo did not happen in time; says which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


@dataclasses.dataclass
class Sample:
    seconds: float
    nodes: int
    pending: int                     # inflate pods on no node yet
    price_per_hour: float
    running: int = 0                 # inflate pods Running
    pods: int = 0                    # inflate pods, whatever their state
    marked_empty: int = 0            # karpy nodes whose emptiness TTL runs (karpenter.sh/emptiness-timestamp)


def markers(samples: list[Sample]) -> list[tuple[float, str]]:
    """Pure: the moments the picture marks, read from the samples: the scale-up, each node launched, the
    deployment's deletion, the start of the emptiness TTL, each node deleted."""
    out: list[tuple[float, str]] = []
    scaled = deleted = ttl = False
    for before, now in zip(samples, samples[1:]):
        if not scaled and now.pods > before.pods:
            scaled = True
            out.append((now.seconds, "scale-up"))
        if now.nodes > before.nodes:
            out.append((now.seconds, "node launched"))
        if scaled and not deleted and now.pods < before.pods:
            deleted = True
            out.append((now.seconds, "deployment deleted"))
        if not ttl and now.marked_empty > before.marked_empty:
            ttl = True
            out.append((now.seconds, "TTL starts"))
        if now.nodes < before.nodes:
            out.append((now.seconds, "node deleted"))
    return out


def webhook_configurations(base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The webhook configurations of manifests/webhook, pointed at a local URL."""
    rules = {"karpenter.sh": ("v1alpha5", "provisioners"), "karpenter.k8s.aws": ("v1alpha1", "awsnodetemplates")}
    docs = []
    for kind, prefix in (("ValidatingWebhookConfiguration", "validation"), ("MutatingWebhookConfiguration", "defaulting")):
        hooks = []
        for group, (version, resource) in rules.items():
            name = f"{prefix}.webhook.{resource}.{group}"
            hooks.append({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                          "timeoutSeconds": 10, "clientConfig": {"url": base_url + WEBHOOK_PATHS[name]},
                          "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE", "UPDATE"],
                                     "resources": [resource]}]})
        docs.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                     "metadata": {"name": f"{prefix}.webhook.karpenter.sh"}, "webhooks": hooks})
    return inject_ca_bundle(docs, ca_pem)


class Demo:
    def __init__(self, *, replicas: int, workdir: Path, timeout: float = 110) -> None:
        self.replicas = replicas
        self.workdir = workdir
        self.timeout = timeout
        self.processes: list[subprocess.Popen[str]] = []
        self.samples: list[Sample] = []
        self.started = time.monotonic()
        self._stop = threading.Event()

    # --- processes ------------------------------------------------------------------------------
    def spawn(self, *args: str, echo: Callable[[str], bool] | None = None) -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-m", "karpy.main", *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.processes.append(process)
        log = open(self.workdir / f"{args[0]}.log", "w")

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                log.flush()
                if echo is not None and echo(line):
                    print(line.rstrip(), flush=True)

        threading.Thread(target=pump, daemon=True).start()
        return process

    def stop(self) -> None:
        self._stop.set()
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=8)
            if process.poll() is None:
                process.kill()

    def until(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise DemoError(f"{' '.join(process.args[3:5])} exited with {process.returncode} while waiting for {what}")  # type: ignore[index, arg-type]  # spawn() passes a list of str
            with contextlib.suppress(ApiException, OSError):
                if check():
                    return
            time.sleep(0.25)
        raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")

    # --- the story --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        certs = self.workdir / "certs"
        subprocess.run([sys.executable, "-m", "karpy.main", "certs", "generate", "--out-dir", str(certs)],
                       check=True, stdout=subprocess.DEVNULL)
        kubeconfig = self.workdir / "kubeconfig"
        sim_port, hook_port = free_port(), free_port()
        say(f"Starting the local cluster on http://127.0.0.1:{sim_port} (kubeconfig {kubeconfig})")
        self.spawn("sim", "--port", str(sim_port), "--kubeconfig-out", str(kubeconfig), "--system-nodes", "1", "--boot-delay", "2")
        say(f"Starting the admission webhook on https://127.0.0.1:{hook_port}")
        self.spawn("webhook", "--port", str(hook_port), "--cert-dir", str(certs), "--workers", "1")
        self.until("the local cluster", kubeconfig.exists, 20)
        api = api_client(str(kubeconfig))
        client = RawClient(api)
        self.until("the local cluster to answer", lambda: bool(client.get("/version")), 20)
        for crd in all_definitions().values():
            client.create(path_of("apiextensions.k8s.io/v1", "customresourcedefinitions"), crd)
        for config in webhook_configurations(f"https://127.0.0.1:{hook_port}", (certs / "ca.crt").read_bytes()):
            plural = "validatingwebhookconfigurations" if config["kind"].startswith("Validating") else "mutatingwebhookconfigurations"
            client.create(path_of("admissionregistration.k8s.io/v1", plural), config)
        self.until("the webhook", lambda: _https_ok(hook_port, certs / "ca.crt"), 30)
        say("Starting the karpy controller (fake cloud provider: instances are Nodes)")
        self.spawn("controller", "--kubeconfig", str(kubeconfig), "--cloud-provider", "fake", "--metrics-port", "0",
                   "--health-port", "0", echo=lambda line: "\tcontroller" in line)
        say("Applying Provisioner default through the admission webhook")
        stored = client.create(path_of("karpenter.sh/v1alpha5", "provisioners"), PROVISIONER)
        defaults = [r for r in stored["spec"]["requirements"] if r not in PROVISIONER["spec"]["requirements"]]
        added = ", ".join(f"{r['key']} {r['operator']} {r['values']}" for r in defaults) or "nothing"
        say(f"The webhook defaulted: {added}")
        sampler = threading.Thread(target=self._sample, args=(client,), daemon=True)
        sampler.start()
        client.create(path_of("apps/v1", "deployments", "default"), {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "inflate", "namespace": "default"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "inflate"}}, "template": {
                "metadata": {"labels": {"app": "inflate"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                    "name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                    "resources": {"requests": {"cpu": "1"}}}]}}}})
        say(f"Scaling deployment inflate to {self.replicas}")
        scaled_at = time.monotonic()
        client.patch(path_of("apps/v1", "deployments", "default", "inflate", "scale"), {"spec": {"replicas": self.replicas}})

        def all_running() -> bool:
            pods = client.get(path_of("v1", "pods", "default"), labelSelector="app=inflate")["items"]
            return len(pods) == self.replicas and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

        self.until(f"{self.replicas} inflate pods to run", all_running, 90)
        running_after = time.monotonic() - scaled_at
        nodes = [n for n in client.get(path_of("v1", "nodes"))["items"]
                 if "karpenter.sh/provisioner-name" in (n["metadata"].get("labels") or {})]
        pods = client.get(path_of("v1", "pods", "default"), labelSelector="app=inflate")["items"]
        placement: dict[str, int] = {}
        for p in pods:
            placement[p["spec"]["nodeName"]] = placement.get(p["spec"]["nodeName"], 0) + 1
        say(f"All {self.replicas} pods run after {running_after:.1f}s: " +
            ", ".join(f"{n} ({c})" for n, c in sorted(placement.items())))
        launched = [{"name": n["metadata"]["name"], "type": n["metadata"]["labels"].get("node.kubernetes.io/instance-type"),
                     "zone": n["metadata"]["labels"].get("topology.kubernetes.io/zone"),
                     "capacityType": n["metadata"]["labels"].get("karpenter.sh/capacity-type"),
                     "price": float((n["metadata"].get("annotations") or {}).get(wk.PRICE_PER_HOUR, 0))} for n in nodes]
        say("Deleting deployment inflate")
        deleted_at = time.monotonic()
        client.delete(path_of("apps/v1", "deployments", "default", "inflate"))

        def karpy_nodes_gone() -> bool:
            return not [n for n in client.get(path_of("v1", "nodes"))["items"]
                        if "karpenter.sh/provisioner-name" in (n["metadata"].get("labels") or {})]

        self.until("karpy's empty nodes to go", karpy_nodes_gone, 90)
        gone_after = time.monotonic() - deleted_at
        self._stop.set()
        sampler.join(timeout=2)
        self.sample(client)
        api.close()
        return {"launched": launched, "running_after": running_after, "gone_after": gone_after, "placement": placement}

    def _sample(self, client: RawClient) -> None:
        while not self._stop.is_set():
            self.sample(client)
            self._stop.wait(0.5)

    def sample(self, client: RawClient) -> None:
        """Record karpy's nodes, the inflate pods not yet running, and what the nodes cost now."""
        with contextlib.suppress(ApiException, OSError):
            nodes = [n for n in client.get(path_of("v1", "nodes"))["items"]
                     if "karpenter.sh/provisioner-name" in (n["metadata"].get("labels") or {})]
            pods = client.get(path_of("v1", "pods", "default"), labelSelector="app=inflate")["items"]
            # a pod bound to a node that still boots waits for the node, not for karpy: it is not pending
            pending = sum(1 for p in pods if not (p.get("spec") or {}).get("nodeName"))
            running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
            price = sum(float((n["metadata"].get("annotations") or {}).get(wk.PRICE_PER_HOUR, 0)) for n in nodes)
            marked = sum(1 for n in nodes if wk.EMPTINESS_TIMESTAMP in (n["metadata"].get("annotations") or {}))
            self.samples.append(Sample(time.monotonic() - self.started, len(nodes), pending, price, running=running,
                                       pods=len(pods), marked_empty=marked))


def _https_ok(port: int, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as response:
        return response.status == 200


def plot(samples: list[Sample], path: str) -> None:
    """Nodes, pending and running pods and $/h over time, with the demo's moments marked, as a PNG."""
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.seconds for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.step(t, [s.nodes for s in samples], where="post", label="karpy nodes")
    top.step(t, [s.pending for s in samples], where="post", label="pending pods (on no node)")
    top.step(t, [s.running for s in samples], where="post", label="running pods")
    top.set_ylabel("count")
    top.set_title("karpy demo: deployment inflate scaled up, then deleted")
    bottom.step(t, [s.price_per_hour for s in samples], where="post", color="tab:green")
    bottom.set_ylabel("$/hour of karpy nodes")
    ttl_start = None
    for i, (seconds, label) in enumerate(markers(samples)):
        for axis in (top, bottom):
            axis.axvline(seconds, color="grey", linestyle=":", linewidth=1)
        # alternate heights: moments a second apart (the deletion, the TTL's start) keep readable labels
        top.annotate(label, (seconds, 1 - 0.45 * (i % 2)), xycoords=("data", "axes fraction"), rotation=90, va="top",
                     ha="right", fontsize=8, color="dimgrey")
        if label == "TTL starts":
            ttl_start = seconds
        if label == "node deleted" and ttl_start is not None:
            # the idle node is the TTL doing its job (ttlSecondsAfterEmpty), not waste
            bottom.axvspan(ttl_start, seconds, color="tab:orange", alpha=0.15, label="emptiness TTL")
            ttl_start = None
    top.legend(loc="center right")
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(loc="upper right")
    bottom.set_xlabel("seconds since the demo started")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="karpy-demo-") as tmp:
        yield Path(tmp)


def run_demo(*, replicas: int, plot_path: str | None) -> int:
    with _workdir() as workdir:
        demo = Demo(replicas=replicas, workdir=workdir)
        try:
            summary = demo.run()
        except DemoError as e:
            print(f"karpy demo: {e}", file=sys.stderr)
            for name in ("sim", "webhook", "controller"):
                log = workdir / f"{name}.log"
                if log.exists():
                    print(f"--- last lines of karpy {name} ---\n" + "".join(log.read_text().splitlines(True)[-15:]), file=sys.stderr)
            return 1
        finally:
            demo.stop()
        say("Summary")
        for n in summary["launched"]:
            print(f"    launched {n['name']}: {n['type']} in {n['zone']} ({n['capacityType']}), ${n['price']:.4f}/hour")
        system = summary["placement"].get("system-0", 0)
        print(f"    {replicas} pod(s): {system} on the system node, {replicas - system} on {len(summary['launched'])} node(s) karpy launched")
        print(f"    all pods running {summary['running_after']:.1f}s after the scale-up; "
              f"empty nodes gone {summary['gone_after']:.1f}s after the deletion (ttlSecondsAfterEmpty 30)")
        if plot_path:
            plot(demo.samples, plot_path)
            print(f"    chart written to {plot_path}")
    return 0

