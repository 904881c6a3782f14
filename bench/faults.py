"""The faults a production cluster sees, each run against real processes on loopback, with its figures and targets.

    python3 bench/faults.py [--only kill,leader,poison,slow,malformed,outage] [--pods 6] [--providers fake aws] ...

kill       A controller killed at each point of a launch, then started again. Fake provider and AWS provider (EC2
           played by a moto server on loopback). Per run: a fresh `karpy sim` (with the AWS registrar in aws mode),
           the CRDs, a Provisioner that allows only m5.large on-demand, and a Deployment of --pods pods of 1500m cpu
           (one node each). `karpy controller` starts with KARPY_LAUNCH_FAULT=<point> and exits there (os._exit, as
           kill -9 would leave it); a second controller starts without it and must finish the job. Printed:
           duplicates (instances launched beyond one per pod; aws: every instance moto ever ran, fake: distinct
           provider ids in the `Launched instance` lines of both runs and on the Nodes), leaked (instances launched that no Node holds
           once the pods run; aws: still running), pending (pods not Running at the end), shared (nodes that run more
           than one of the pods, each of which needs a node of its own: an overcommitted node), seconds (from the second
           controller's start until every pod runs). Targets: 0 duplicates, 0 leaked, 0 pending.
leader     Two `karpy controller --leader-elect` replicas; the leader is paused (SIGSTOP) until the other holds the
           Lease, --pods pods that each need a node of their own are created, and the old leader resumes (SIGCONT).
           Printed: takeover (seconds from the pause until the Lease changed hands), old-exit (the resumed leader's
           exit code; `running` if it did not stand down), nodes, duplicates (nodes and launched instances beyond one
           per pod), shared (nodes running more than one of the pods), seconds (from the pods' creation until all
           run). Targets: 0 duplicates, 0 shared, the old leader exits.
poison     A healthy 500m pod alone, then next to a pod requesting memory "1e30", each on a fresh cluster and
           controller: seconds until the healthy pod runs, and whether the poison pod stayed Pending with a
           FailedScheduling Event. Target: as fast with the poison pod (within 1.5x + 1 s of alone).
slow       --slow-clients connections announcing `Content-Length: 100000`, then one byte every 2 s, against
           `karpy webhook` and `karpy extender` with their default settings; meanwhile --requests normal requests,
           one every --request-every seconds, each with a 2 s timeout. Printed: answered (share of normal requests
           answered 200), the slowest of them. Target: >= 90%.
malformed  Non-UTF-8 bytes, non-JSON, wrong shapes, an empty body, deep nesting, an oversized Content-Length,
           bad chunked encoding and conflicting framing, posted to every path of both servers. Printed: requests,
           answers by class (2xx, 4xx, 5xx) and none (connection closed without an answer). Target: 0 5xx.
outage     A controller whose API server goes away for --outage seconds and comes back on the same port: the
           controller reaches `karpy sim` through a relay (bench/tcp_gate.py) that is shut, the cluster behind it
           is stopped and started again, empty, with the CRDs and the Provisioner applied before the relay opens
           again; then a pod of its own node is created. Printed:
           log lines from the stop until that pod runs, the lines among them of the outage logger, tracebacks,
           whether the pod got its node, seconds from its creation until it runs. Targets: one outage line when
           the server goes, one a minute while it stays down, one when it is back; the pod placed.

Every process the benchmark starts is stopped before it exits; servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.aws import REGION
from bench.fault_cluster import api_outage, healthy_pod_seconds, kill_point, leader_pause
from bench.fault_servers import SERVERS, malformed, slow_clients
from bench.measure import free_port, wait_for
from karpy.controller.launch.launcher import KILL_POINTS

FAULTS = ["kill", "leader", "poison", "slow", "malformed", "outage"]


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def run_kill(args: argparse.Namespace, env: dict[str, str]) -> None:
    moto: subprocess.Popen[bytes] | None = None
    refusing = socket.socket()             # moto has no Pricing API: refuse it at once, the shipped table stands in
    refusing.bind(("127.0.0.1", 0))
    moto_url = None
    env = dict(env)
    if "aws" in args.providers:
        port = free_port()
        moto_url = f"http://127.0.0.1:{port}"
        moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
        env.update({"AWS_ENDPOINT_URL": moto_url, "AWS_ENDPOINT_URL_PRICING": f"http://127.0.0.1:{refusing.getsockname()[1]}"})
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")})
    try:
        if moto_url:
            wait_for(lambda: urllib.request.urlopen(moto_url + "/moto-api/", timeout=2).status == 200, 30, "the moto server")
        print(f"\n## kill: {args.pods} pods of 1500m cpu (one m5.large each); the first controller dies at the point, "
              "a second finishes (targets: 0 duplicates, 0 leaked, 0 pending, 0 shared)")
        print(f"{'provider':>8} {'kill point':>13} {'exit':>5} {'duplicates':>11} {'leaked':>7} {'pending':>8} {'shared':>7} {'seconds':>8} {'verdict':>7}")
        for provider in args.providers:
            for point in args.points:
                r = kill_point(point, aws=provider == "aws", pods=args.pods, timeout=args.timeout, moto_url=moto_url, env=env)
                ok = r["duplicates"] <= 0 and r["leaked"] == 0 and r["pending"] == 0 and r["shared"] == 0
                print(f"{provider:>8} {point:>13} {r['exit']:>5} {r['duplicates']:>11} {r['leaked']:>7} {r['pending']:>8} "
                      f"{r['shared']:>7} {r['seconds']:>8.1f} {verdict(ok):>7}", flush=True)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(timeout=10)
        refusing.close()


def run_leader(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"\n## leader: the leader paused until the other replica holds the Lease, {args.pods} pods of 1500m cpu "
          "(one m5.large each), then resumed (targets: 0 duplicates, 0 shared, the old leader exits)")
    r = leader_pause(pods=args.pods, timeout=args.timeout, env=env)
    ok = r["duplicates"] <= 0 and r["old_exit"] not in ("running", 0) and r["pending"] == 0 and r["shared"] == 0
    print(f"{'takeover s':>10} {'old exit':>9} {'new alive':>9} {'nodes':>6} {'duplicates':>11} {'pending':>8} {'shared':>7} {'seconds':>8} {'verdict':>7}")
    print(f"{r['takeover']:>10.1f} {r['old_exit']!s:>9} {r['new_alive']!s:>9} {r['nodes']:>6} {r['duplicates']:>11} "
          f"{r['pending']:>8} {r['shared']:>7} {r['seconds']:>8.1f} {verdict(ok):>7}", flush=True)


def run_poison(args: argparse.Namespace, env: dict[str, str]) -> None:
    print('\n## poison: seconds until a healthy 500m pod runs, alone and next to a pod requesting memory "1e30" '
          "(target: within 1.5x + 1 s of alone)")
    alone = healthy_pod_seconds(poison=False, timeout=args.timeout, env=env)
    beside = healthy_pod_seconds(poison=True, timeout=args.timeout, env=env)
    ok = beside["seconds"] <= 1.5 * alone["seconds"] + 1.0 and beside["poison_pending"]
    print(f"{'alone s':>8} {'with poison s':>14} {'poison pending':>15} {'event':>6} {'tracebacks':>11} {'verdict':>7}")
    print(f"{alone['seconds']:>8.1f} {beside['seconds']:>14.1f} {beside['poison_pending']!s:>15} {beside['flagged']!s:>6} "
          f"{beside['tracebacks']:>11} {verdict(ok):>7}", flush=True)


def run_slow(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"\n## slow: {args.slow_clients} clients send headers with Content-Length: 100000, then a byte every 2 s; "
          f"{args.requests} normal requests meanwhile, one every {args.request_every:g} s, 2 s timeout each (target: >= 90% answered)")
    print(f"{'server':>9} {'answered':>9} {'share':>6} {'slowest s':>10} {'verdict':>7}")
    for name in SERVERS:
        r = slow_clients(name, clients=args.slow_clients, normal=args.requests, every=args.request_every, env=env)
        share = r["answered"] / r["requests"]
        print(f"{name:>9} {r['answered']:>4}/{r['requests']:<4} {share:>6.0%} {r['slowest']:>10.2f} {verdict(share >= 0.9):>7}",
              flush=True)


def run_malformed(args: argparse.Namespace, env: dict[str, str]) -> None:
    print("\n## malformed: bad bytes, bad JSON, wrong shapes, oversized, bad chunked encoding to every path (target: 0 5xx)")
    print(f"{'server':>9} {'requests':>9} {'2xx':>5} {'4xx':>5} {'5xx':>5} {'none':>5} {'alive':>6} {'verdict':>7}")
    for name in SERVERS:
        r = malformed(name, env=env)
        print(f"{name:>9} {r['requests']:>9} {r['2xx']:>5} {r['4xx']:>5} {r['5xx']:>5} {r['none']:>5} {r['alive']!s:>6} "
              f"{verdict(r['5xx'] == 0 and r['alive']):>7}", flush=True)
        for failure in r["failures"]:
            print(f"{'':>9} {failure}")


def run_outage(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(f"\n## outage: the controller's API server stopped for {args.outage:g} s and started again on the same port "
          "(targets: one outage line as it goes, one a minute while down, one when back; the next pod placed)")
    r = api_outage(down=args.outage, timeout=args.timeout, env=env)
    ok = r["placed"] and r["tracebacks"] == 0 and r["outage_lines"] <= 2 + args.outage // 60   # down, each minute, back
    print(f"{'log lines':>10} {'outage lines':>13} {'tracebacks':>11} {'pod placed':>11} {'seconds':>8} {'verdict':>7}")
    print(f"{r['lines']:>10} {r['outage_lines']:>13} {r['tracebacks']:>11} {r['placed']!s:>11} {r['seconds']:>8.1f} "
          f"{verdict(ok):>7}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(FAULTS), help=f"comma-separated faults to run, of {','.join(FAULTS)}")
    parser.add_argument("--pods", type=int, default=6, help="kill, leader: pods of one node each")
    parser.add_argument("--providers", nargs="+", default=["fake", "aws"], choices=["fake", "aws"], help="kill: providers")
    parser.add_argument("--points", nargs="+", default=list(KILL_POINTS), choices=list(KILL_POINTS), help="kill: points")
    parser.add_argument("--slow-clients", type=int, default=20, help="slow: connections held open")
    parser.add_argument("--requests", type=int, default=10, help="slow: normal requests sent meanwhile")
    parser.add_argument("--request-every", type=float, default=1.0, help="slow: seconds between normal requests")
    parser.add_argument("--outage", type=float, default=10.0, help="outage: seconds the API server is down")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds any one wait may take")
    args = parser.parse_args()
    chosen = [f.strip() for f in args.only.split(",") if f.strip()]
    if unknown := set(chosen) - set(FAULTS):
        parser.error(f"--only: unknown fault(s) {', '.join(sorted(unknown))}; choose from {','.join(FAULTS)}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": REGION}
    runners = {"kill": run_kill, "leader": run_leader, "poison": run_poison, "slow": run_slow, "malformed": run_malformed,
               "outage": run_outage}
    for fault in FAULTS:
        if fault in chosen:
            runners[fault](args, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
