"""The local cluster's controllers (scheduler, kubelets, workload controllers, the AWS registrar) in a
process of their own.

They reach the API server only over HTTP, so running them apart from it lets the two use two cores: in a
burst of thousands of pods, one Python process serving the API and running them all is bound by one
core. `ControllersProcess` starts the child (`python -m karpy.simulator.controllers`) and stops it; the
child stops on SIGTERM, and by itself when its parent is gone (the pipe on its stdin closes).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from kubernetes.client import ApiClient, Configuration

from karpy.kubeclient.informer import Informer
from karpy.kubeclient.loop import Loop
from karpy.kubeclient.raw import RawClient
from karpy.simulator.kubelet import Kubelets
from karpy.simulator.scheduler import Scheduler, load_extenders
from karpy.simulator.workloads import Workloads

log = logging.getLogger("simulator")
# one connection per informer's watch, and one per parallel writer (scheduler, kubelets, workloads, events)
CONNECTIONS = 96
# passes kicked by each event of a burst of thousands would take all of this process's CPU from the other
# loops, so each loop is held to a share of the time; the workload controllers' passes read every pod and
# matter least once the pods exist, the scheduler's and kubelets' are what a burst waits on
BUSY_SHARES = {"kubelets": 0.5, "scheduler": 0.5, "workloads": 0.25}
STOP_SECONDS = 4.0
# the lines karpy.main writes, so the child's lines read like the parent's in the same log
LOG_FORMAT = "%(asctime)s.%(msecs)03dZ\t%(levelname)s\t%(name)s\t%(message)s"


@dataclass(frozen=True)
class Options:
    server: str
    boot_delay: float = 2.0
    scheduler_config: str | None = None
    extender_url: str | None = None
    aws_endpoint_url: str | None = None
    cluster_name: str | None = None
    aws_region: str = "us-east-1"

    def argv(self) -> list[str]:
        args = ["--server", self.server, "--boot-delay", repr(self.boot_delay), "--aws-region", self.aws_region]
        for flag, value in (("--scheduler-config", self.scheduler_config), ("--extender-url", self.extender_url),
                            ("--aws-endpoint-url", self.aws_endpoint_url), ("--cluster-name", self.cluster_name)):
            if value:
                args += [flag, value]
        return args


class Controllers:
    """The informers and reconcile loops of the cluster's controllers, against the API server at `options.server`."""

    def __init__(self, options: Options) -> None:
        configuration = Configuration()
        configuration.host = options.server
        configuration.connection_pool_maxsize = CONNECTIONS
        self._api_client = ApiClient(configuration)
        self._api_client.user_agent = "karpy-simulator"    # its requests counted apart from its clients' (/metrics)
        client = RawClient(self._api_client)
        informers = {plural: Informer(client, version, plural) for version, plural in (
            ("v1", "nodes"), ("v1", "pods"), ("apps/v1", "deployments"), ("apps/v1", "replicasets"),
            ("apps/v1", "statefulsets"), ("apps/v1", "daemonsets"), ("batch/v1", "jobs"), ("policy/v1", "poddisruptionbudgets"))}
        extenders = load_extenders(options.scheduler_config, url_prefix=options.extender_url)
        kubelets = Kubelets(client, informers["nodes"], informers["pods"], boot_delay=options.boot_delay)
        scheduler = Scheduler(client, informers["nodes"], informers["pods"], extenders=extenders)
        workloads = Workloads(client, informers)
        loops = {name: Loop(name, reconcile, busy_share=BUSY_SHARES[name]) for name, reconcile in (
            ("kubelets", kubelets.reconcile), ("scheduler", scheduler.reconcile), ("workloads", workloads.reconcile))}
        if options.aws_endpoint_url and options.cluster_name:
            from karpy.simulator.aws import Registrar  # boto3 only when a cloud is attached

            registrar = Registrar(client, informers["nodes"], endpoint_url=options.aws_endpoint_url,
                                  cluster_name=options.cluster_name, region=options.aws_region, boot_delay=options.boot_delay)
            loops["registrar"] = Loop("registrar", registrar.reconcile, resync_seconds=1.0)
        informers["nodes"].handlers += [loops["kubelets"].kick, loops["scheduler"].kick, loops["workloads"].kick]
        informers["pods"].handlers += [loops["kubelets"].kick, loops["scheduler"].kick, loops["workloads"].kick]
        for plural, informer in informers.items():
            if plural not in ("nodes", "pods"):
                informer.handlers.append(loops["workloads"].kick)
        self._informers = list(informers.values())
        self._loops = list(loops.values())

    def start(self) -> None:
        for informer in self._informers:
            informer.start()
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        for loop in self._loops:
            loop.stop()
        self._api_client.close()


class ControllersProcess:
    """The child process running `Controllers`: started with the cluster, stopped with it."""

    def __init__(self, options: Options) -> None:
        self._options = options
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # stdin is the lifeline: when this process ends, however it ends, the pipe closes and the child stops
        self._process = subprocess.Popen([sys.executable, "-m", "karpy.simulator.controllers", *self._options.argv()],
                                         stdin=subprocess.PIPE)

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                log.warning("Controllers process %d did not stop in %.0fs; killing it", process.pid, STOP_SECONDS)
                process.kill()
                process.wait()
        if process.stdin is not None:
            process.stdin.close()
        self._process = None


def _parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="karpy.simulator.controllers",
                                     description="the local cluster's scheduler, kubelets and controllers (started by `karpy sim`)")
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--boot-delay", type=float, default=2.0)
    parser.add_argument("--scheduler-config")
    parser.add_argument("--extender-url")
    parser.add_argument("--aws-endpoint-url")
    parser.add_argument("--cluster-name")
    parser.add_argument("--aws-region", default="us-east-1")
    args = parser.parse_args(argv)
    return Options(server=args.server, boot_delay=args.boot_delay, scheduler_config=args.scheduler_config,
                   extender_url=args.extender_url, aws_endpoint_url=args.aws_endpoint_url,
                   cluster_name=args.cluster_name, aws_region=args.aws_region)


def _watch_parent(stop: threading.Event) -> None:
    """Returns when stdin (the parent's pipe) closes: the parent stopped or died."""
    try:   # the file descriptor, not sys.stdin: a buffered reader's lock held at exit aborts the interpreter
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    level = os.environ.get("KARPY_LOG_LEVEL", "info").upper()
    logging.basicConfig(level=level if level in ("DEBUG", "INFO", "WARNING", "ERROR") else "INFO", format=LOG_FORMAT,
                        datefmt="%Y-%m-%dT%H:%M:%S", stream=sys.stdout)
    logging.Formatter.converter = time.gmtime
    options = _parse(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=_watch_parent, args=(stop,), name="parent-watch", daemon=True).start()
    controllers = Controllers(options)
    controllers.start()
    log.info("Cluster controllers (pid %d) reconciling against %s", os.getpid(), options.server)
    while not stop.wait(1.0):
        pass
    stopping = threading.Thread(target=controllers.stop, name="stopping", daemon=True)
    stopping.start()
    stopping.join(timeout=STOP_SECONDS - 1)   # a loop mid-pass is left to die with the process
    return 0


if __name__ == "__main__":
    sys.exit(main())
