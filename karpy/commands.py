"""What each `karpy` subcommand does: read flags, call the package that does the work."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import ipaddress
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import yaml

if TYPE_CHECKING:
    from karpy.controller.operator import Settings as OperatorSettings

log = logging.getLogger("karpy")


class UsageError(ValueError):
    """Bad flags or input files: printed as one line, exit code 2."""


def listen_host(flag: str | None) -> str:
    """Where a server listens: the --host flag, else every interface inside a pod (where the kubelet probes
    the pod IP and Prometheus scrapes it), else loopback, so a local run is not reachable from the network."""
    if flag:
        return flag
    return "0.0.0.0" if os.environ.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


def require_extra(extra: str, module: str, *, needed_by: str) -> None:
    """UsageError naming the pip extra when an optional dependency is missing."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{needed_by} needs {module}: pip install 'karpy[{extra}]'") from None


def certs_generate(args: argparse.Namespace) -> int:
    from karpy.certs.authority import DEFAULT_DNS_NAMES, generate, write

    names = args.dns_name or list(DEFAULT_DNS_NAMES)
    for path in write(generate(names), args.out_dir):
        print(path)
    return 0


def certs_inject_ca(args: argparse.Namespace) -> int:
    from karpy.certs.inject import inject_ca_bundle

    try:
        ca = Path(args.ca).read_bytes()
    except OSError as e:
        raise UsageError(f"reading --ca {args.ca}: {e.strerror}") from None
    if b"BEGIN CERTIFICATE" not in ca:
        raise UsageError(f"--ca {args.ca} is not a PEM certificate")
    if args.url is not None and not args.url.startswith("https://"):
        raise UsageError(f"--url {args.url}: the API server calls webhooks over https:// only")
    documents = []
    for name in args.filename:
        try:
            if name == "-":                     # e.g. `kubectl kustomize manifests/ | karpy certs inject-ca -f -`
                documents += list(yaml.safe_load_all(sys.stdin))
                continue
            with open(name, encoding="utf-8") as f:
                documents += list(yaml.safe_load_all(f))
        except (OSError, yaml.YAMLError) as e:
            raise UsageError(f"{name}: {e}") from None
    yaml.safe_dump_all(inject_ca_bundle(documents, ca, url=args.url), sys.stdout, sort_keys=False)
    return 0


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """While it runs, what native code writes to the process's standard output goes to standard error instead.
    HiGHS (the packer's solver) prints a debug line from its MIP solver now and then, whatever its options
    (ERGO-Code/HiGHS#2783); on stdout it would corrupt `karpy plan -o json`."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


PLAN_GC_THRESHOLD = 50_000    # allocations between the collector's youngest passes in `karpy plan` (Python's default: 700)


def plan(args: argparse.Namespace) -> int:
    with batch_garbage_collection():
        return _plan(args)


@contextlib.contextmanager
def batch_garbage_collection() -> Iterator[None]:
    """A plan is one batch whose objects nearly all live until it prints: at the collector's default pace, passes
    that find next to no garbage took about 2 s of a 20,000-pod plan. Within the block the youngest objects are
    collected every PLAN_GC_THRESHOLD allocations, and what gc.freeze() set aside (the input, which stays to the
    end) is not walked again; both are undone on leaving (tests plan in their own process)."""
    before = gc.get_threshold()
    gc.set_threshold(PLAN_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def _plan(args: argparse.Namespace) -> int:
    from karpy.plan.documents import PlanInputError, start_reading

    if args.node_cost_per_hour < 0:
        raise UsageError("--node-cost-per-hour must not be negative")
    reading = start_reading(args.filename)      # a long file is read in processes of their own while planning is imported
    from karpy.controller.consolidation.decisions import Consolidator
    from karpy.controller.provisioning.scheduling import forked
    from karpy.controller.provisioning.scheduling.packers import PackingOptions
    from karpy.controller.provisioning.scheduling.scheduler import Scheduler
    from karpy.plan.inputs import load
    from karpy.plan.render import consolidation_json, consolidation_table, plan_json, plan_table

    try:
        loaded = load(reading, catalog=args.catalog)
    except PlanInputError as e:
        for problem in e.problems:
            print(f"karpy plan: {problem}", file=sys.stderr)
        return 2
    gc.freeze()                 # the input stays to the end (see batch_garbage_collection)
    for warning in loaded.warnings:
        print(f"karpy plan: {warning}", file=sys.stderr)
    if args.consolidate:
        now = datetime.datetime.now(datetime.timezone.utc)
        if args.consolidation_budget_seconds is not None and args.consolidation_budget_seconds <= 0:
            raise UsageError("--consolidation-budget-seconds must be positive")
        if args.consolidation_min_savings_per_pod < 0:
            raise UsageError("--consolidation-min-savings-per-pod must not be negative")
        started = time.monotonic()
        with native_stdout_to_stderr():
            consolidation = Consolidator(loaded.snapshot, loaded.pdbs, now=now, min_age_seconds=args.consolidation_min_node_age,
                                         budget_seconds=args.consolidation_budget_seconds,
                                         as_kube_scheduler_places=not args.consolidation_steering,
                                         min_savings_per_pod=args.consolidation_min_savings_per_pod,
                                         node_cost_per_hour=args.node_cost_per_hour).plan()
        decided = time.monotonic() - started
        if args.output == "json":
            doc = consolidation_json(consolidation)
            doc["summary"]["decisionSeconds"] = round(decided, 3)
            print_json(doc)
        else:
            print(consolidation_table(consolidation))
        return 0
    with native_stdout_to_stderr():
        # `karpy plan` runs no other threads, so the optimiser may make its plans in processes of their own
        scheduler = Scheduler(loaded.snapshot, packing=PackingOptions(node_cost_per_hour=args.node_cost_per_hour,
                                                                      processes=forked.cores()))
        results = scheduler.solve()
    for name, error in results.failed_provisioners.items():
        print(f"karpy plan: Provisioner {name!r} skipped: computing instance types, {error}", file=sys.stderr)
    if args.output == "json":
        print_json(plan_json(results, scheduler.templates))
    else:
        print(plan_table(results, scheduler.templates, wide=args.output == "wide"))
    return 0


def print_json(doc: Any) -> None:
    """`doc` on standard output as JSON indented by two spaces, in one write (a large plan is many small ones): laid
    out as json.dumps(doc, indent=2) lays it out, but for numbers written their shortest way (1e-05 as 0.00001) and
    text as UTF-8 rather than \\u escapes. msgspec writes it many times faster (0.03 s against 0.24 s for a 20,000-pod
    plan): the standard library indents in Python. Where standard output cannot take UTF-8 (a Latin-1 terminal),
    the standard library writes it, \\u-escaped."""
    import msgspec

    try:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=2).decode() + "\n")
    except UnicodeEncodeError:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def sim(args: argparse.Namespace) -> int:
    import threading

    from karpy.simulator.cluster import LocalCluster

    if args.system_nodes < 0:
        raise UsageError("--system-nodes must not be negative")
    if bool(args.aws_endpoint_url) != bool(args.cluster_name):
        raise UsageError("--aws-endpoint-url and --cluster-name go together")
    if args.aws_endpoint_url:
        require_extra("aws", "boto3", needed_by="--aws-endpoint-url")
    if args.extender_url and not args.scheduler_config:
        raise UsageError("--extender-url needs --scheduler-config (the extender whose address it replaces)")
    try:
        cluster = LocalCluster(port=args.port, system_nodes=args.system_nodes, boot_delay=args.boot_delay,
                               scheduler_config=args.scheduler_config, extender_url=args.extender_url,
                               aws_endpoint_url=args.aws_endpoint_url, cluster_name=args.cluster_name,
                               aws_region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
                               controllers=not args.no_controllers)
    except OSError as e:
        raise UsageError(f"--port {args.port}: {e.strerror}") from None
    cluster.write_kubeconfig(args.kubeconfig_out)
    cluster.start()
    log.info("Wrote kubeconfig to %s; try: kubectl --kubeconfig %s get nodes", args.kubeconfig_out, args.kubeconfig_out)
    try:
        threading.Event().wait()
    finally:
        cluster.stop()
    return 0


def controller_settings(args: argparse.Namespace) -> OperatorSettings:
    """The operator's Settings from `karpy controller`'s flags; UsageError naming a flag with a bad value."""
    from karpy.apis.v1.disruption.feature_gates import parse_feature_gates
    from karpy.controller.consolidation.controller import Settings as ConsolidationSettings
    from karpy.controller.consolidation.controller import disruption_budget
    from karpy.controller.operator import Settings
    from karpy.controller.provisioning.scheduling.packers import PackingOptions

    if args.node_cost_per_hour < 0:
        raise UsageError("--node-cost-per-hour must not be negative")
    if args.packing_budget_seconds <= 0:
        raise UsageError("--packing-budget-seconds must be positive")
    if args.consolidation_min_savings_per_pod < 0:
        raise UsageError("--consolidation-min-savings-per-pod must not be negative")
    try:
        disruption_budget(args.consolidation_max_disrupted, 0)
    except ValueError:
        raise UsageError(f"--consolidation-max-disrupted {args.consolidation_max_disrupted!r}: "
                         "expected a count (3) or a percentage (10%)") from None
    try:
        gates = parse_feature_gates(args.feature_gates)
    except ValueError as e:
        raise UsageError(f"--feature-gates {args.feature_gates!r}: {e}") from None
    if args.interruption_queue and args.cloud_provider != "aws":
        raise UsageError("--interruption-queue needs --cloud-provider aws")
    return Settings(kubeconfig=args.kubeconfig, cloud_provider=args.cloud_provider, cluster_name=args.cluster_name,
                    batch_idle_seconds=args.batch_idle_duration, batch_max_seconds=args.batch_max_duration,
                    metrics_port=args.metrics_port, health_port=args.health_port, host=listen_host(args.host),
                    leader_elect=args.leader_elect,
                    leader_namespace=args.leader_election_namespace, interruption_queue=args.interruption_queue,
                    registration_timeout_seconds=args.registration_timeout, feature_gates=gates,
                    consolidation=ConsolidationSettings(stabilization_seconds=args.consolidation_stabilization,
                                                        min_node_age_seconds=args.consolidation_min_node_age,
                                                        max_disrupted=args.consolidation_max_disrupted,
                                                        budget_seconds=args.consolidation_budget_seconds,
                                                        pending_wait_seconds=args.consolidation_pending_wait,
                                                        steer=args.consolidation_steering,
                                                        min_savings_per_pod=args.consolidation_min_savings_per_pod,
                                                        node_cost_per_hour=args.node_cost_per_hour,
                                                        spot_to_spot=gates.spot_to_spot_consolidation),
                    packing=PackingOptions(node_cost_per_hour=args.node_cost_per_hour,
                                           max_seconds=args.packing_budget_seconds))


def controller(args: argparse.Namespace) -> int:
    import threading

    import kubernetes

    from karpy.controller.operator import Operator

    settings = controller_settings(args)
    cloud_factory = None
    catalog = None
    config_errors: tuple[type[Exception], ...] = (OSError, kubernetes.config.ConfigException)
    if args.cloud_provider == "aws":
        require_extra("aws", "boto3", needed_by="--cloud-provider aws")
        from karpy.controller.cloudprovider.aws.provider import AwsConfigError

        config_errors += (AwsConfigError,)
        cloud_factory = _aws_provider(args)
    else:
        catalog = _catalog(args.catalog)
    try:
        operator = Operator(settings, catalog, cloud_factory=cloud_factory)
    except config_errors as e:
        raise UsageError(f"starting the controller: {e}") from None
    log.info("Serving metrics on port %d and probes on port %d", operator.metrics.server_address[1],
             operator.probes.server_address[1])
    try:
        operator.start()
        threading.Event().wait()
    finally:
        operator.stop()
    return 0


def _catalog(name: str) -> Any:
    """A built-in catalog or an InstanceTypeCatalog file; UsageError naming the problem otherwise."""
    from karpy.controller.cloudprovider.catalog import BUILT_IN, built_in
    from karpy.plan.documents import PlanInputError
    from karpy.plan.inputs import from_documents

    if name in BUILT_IN:
        return built_in(name)
    try:
        return from_documents([], catalog=name).snapshot.catalog      # the catalog alone: no other documents
    except PlanInputError as e:
        raise UsageError("; ".join(e.problems)) from None


def explain_node(args: argparse.Namespace) -> int:
    import kubernetes

    from karpy.controller.clock import Clock
    from karpy.controller.state import ClusterState, aws_defaults
    from karpy.controller.termination.controller import draining
    from karpy.kubeclient.outage import ApiUnreachable
    from karpy.kubeclient.raw import RawClient, api_client

    if args.node_cost_per_hour < 0:
        raise UsageError("--node-cost-per-hour must not be negative")
    catalog = _catalog(args.catalog)
    try:
        client = api_client(args.kubeconfig)
    except (OSError, kubernetes.config.ConfigException) as e:
        raise UsageError(f"reading the cluster configuration: {e}") from None
    raw = RawClient(client, outages=None)             # a one-shot command: its error line says it all
    try:
        raw.request("GET", "/version", timeout=10)     # one clear line now, rather than every informer retrying
    except (ApiUnreachable, kubernetes.client.exceptions.ApiException) as e:
        client.close()
        answer = str(e) if isinstance(e, ApiUnreachable) else f"the API server at {raw.server} answered {e.status} {e.reason}"
        print(f"karpy explain: {answer}", file=sys.stderr)
        return 1
    state = ClusterState(raw, aws_defaults=aws_defaults("fake", catalog))     # read as the controller reads them
    try:
        if not state.start(timeout=20):
            print(f"karpy explain: the API server at {raw.server} did not list the cluster's objects within 20s",
                  file=sys.stderr)
            return 1
        node = state.nodes.get("", args.name)
        if node is None:
            print(f"karpy explain: node {args.name!r} not found", file=sys.stderr)
            return 1
        now = Clock().now()
        doc = explain_drain(state, node, now) if draining(node) else explain_consolidation(state, catalog, args, now)
    finally:
        state.stop()
        client.close()
    if args.output == "json":
        print_json(doc)
    else:
        print(f"node {doc['node']}: {doc['verdict']}: {doc['reason']}")
        if "waiting" in doc:
            print(doc["waiting"])
    return 0


def explain_drain(state: Any, node: dict[str, Any], now: Any) -> dict[str, Any]:
    """`explain node` for a node being deleted: what its drain waits for (the pod and the rule that hold it),
    as the termination controller decides it."""
    from karpy.apis import labels as wk
    from karpy.apis.v1.labels import NODECLAIM_TERMINATION_TIMESTAMP
    from karpy.controller.termination.controller import drain_status, plan_drain

    name = node["metadata"]["name"]
    plan = plan_drain(state.pods_on(name), now=now, v1=bool((node["metadata"].get("labels") or {}).get(wk.NODEPOOL)))
    doc: dict[str, Any] = {"node": name, "verdict": "draining",
                           "reason": drain_status(plan, pdbs=state.pdbs.items(), pods=state.pods.items())}
    if plan.blocked_by:
        doc["heldBy"] = plan.blocked_by
    deadline = (node["metadata"].get("annotations") or {}).get(NODECLAIM_TERMINATION_TIMESTAMP)
    if deadline:        # the terminationGracePeriod's end: pods still there are deleted so the node is gone by then
        doc["terminationTime"] = deadline
        doc["reason"] += f"; the node is gone by {deadline} (terminationGracePeriod)"
    return doc


def explain_consolidation(state: Any, catalog: Any, args: argparse.Namespace, now: Any) -> dict[str, Any]:
    """`explain node` for a live node: what consolidation does with it now, and why."""
    from karpy.controller.consolidation.controller import decide, unsettled
    from karpy.plan.render import explain_node_json

    plan = decide(state, catalog, now, min_age_seconds=args.consolidation_min_node_age,
                  name_node=lambda p, i: f"{p}-replacement-{i}", first_only=False, steer=args.consolidation_steering,
                  min_savings_per_pod=args.consolidation_min_savings_per_pod, node_cost_per_hour=args.node_cost_per_hour)
    doc = explain_node_json(plan, args.name)
    if waiting := unsettled(state):
        if waiting == "pods are waiting for capacity":
            waiting += (f" (consolidation waits for them at most --consolidation-pending-wait, "
                        f"{args.consolidation_pending_wait:.0f}s, then goes on)")
        doc["waiting"] = f"consolidation acts only when the cluster is settled: {waiting}"
    return doc


def _aws_provider(args: argparse.Namespace) -> Any:
    """What builds the AWS provider once the controller has its API client: boto3's own credential and
    endpoint chain (AWS_ENDPOINT_URL included), the region by DESIGN.md's order."""
    from karpy.controller.cloudprovider.aws.cluster import checked_bundle, eks_client, resolve_ca_bundle
    from karpy.controller.cloudprovider.aws.provider import (
        AwsCloudProvider,
        AwsConfigError,
        AwsSettings,
        resolve_region,
    )
    from karpy.controller.cloudprovider.aws.templates import node_templates

    if not args.cluster_endpoint:
        raise UsageError("--cloud-provider aws needs --cluster-endpoint (the API server address nodes join)")
    if not args.cluster_endpoint.startswith("https://"):
        raise UsageError(f"--cluster-endpoint {args.cluster_endpoint!r}: not an https:// URL (the API server address "
                         "nodes join: aws eks describe-cluster --query cluster.endpoint)")
    try:
        region = resolve_region(args.aws_region)
    except AwsConfigError as e:
        raise UsageError(str(e)) from None

    if args.cluster_cidr:
        try:
            ipaddress.ip_network(args.cluster_cidr)
        except ValueError:
            raise UsageError(f"--cluster-cidr {args.cluster_cidr!r}: expected a CIDR such as 10.100.0.0/16") from None
    if args.cluster_ca_bundle:
        try:
            checked_bundle(args.cluster_ca_bundle, where="--cluster-ca-bundle")
        except AwsConfigError as e:
            raise UsageError(str(e)) from None

    def build(client: Any, state: Any) -> Any:
        version = client.get("/version")
        minor = f"{version['major']}.{str(version['minor']).rstrip('+')}"
        ca = resolve_ca_bundle(flag=args.cluster_ca_bundle, ca_file=client.api_client.configuration.ssl_ca_cert,
                               eks=eks_client(region), cluster_name=args.cluster_name)
        if ca.data:
            log.info("Found the cluster CA for node user data in %s", ca.source)
        else:
            log.warning("No cluster CA for node user data (pass --cluster-ca-bundle): Bottlerocket nodes cannot join")
        settings = AwsSettings(region=region, cluster_name=args.cluster_name, cluster_endpoint=args.cluster_endpoint,
                               kubernetes_minor=minor, default_instance_profile=args.default_instance_profile,
                               ca_bundle=ca.data, cluster_cidr=args.cluster_cidr)
        return AwsCloudProvider(None, settings, node_templates(state))

    return build


def demo(args: argparse.Namespace) -> int:
    from karpy.demo import run_demo

    if args.replicas < 1:
        raise UsageError("--replicas must be at least 1")
    if args.plot:
        require_extra("plot", "matplotlib", needed_by="--plot")
    return run_demo(replicas=args.replicas, plot_path=args.plot)


def _positive(value: float, flag: str) -> float:
    if value <= 0:
        raise UsageError(f"{flag} must be positive")
    return value


def _tls_files(cert_dir: Path) -> tuple[Path, Path]:
    certfile, keyfile = cert_dir / "tls.crt", cert_dir / "tls.key"
    for f in (certfile, keyfile):
        if not f.is_file():
            raise UsageError(f"--cert-dir {cert_dir}: {f.name} not found (run 'karpy certs generate --out-dir {cert_dir}')")
    from karpy.serving.tls import TLSMaterialError, check_serving_pair

    try:
        check_serving_pair(certfile, keyfile)
    except TLSMaterialError as e:
        raise UsageError(f"--cert-dir {cert_dir}: {e}") from None
    return certfile, keyfile


def webhook(args: argparse.Namespace) -> int:
    from karpy.serving.server import bind, prepare_metrics_dir, serve

    certfile, keyfile = _tls_files(Path(args.cert_dir))
    prepare_metrics_dir()
    from karpy.webhook.app import Settings, create_app  # after the metrics directory is set

    try:
        sock = bind(host := listen_host(args.host), args.port)
    except OSError as e:
        raise UsageError(f"--port {args.port}: {e.strerror}") from None
    log.info("Serving admission webhook on https://%s:%d", host, sock.getsockname()[1])
    settings = Settings(aws=args.cloud_provider == "aws")
    serve(lambda: create_app(settings), sock=sock, certfile=str(certfile), keyfile=str(keyfile),
          workers=args.workers, threads=args.threads, header_timeout=args.header_timeout, body_timeout=args.body_timeout,
          cert_check_seconds=_positive(args.cert_check_seconds, "--cert-check-seconds"))
    return 0


def extender(args: argparse.Namespace) -> int:
    from karpy.serving.server import bind, prepare_metrics_dir, serve

    prepare_metrics_dir()                     # before anything imports prometheus_client (kubeclient does)
    import kubernetes

    from karpy.extender.app import create_app
    from karpy.kubeclient.raw import kubeconfig_env_files, load_configuration

    certfile, keyfile = _tls_files(Path(args.cert_dir)) if args.cert_dir else (None, None)
    # a $KUBECONFIG whose files are all missing leaves no cluster (with client-go's warning): serve without one
    watched = bool(args.kubeconfig or args.in_cluster or kubeconfig_env_files())
    cluster = "no cluster"
    if watched:                               # fail here, once, rather than in every worker
        try:
            cluster = load_configuration(args.kubeconfig, kubernetes.client.Configuration())
        except kubernetes.config.ConfigException as e:
            raise UsageError(f"reading the cluster configuration: {e}") from None

    try:
        sock = bind(host := listen_host(args.host), args.port)
    except OSError as e:
        raise UsageError(f"--port {args.port}: {e.strerror}") from None
    scheme = "https" if certfile else "http"
    log.info("Serving scheduler extender on %s://%s:%d (%s)", scheme, host, sock.getsockname()[1],
             f"watching the cluster of {cluster}" if watched else "no cluster")

    def factory() -> Any:
        view = None
        if watched:                           # in each worker: watches are threads, and threads do not survive a fork
            from karpy.extender.view import ClusterView
            from karpy.kubeclient.raw import RawClient, api_client
            view = ClusterView(RawClient(api_client(args.kubeconfig))).start()
        return create_app(view=view)

    serve(factory, sock=sock, certfile=str(certfile) if certfile else None, keyfile=str(keyfile) if keyfile else None,
          workers=args.workers, threads=args.threads, preload=not watched, header_timeout=args.header_timeout,
          body_timeout=args.body_timeout, cert_check_seconds=_positive(args.cert_check_seconds, "--cert-check-seconds"))
    return 0


def convert(args: argparse.Namespace) -> int:
    """`karpy convert`: the documents of FILEs with v1alpha5 objects as v1 ones (apis/v1/convert.py maps them)."""
    from karpy.apis.v1.convert import ConvertError
    from karpy.apis.v1.convert import convert as to_v1
    from karpy.plan.documents import PlanInputError, read_documents

    try:
        docs = read_documents(args.filename)
        converted = to_v1([d.body for d in docs])
    except PlanInputError as e:
        for problem in e.problems:
            print(f"karpy convert: {problem}", file=sys.stderr)
        return 2
    except ConvertError as e:
        for p in e.problems:
            print(f"karpy convert: {docs[p.index].where()}: {p.error}", file=sys.stderr)
        return 2
    if args.output == "json":
        doc = converted[0] if len(converted) == 1 else {"apiVersion": "v1", "kind": "List", "items": converted}
        print_json(doc)
    else:
        sys.stdout.write(yaml.safe_dump_all(converted, sort_keys=False, explicit_start=False))
    return 0
