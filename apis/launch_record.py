"""karpy's launch record: how a karpenter.sh/v1 NodeClaim says what a launch is for and how far it got.

A NodeClaim (apis/v1/nodeclaim.py) is written for every node karpy
launches, from a NodePool or a Provisioner, before the cloud is asked. v1's
schema has no place for the pods a node was launched for, so karpy keeps
them in one annotation holding JSON (PODS); the rest is v1's own: labels
name the NodePool or Provisioner and, once launched, the instance type,
zone and capacity type; status conditions say how far the launch got
(Launched, Registered, Initialized, Ready) plus karpy's PodsBound; the
disruption model's Drifted and Consolidatable are apis/v1/labels.py's. One pod
reference type, `PodReference`, travels from the watch to the bind.
Pure: no I/O, no clock reads (callers pass `now`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping

from karpy.apis import labels as wk
from karpy.apis.v1.labels import CONDITION_INITIALIZED

PODS = "karpy.dev/pods"                 # {"bind": bool, "pods": [{"namespace", "name", "uid"}]}
NODECLASS_PROVISIONER = {"group": wk.GROUP, "kind": "Provisioner"}   # a Provisioner whose template is inline

LAUNCHED = "Launched"                   # the instance exists; providerID recorded
REGISTERED = "Registered"               # its Node exists (written by karpy, or registered first and adopted)
INITIALIZED = CONDITION_INITIALIZED     # its Node is initialized (karpenter.sh/initialized)
READY = "Ready"                         # all of the above: v1's root condition (the `Ready` printer column)
PODS_BOUND = "PodsBound"                # karpy's: the pods it was launched for were bound (or left to the scheduler)


@dataclasses.dataclass(frozen=True, order=True)
class PodReference:
    """A pod as karpy refers to it from the watch to the bind: a pod made again under the same name has a new uid."""

    namespace: str
    name: str
    uid: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_manifest(self) -> dict[str, str]:
        return {"namespace": self.namespace, "name": self.name, **({"uid": self.uid} if self.uid else {})}


def pods_annotation(pods: Iterable[PodReference], *, bind: bool) -> str:
    """The PODS annotation's value for a launch for `pods` (bound to its node unless `bind` is False)."""
    return json.dumps({"bind": bind, "pods": [p.to_manifest() for p in pods]}, separators=(",", ":"))


def _promise(claim: Mapping[str, Any]) -> dict[str, Any]:
    raw = ((claim.get("metadata") or {}).get("annotations") or {}).get(PODS)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"NodeClaim {claim['metadata'].get('name')}: annotation {PODS}: {e}") from e
    return value if isinstance(value, dict) else {}


def pods_of(claim: Mapping[str, Any]) -> list[PodReference]:
    """The pods `claim` was launched for; raises ValueError naming the claim when its annotation is not JSON."""
    return [PodReference(str(p["namespace"]), str(p["name"]), p.get("uid") or None)
            for p in _promise(claim).get("pods") or [] if isinstance(p, dict) and p.get("namespace") and p.get("name")]


def binds(claim: Mapping[str, Any]) -> bool:
    """Whether the launch binds its pods (False for replacements: kube-scheduler places those)."""
    return bool(_promise(claim).get("bind", True))


def owner_name(claim: Mapping[str, Any]) -> str:
    """The NodePool or Provisioner the claim was launched from ("" when neither label is there)."""
    return wk.pool_of((claim.get("metadata") or {}).get("labels")) or ""


def node_name(claim: Mapping[str, Any]) -> str | None:
    """The Node the claim launched, once its status records it."""
    name = (claim.get("status") or {}).get("nodeName")
    return str(name) if name else None


def claim_node_name(claim: Mapping[str, Any]) -> str:
    """The name of the Node a claim launched (its own name until one is recorded): whose claim it is."""
    return node_name(claim) or str(claim["metadata"]["name"])


def condition(claim: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (claim.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_true(claim: Mapping[str, Any], kind: str) -> bool:
    found = condition(claim, kind)
    return found is not None and found.get("status") == "True"


def with_conditions(claim: Mapping[str, Any], now: str, **statuses: bool) -> list[dict[str, Any]]:
    """The claim's conditions with each of `statuses` (type -> True/False) set; a condition whose status stays
    keeps its lastTransitionTime. `now` is an RFC 3339 time."""
    out = [dict(c) for c in (claim.get("status") or {}).get("conditions") or []]
    for kind, value in statuses.items():
        status = "True" if value else "False"
        found = next((c for c in out if c.get("type") == kind), None)
        if found is None:
            out.append({"type": kind, "status": status, "reason": kind if value else f"Not{kind}", "message": "",
                        "lastTransitionTime": now})
        elif found.get("status") != status:
            found.update(status=status, reason=kind if value else f"Not{kind}", lastTransitionTime=now)
    return out
