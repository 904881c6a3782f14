"""Expectations that read as the test's sentence.

Webhook answers (`expect_admitted`, `expect_denied`), and Karpenter's scheduling expectations
(pkg/test/expectations): `expect_provisioned` plans pods in process with the same core and the
same JSON as `karpy plan -o json`; `expect_scheduled`, `expect_not_scheduled` and `expect_nodes`
read that plan, or the local cluster when given a client; `expect_events` reads Events from the
cluster. They lean on the plan's JSON contract and the API only, so a change inside the
scheduling core changes nothing here.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import time
from typing import Any, Mapping

import requests

from karpy.kubeclient.raw import RawClient, path_of


def expect_admitted(response: requests.Response, uid: str | None = None) -> dict[str, Any]:
    """The AdmissionReview response allowed the object; returns the response part."""
    __tracebackhide__ = True
    assert response.status_code == 200, response.text
    review = response.json()
    assert review["kind"] == "AdmissionReview"
    answer = review["response"]
    if uid is not None:
        assert answer["uid"] == uid
    assert answer["allowed"] is True, answer.get("status")
    return answer


def expect_denied(response: requests.Response, *paths: str) -> str:
    """The object was denied with status 400 naming every path in `paths`; returns the message."""
    __tracebackhide__ = True
    assert response.status_code == 200, response.text
    answer = response.json()["response"]
    assert answer["allowed"] is False, f"expected a denial naming {paths}"
    assert answer["status"]["code"] == 400
    message = answer["status"]["message"]
    for path in paths:
        assert any(line.startswith(path + ": ") for line in message.splitlines()), (
            f"{path!r} not named in:\n{message}"
        )
    return message


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoded JSONPatch of an admission response (empty when there is none)."""
    __tracebackhide__ = True
    if "patch" not in answer:
        return []
    assert answer["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(answer["patch"]))


def expect_json_error(response: requests.Response, status: int = 400) -> str:
    """A JSON error body with the given status; returns its message."""
    __tracebackhide__ = True
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert body["message"]
    return str(body["message"])


def eventually(check: Any, *, timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Call `check` until it returns a truthy value (returned) or raises no AssertionError; else fail."""
    __tracebackhide__ = True
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = None
        except AssertionError as e:
            last = e
        time.sleep(interval)
    raise AssertionError(f"not within {timeout}s: {last or 'condition stayed false'}")


# --- scheduling -------------------------------------------------------------------------------------
def pod_key(pod: Mapping[str, Any] | str) -> str:
    """`namespace/name` of a pod manifest (a string is taken as the key already)."""
    if isinstance(pod, str):
        return pod
    meta = pod["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


@dataclasses.dataclass(frozen=True)
class Provisioned:
    """One provisioning pass planned in process. `plan` is the document `karpy plan -o json` prints."""

    plan: dict[str, Any]
    warnings: list[str]
    failed_provisioners: dict[str, str]

    def node_of(self, pod: Mapping[str, Any] | str) -> dict[str, Any] | None:
        """The new or existing node the plan puts `pod` on (`None`: on none)."""
        key = pod_key(pod)
        return next((n for n in self.plan["nodes"] + self.plan["existingNodes"] if key in n["pods"]), None)

    @property
    def unschedulable(self) -> dict[str, str]:
        """Pod key -> the reason it fits nowhere."""
        return {u["pod"]: u["reason"] for u in self.plan["unschedulable"]}


def expect_provisioned(*objects: Mapping[str, Any], catalog: str = "aws", node_cost_per_hour: float = 0.0) -> Provisioned:
    """ExpectProvisioned, in process: Provisioners, pods, nodes, workloads, DaemonSets, Namespaces and an optional
    InstanceTypeCatalog planned by the core `karpy plan` runs (`catalog` names the built-in one used when no
    InstanceTypeCatalog is among `objects`). Bad input raises PlanInputError, naming each problem."""
    from karpy.controller.provisioning.scheduling.packers import PackingOptions
    from karpy.controller.provisioning.scheduling.scheduler import Scheduler
    from karpy.plan.documents import Document
    from karpy.plan.inputs import from_documents
    from karpy.plan.render import plan_json

    loaded = from_documents([Document("<test>", i, o) for i, o in enumerate(objects, 1)], catalog=catalog)
    scheduler = Scheduler(loaded.snapshot, packing=PackingOptions(node_cost_per_hour=node_cost_per_hour))
    results = scheduler.solve()
    # through JSON and back, so a test reads exactly what a user of `karpy plan` reads
    return Provisioned(json.loads(json.dumps(plan_json(results, scheduler.templates))), list(loaded.warnings),
                       dict(results.failed_provisioners))


def expect_consolidated(*objects: Mapping[str, Any], catalog: str = "aws", now: datetime.datetime | None = None,
                        **options: Any) -> dict[str, Any]:
    """What `karpy plan --consolidate -o json` prints for `objects` (its `decisionSeconds` aside), decided in process
    at `now` (the wall clock by default); `options` are the Consolidator's keyword arguments."""
    from karpy.controller.consolidation.decisions import Consolidator
    from karpy.plan.documents import Document
    from karpy.plan.inputs import from_documents
    from karpy.plan.render import consolidation_json

    loaded = from_documents([Document("<test>", i, o) for i, o in enumerate(objects, 1)], catalog=catalog)
    decided = Consolidator(loaded.snapshot, loaded.pdbs, now=now or datetime.datetime.now(datetime.timezone.utc), **options).plan()
    return dict(json.loads(json.dumps(consolidation_json(decided))))


def _live_pod(client: RawClient, pod: Mapping[str, Any] | str) -> dict[str, Any]:
    namespace, name = pod_key(pod).split("/", 1)
    return dict(client.get(path_of("v1", "pods", namespace, name)))


def expect_scheduled(where: Provisioned | RawClient, pod: Mapping[str, Any] | str, *, timeout: float = 0.0) -> dict[str, Any]:
    """ExpectScheduled: the node `pod` is on. From a Provisioned, the planned node (new or existing, as the plan's
    JSON gives it); from a client, the Node object its `spec.nodeName` names, waiting up to `timeout` seconds."""
    __tracebackhide__ = True
    if isinstance(where, Provisioned):
        found = where.node_of(pod)
        assert found is not None, f"{pod_key(pod)} was not scheduled: {where.unschedulable.get(pod_key(pod), 'not in the plan')}"
        return found
    client = where

    def bound() -> str:
        name = (_live_pod(client, pod).get("spec") or {}).get("nodeName")
        assert name, f"{pod_key(pod)} has no nodeName"
        return str(name)

    name = eventually(bound, timeout=timeout) if timeout else bound()
    return dict(client.get(path_of("v1", "nodes", name=name)))


def expect_not_scheduled(where: Provisioned | RawClient, pod: Mapping[str, Any] | str) -> str:
    """ExpectNotScheduled: `pod` is on no node. From a Provisioned, returns the reason the plan gives;
    from a client, the message of its PodScheduled=False condition ("" when it has none)."""
    __tracebackhide__ = True
    if isinstance(where, Provisioned):
        found = where.node_of(pod)
        assert found is None, f"{pod_key(pod)} was scheduled to {found['name']}"
        reason = where.unschedulable.get(pod_key(pod))
        assert reason is not None, f"{pod_key(pod)} is not in the plan at all"
        return reason
    live = _live_pod(where, pod)
    assert not (live.get("spec") or {}).get("nodeName"), f"{pod_key(pod)} was scheduled to {live['spec']['nodeName']}"
    condition: dict[str, Any] = next((c for c in (live.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    return str(condition.get("message") or "")


def expect_nodes(where: Provisioned | RawClient, count: int | None = None, *,
                 labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The new nodes of a plan, or the Node objects of the cluster, carrying every one of `labels`;
    exactly `count` of them when it is given."""
    __tracebackhide__ = True
    wanted = dict(labels or {})
    if isinstance(where, Provisioned):
        nodes = [n for n in where.plan["nodes"] if all(n["labels"].get(k) == v for k, v in wanted.items())]
    else:
        nodes = [n for n in where.get(path_of("v1", "nodes"))["items"]
                 if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
    if count is not None:
        assert len(nodes) == count, f"expected {count} node(s) labelled {wanted}, found {len(nodes)}"
    return nodes


def expect_events(client: RawClient, obj: Mapping[str, Any], *reasons: str, event_type: str | None = None,
                  timeout: float = 5.0) -> list[dict[str, Any]]:
    """Events about `obj` (matched by kind, namespace and name) with each of `reasons`, waiting up to `timeout`
    seconds for them to appear; returns the matching Events, oldest first. With no reasons, any Event counts."""
    __tracebackhide__ = True
    kind, meta = obj.get("kind"), obj["metadata"]
    namespace = meta.get("namespace") or "default"

    def found() -> list[dict[str, Any]]:
        about = [e for e in client.get(path_of("v1", "events", namespace))["items"]
                 if e["involvedObject"].get("name") == meta["name"] and (kind is None or e["involvedObject"].get("kind") == kind)
                 and (event_type is None or e.get("type") == event_type)]
        missing = [r for r in reasons if not any(e.get("reason") == r for e in about)]
        assert about and not missing, f"no {', '.join(missing) or 'Event'} on {kind} {meta['name']}: {[e.get('reason') for e in about]}"
        return sorted((e for e in about if not reasons or e.get("reason") in reasons),
                      key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    return list(eventually(found, timeout=timeout))
