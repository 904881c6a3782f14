"""What is in flight, in one index over NodeClaims: pods promised, nodes landing and nodes leaving.

Readers in other processes (the scheduler extender) keep the same picture from a NodeClaim watch with
`landing`: which Node a claim lands and which pods wait for it there. karpy no longer writes them on the
Node; a Node written by an older karpy still carries them as `karpy.dev/launched-for` (`launched_for`).

A NodeClaim (apis/launch_record.py) is the durable record of a launch: the
pods it was launched for are promised capacity until it has bound them, and
a claim being deleted promises nothing. The watch shows a launch's
effects a moment after they happen, so the index also holds what this
process did that the watch does not show yet: launches handed to a worker
before their claim is written (`reserve`), Nodes written whose pods are not
yet seen bound (`land`), pods bound but not yet seen so (`bound`). Each entry
ends when the watch catches up. Provisioning reads the index to leave
promised pods out of a batch and landing nodes out of its plan; the launch
module feeds it. Claims are read from the API server, not a cache: a stale
read would plan a pod twice. A node is leaving once its Node or its NodeClaim has a deletionTimestamp
(`leaving`): being drained and terminated, it is neither capacity nor a candidate for disruption.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis import launch_record as rec
from karpy.apis.launch_record import PodReference

Obj = dict[str, Any]


def promised(claims: Iterable[Obj]) -> set[str]:
    """Pure: uids of the pods live claims still have to bind (a claim done binding promises nothing more: a pod
    it left unbound, for want of room, waits again)."""
    out: set[str] = set()
    for claim in claims:
        if not is_leaving(claim) and rec.binds(claim) and not rec.is_true(claim, rec.PODS_BOUND):
            out.update(p.uid for p in rec.pods_of(claim) if p.uid)
    return out


def landing(claim: Obj) -> tuple[str, tuple[str, ...]] | None:
    """Pure: the Node a live claim lands (its status.nodeName) and the pods ("ns/name") it has still to bind there;
    None when it promises no Node anything (deleted, a replacement, done binding, not launched yet, or unreadable)."""
    node_name = rec.node_name(claim)
    if not node_name or is_leaving(claim):
        return None
    try:
        if not rec.binds(claim) or rec.is_true(claim, rec.PODS_BOUND):
            return None
        return str(node_name), tuple(p.key for p in rec.pods_of(claim))
    except ValueError:                    # an annotation that is not JSON: the launcher reports it
        return None


def is_leaving(obj: Mapping[str, Any]) -> bool:
    """Pure: whether a Node or NodeClaim is being deleted (drained, then terminated)."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def leaving(nodes: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]] = ()) -> set[str]:
    """Pure: names of the `nodes` leaving: the Node has a deletionTimestamp, or the NodeClaim that launched it
    (its status.nodeName) has one, the Node's own deletion following a moment later."""
    names = {str(n["metadata"]["name"]) for n in nodes}
    out = {str(n["metadata"]["name"]) for n in nodes if is_leaving(n)}
    out.update(str(node) for c in claims if is_leaving(c) and (node := rec.node_name(c)) in names)
    return out


def launched_for(node: Mapping[str, Any]) -> tuple[str, ...]:
    """Pure: the pods a Node written by an older karpy names in `karpy.dev/launched-for` (upgrades)."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(wk.LAUNCHED_FOR, "")
    return tuple(k.strip() for k in str(value).split(",") if k.strip())


class InFlight:
    def __init__(self, list_claims: Callable[[], Sequence[Obj]], settled: Callable[[PodReference], bool]) -> None:
        """`list_claims` reads every NodeClaim from the API server; `settled` says whether the watch shows a pod
        bound, leaving or gone."""
        self._list_claims, self._settled = list_claims, settled
        self._lock = threading.Lock()
        self._reserved: dict[str, int] = {}                    # uid -> launches for it whose claim may not be written yet
        self._landing: dict[str, list[PodReference]] = {}      # Node written or about to be -> the pods it binds
        self._just_bound: dict[str, PodReference] = {}         # uid -> pod this process bound, until the watch shows it

    def claims(self) -> list[Obj]:
        return list(self._list_claims())

    # --- what this process does, until the watch shows it ------------------------------------------
    def reserve(self, uids: Iterable[str]) -> None:
        """Count `uids` as promised from before their launch is handed to a worker until `release` (called once the
        launch returned: its claim is written by then, or deleted after a failure)."""
        with self._lock:
            for uid in uids:
                self._reserved[uid] = self._reserved.get(uid, 0) + 1

    def release(self, uids: Iterable[str]) -> None:
        with self._lock:
            for uid in uids:
                left = self._reserved.pop(uid, 1) - 1
                if left:
                    self._reserved[uid] = left

    def land(self, claim: Obj) -> None:
        """Mark the claim's Node as landing (before it is written): see landing_nodes."""
        node_name = rec.node_name(claim)
        if node_name and rec.binds(claim):
            with self._lock:
                self._landing[node_name] = rec.pods_of(claim)

    def bound(self, pod: PodReference) -> None:
        if pod.uid:
            with self._lock:
                self._just_bound[pod.uid] = pod

    # --- reads ---------------------------------------------------------------------------------------
    def promised_pods(self) -> set[str]:
        """Uids of the pods capacity exists or is on its way for, even while the watch has not yet shown them
        bound: a live claim's not yet bound, a launch about to write its claim, a bind not yet seen."""
        with self._lock:                 # read before the claims: a launch that ends meanwhile has written its claim
            out: set[str] = set(self._reserved)
            just_bound = list(self._just_bound.items())
        # their claim may be done binding already, and planning them again would launch a node for pods that have one
        for uid, pod in just_bound:
            if self._settled(pod):
                with self._lock:
                    self._just_bound.pop(uid, None)
            else:
                out.add(uid)
        return out | promised(self.claims())

    def landing_nodes(self) -> set[str]:
        """Nodes this process wrote (or is writing) whose pods the watch does not yet show bound to them: a batch
        must not count their room as free, or it would place other pods on capacity these pods take."""
        with self._lock:
            landing = list(self._landing.items())
        out = set()
        for node_name, pods in landing:
            if all(self._settled(p) for p in pods):
                with self._lock:
                    self._landing.pop(node_name, None)
            else:
                out.add(node_name)
        return out

    def leaving_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> set[str]:
        """Names of the `nodes` being deleted, by their Node or by their NodeClaim (see `leaving`)."""
        return leaving(list(nodes), self.claims())
