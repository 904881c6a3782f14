"""The `karpy` command line: parses flags and dispatches. No logic of its own.

Each subcommand imports its package only when it runs, so `karpy certs`
does not pay for Flask, and `karpy webhook` can prepare the environment
(Prometheus' multiprocess directory) before the app is imported.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import signal
import sys
import time
from typing import Callable, Sequence

from karpy import commands
from karpy.controller.consolidation.disruption_cost import MIN_SAVINGS_PER_POD

LOG_FORMAT = "%(asctime)s.%(msecs)03dZ\t%(levelname)s\t%(name)s\t%(message)s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="karpy", description="Karpenter, the just-in-time node autoscaler, in Python.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {importlib.metadata.version('karpy')}")
    # not required: without one, main() prints the help that lists them (argparse would print the usage line only)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    certs = sub.add_parser("certs", help="TLS certificates for the webhook and extender")
    certs_sub = certs.add_subparsers(dest="certs_command", metavar="ACTION")
    gen = certs_sub.add_parser("generate", help="write ca.crt, tls.crt and tls.key")
    gen.add_argument("--out-dir", required=True, help="directory to write the PEM files into")
    gen.add_argument(
        "--dns-name", action="append", default=[], metavar="NAME",
        help="host name or IP address the serving certificate is for (repeatable; default localhost, 127.0.0.1)",
    )
    gen.set_defaults(run=commands.certs_generate)
    inject = certs_sub.add_parser("inject-ca", help="print manifests with caBundle set from a CA certificate")
    inject.add_argument("--ca", required=True, help="PEM file of the CA (ca.crt)")
    inject.add_argument("-f", "--filename", action="append", required=True,
                        help="manifest file (repeatable; - reads standard input)")
    inject.add_argument("--url", metavar="https://HOST:PORT",
                        help="point each webhook at this address (clientConfig.url + its path) instead of its Service, "
                             "and print the webhook configurations only: for a webhook running outside the cluster")
    inject.set_defaults(run=commands.certs_inject_ca)

    plan = sub.add_parser("plan", help="print the nodes karpy would launch for the pods in FILEs")
    plan.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                      help="multi-document YAML or JSON (repeatable; - reads standard input)")
    plan.add_argument("--catalog", default="aws", help="built-in catalog (aws, fake-400) or an InstanceTypeCatalog file")
    plan.add_argument("-o", "--output", choices=["json", "table", "wide"], default="table",
                      help="table (default), wide (the table with each node's pods; with --consolidate, the table) or json")
    plan.add_argument("--node-cost-per-hour", type=float, default=0.0, metavar="DOLLARS",
                      help="what every node costs besides its instance, volumes and IPv4 address (docs/cost.md; default 0)")
    plan.add_argument("--consolidate", action="store_true",
                      help="print what consolidation would do with the Nodes and bound pods in FILEs, and why each other node stays")
    plan.add_argument("--consolidation-budget-seconds", type=float, default=None,
                      help="with --consolidate: stop searching after this many seconds and print the actions found so far")
    plan.add_argument("--consolidation-min-node-age", type=float, default=0.0,
                      help="with --consolidate: nodes younger than this many seconds are not candidates "
                           "(the controller's default is 60)")
    plan.add_argument("--consolidation-min-savings-per-pod", type=float, default=MIN_SAVINGS_PER_POD, metavar="DOLLARS",
                      help="with --consolidate: " "an action is taken only when it saves at least this many $/h per pod it moves (per unit of Karpenter's disruption cost: a pod of default priority and deletion cost counts 1; default %(default)s)")
    plan.add_argument("--consolidation-steering", action="store_true",
                      help="with --consolidate: judge actions with moved pods landing as planned, as the controller "
                           "does with --consolidation-steering (default: where kube-scheduler's own scores put them)")
    plan.set_defaults(run=commands.plan)

    convert = sub.add_parser("convert", help="print v1alpha5 Provisioners and AWSNodeTemplates in FILEs as v1 NodePools "
                                             "and EC2NodeClasses (other documents unchanged)")
    convert.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                         help="multi-document YAML or JSON (repeatable; - reads standard input)")
    convert.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml",
                         help="yaml: documents separated by ---; json: one object, or a List of several")
    convert.set_defaults(run=commands.convert)

    sim = sub.add_parser("sim", help="run the local cluster (an API server emulation with scheduler, kubelets and cloud)")
    sim.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 picks a free one)")
    sim.add_argument("--kubeconfig-out", required=True, help="write a kubeconfig for the cluster here")
    sim.add_argument("--system-nodes", type=int, default=1, help="ready nodes of the static node group")
    sim.add_argument("--boot-delay", type=float, default=2.0, help="seconds from a node's creation to Ready")
    sim.add_argument("--scheduler-config", help="KubeSchedulerConfiguration whose extenders the scheduler calls")
    sim.add_argument("--extender-url", help="reach the configured extender here (replaces its urlPrefix, e.g. "
                                            "http://127.0.0.1:8888/scheduler)")
    sim.add_argument("--aws-endpoint-url", help="register the running EC2 instances at this endpoint (a moto server) as Nodes")
    sim.add_argument("--cluster-name", help="with --aws-endpoint-url: the instances tagged kubernetes.io/cluster/NAME=owned")
    sim.add_argument("--no-controllers", action="store_true", help="serve the API only: no scheduler, kubelets or controllers")
    sim.set_defaults(run=commands.sim)

    ctl = sub.add_parser("controller", help="run the autoscaler against a cluster")
    ctl.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, else the in-cluster configuration, else ~/.kube/config)")
    ctl.add_argument("--cloud-provider", choices=["fake", "aws"], default="fake")
    ctl.add_argument("--cluster-name", default="karpy")
    ctl.add_argument("--catalog", default="aws", help="instance types the fake provider launches (aws, fake-400, or a file)")
    ctl.add_argument("--batch-idle-duration", type=float, default=1.0, help="seconds of quiet that close a batch of pods")
    ctl.add_argument("--batch-max-duration", type=float, default=10.0, help="longest a batch waits, in seconds")
    ctl.add_argument("--host", help="address metrics and probes listen on (default: all interfaces in a pod, 127.0.0.1 elsewhere)")
    ctl.add_argument("--metrics-port", type=int, default=8000, help="Prometheus /metrics (0 picks a free port)")
    ctl.add_argument("--health-port", "--health-probe-port", type=int, default=8081,
                     help="/healthz and /readyz (0 picks a free port); --health-probe-port is Karpenter's name")
    ctl.add_argument("--leader-elect", action="store_true", help="act only while holding the karpy-leader-election Lease")
    ctl.add_argument("--leader-election-namespace", default="default")
    ctl.add_argument("--cluster-endpoint", help="API server endpoint nodes join (aws)")
    ctl.add_argument("--cluster-ca-bundle", metavar="BASE64",
                     help="the cluster's CA (base64 PEM, as EKS reports it) written into node user data (aws); "
                          "default: the CA the controller's connection trusts, else EKS DescribeCluster")
    ctl.add_argument("--cluster-cidr", metavar="CIDR",
                     help="the cluster's service CIDR, which AL2023 nodes' NodeConfig carries (aws, EC2NodeClass)")
    ctl.add_argument("--default-instance-profile", help="instance profile for nodes when a Provisioner names none (aws)")
    ctl.add_argument("--aws-region", help="AWS region (default: AWS_REGION, then AWS_DEFAULT_REGION)")
    ctl.add_argument("--interruption-queue", metavar="NAME",
                     help="SQS queue of EC2 interruption events (spot warnings, scheduled changes, state changes) (aws)")
    ctl.add_argument("--node-cost-per-hour", type=float, default=0.0, metavar="DOLLARS",
                     help="what every node costs besides its instance, volumes and IPv4 address (docs/cost.md; default 0)")
    ctl.add_argument("--packing-budget-seconds", type=float, default=1.0, metavar="SECONDS",
                     help="seconds the optimising packer may spend on each chunk of a batch before the chunk's first-fit plan is launched as is")
    ctl.add_argument("--consolidation-stabilization", type=float, default=15.0,
                     help="seconds between deciding a consolidation action and re-validating it before it is taken")
    ctl.add_argument("--consolidation-min-node-age", type=float, default=60.0,
                     help="seconds a node must have existed before consolidation considers it")
    ctl.add_argument("--registration-timeout", type=float, default=900.0,
                     help="seconds a launched node may take to become Ready before it is given up and its instance terminated")
    ctl.add_argument("--consolidation-max-disrupted", default="10%",
                     help="nodes consolidation may disrupt at once: a count or a percentage of the nodes (at least 1); "
                          "empty nodes do not count")
    ctl.add_argument("--consolidation-budget-seconds", type=float, default=10.0,
                     help="seconds one consolidation decision may search before acting on what it found")
    ctl.add_argument("--consolidation-pending-wait", type=float, default=300.0,
                     help="seconds consolidation waits while pods are pending before it goes on (v0.16's stabilization window)")
    ctl.add_argument("--consolidation-min-savings-per-pod", type=float, default=MIN_SAVINGS_PER_POD, metavar="DOLLARS",
                     help="an action is taken only when it saves at least this many $/h per pod it moves (per unit of Karpenter's disruption cost: a pod of default priority and deletion cost counts 1; default %(default)s)")
    ctl.add_argument("--consolidation-steering", action="store_true",
                     help="kube-scheduler calls karpy's extender: mark the nodes drained pods should go to, so the "
                          "extender steers them there, and judge actions with the pods landing as planned")
    ctl.add_argument("--feature-gates", default="", metavar="GATES",
                     help="Karpenter's feature gates, off unless named: Drift=true (Provisioners' nodes drift from "
                          "their Provisioner and are replaced, as v0.21-v0.31 offered; a NodePool's always do), "
                          "SpotToSpotConsolidation=true (a spot node may be replaced by a cheaper spot node), NodeRepair=true (a NodePool node NotReady for 30 minutes is replaced); "
                          "comma-separated")
    ctl.set_defaults(run=commands.controller)

    explain = sub.add_parser("explain", help="explain karpy's decisions about an object of a live cluster")
    explain_sub = explain.add_subparsers(dest="kind", required=True, metavar="KIND")
    explain_node = explain_sub.add_parser("node", help="what consolidation does with a node now, and why; for a node being deleted, what holds its drain")
    explain_node.add_argument("name", metavar="NAME")
    explain_node.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, else the in-cluster configuration, else ~/.kube/config)")
    explain_node.add_argument("--catalog", default="aws", help="the controller's instance types (aws, fake-400, or a file)")
    explain_node.add_argument("--consolidation-min-node-age", type=float, default=60.0,
                              help="the controller's setting of the same name")
    explain_node.add_argument("--consolidation-pending-wait", type=float, default=300.0,
                              help="the controller's --consolidation-pending-wait, to say how long consolidation waits")
    explain_node.add_argument("--consolidation-min-savings-per-pod", type=float, default=MIN_SAVINGS_PER_POD,
                              metavar="DOLLARS", help="the controller's setting of the same name")
    explain_node.add_argument("--node-cost-per-hour", type=float, default=0.0, metavar="DOLLARS",
                              help="the controller's setting of the same name: what consolidation costs each node besides")
    explain_node.add_argument("--consolidation-steering", action="store_true",
                              help="the controller's setting of the same name")
    explain_node.add_argument("-o", "--output", choices=["json", "text"], default="text")
    explain_node.set_defaults(run=commands.explain_node)

    demo = sub.add_parser("demo", help="run the whole system on the local cluster")
    demo.add_argument("--replicas", type=int, default=10, help="pods of deployment inflate (cpu request 1 each)")
    demo.add_argument("--plot", metavar="PNG", help="draw nodes, pending pods and $/h over time into this file")
    demo.set_defaults(run=commands.demo)

    hook = sub.add_parser("webhook", help="serve the Provisioner/AWSNodeTemplate admission webhook over TLS")
    hook.add_argument("--port", type=int, default=8443, help="HTTPS port (0 picks a free one)")
    hook.add_argument("--host", help="address to listen on (default: all interfaces in a pod, 127.0.0.1 elsewhere)")
    hook.add_argument("--cert-dir", required=True, help="directory holding tls.crt and tls.key")
    _cert_check(hook)
    hook.add_argument("--cloud-provider", choices=["aws", "fake"], default="aws", help="whose rules and defaults apply")
    hook.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    hook.add_argument("--threads", type=int, default=32, help="threads per worker (a slow client holds one until its deadline)")
    _read_timeouts(hook, body=10.0)                # the API server gives up on a webhook after timeoutSeconds (10 s)
    hook.set_defaults(run=commands.webhook)

    ext = sub.add_parser("extender", help="serve the kube-scheduler extender (filter, prioritize, bind, capacity gaps)")
    ext.add_argument("--port", type=int, default=8888, help="port (0 picks a free one)")
    ext.add_argument("--host", help="address to listen on (default: all interfaces in a pod, 127.0.0.1 elsewhere)")
    ext.add_argument("--cert-dir", help="directory holding tls.crt and tls.key (HTTPS); plain HTTP without it")
    _cert_check(ext)
    ext.add_argument("--kubeconfig", help="the cluster to watch and bind in; without it, $KUBECONFIG when set "
                                            "naming an existing file (and no cluster at all otherwise: every verb still answers)")
    ext.add_argument("--in-cluster", action="store_true",
                     help="watch the cluster found as the controller finds it ($KUBECONFIG, in-cluster, ~/.kube/config)")
    ext.add_argument("--workers", type=int, default=1, help="gunicorn worker processes (each watches the cluster)")
    ext.add_argument("--threads", type=int, default=32, help="threads per worker (a slow client holds one until its deadline)")
    _read_timeouts(ext, body=30.0)                 # filter bodies of tens of MB
    ext.set_defaults(run=commands.extender)
    return parser


def _cert_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cert-check-seconds", type=float, default=10.0, metavar="SECONDS",
                        help="how often tls.crt and tls.key are read for changes (a renewed Secret is served without "
                             "a restart)")


def _read_timeouts(server: argparse.ArgumentParser, *, body: float) -> None:
    server.add_argument("--header-timeout", type=float, default=10.0,
                        help="seconds a client has to send a request's headers (TLS handshake included) before 408")
    server.add_argument("--body-timeout", type=float, default=body,
                        help="seconds a client has to send a request's body after its headers before 408")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse `argv`; exits 2, as argparse does on any usage error, with the usage of the command that was
    given the stray argument (argparse leaves those to the top level), or with the help that lists the
    commands when none was named (`karpy`, `karpy certs`)."""
    _remember_parsers(parser)
    args, extras = parser.parse_known_args(argv)
    command: argparse.ArgumentParser = args.parser
    if extras:
        command.error(f"unrecognized arguments: {' '.join(extras)}")
    if not hasattr(args, "run"):
        command.print_help(sys.stderr)
        missing = next(a.metavar for a in command._actions if isinstance(a, argparse._SubParsersAction))
        command.exit(2, f"{command.prog}: error: the following arguments are required: {missing}\n")
    return args


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command records its own parser in the namespace; the innermost one named wins."""
    parser.set_defaults(parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parsers(child)


def end_now(code: int) -> None:
    """End this process with `code` once what it wrote is out, without freeing its objects one by one: a plan's
    are millions, and freeing them took about a quarter of a second of a 20,000-pod plan. Only for a process
    that has nothing else left to do (`karpy plan` run as a command)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    level = os.environ.get("KARPY_LOG_LEVEL", "info").upper()    # the chart's logLevel
    logging.basicConfig(level=level if level in ("DEBUG", "INFO", "WARNING", "ERROR") else "INFO", format=LOG_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S", stream=sys.stdout)
    logging.Formatter.converter = time.gmtime
    args = parse(build_parser(), sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the same way on SIGTERM and ^C
    # and on SIGINT even when started in the background by a shell, which leaves it ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        code = run(args)
        if argv is None and args.command == "plan":
            end_now(code)
        return code
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `karpy plan ... | head`: the reader left; nothing more to say
        sys.stderr.close()
        return 0
    except commands.UsageError as e:
        print(f"karpy {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
