"""What a pod asks of a node: its effective resource requests, as kube-scheduler computes them.

max(sum of containers, largest init container) + pod overhead, plus one pod;
a container's limits stand in for requests it does not state. Pure.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from karpy.apis.labels import MIRROR_POD
from karpy.apis.quantity import QuantityError
from karpy.apis.resources import PODS, Resources


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked `controller: true`, if any: the one owner that manages (and recreates) the object."""
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None)


def owned_by_daemonset(pod: Mapping[str, Any]) -> bool:
    """A DaemonSet's pod: it runs where its DaemonSet puts it, so karpy neither provisions for it nor evicts it.

    Decided by the controller ownerReference, as `kubectl drain` decides it: a DaemonSet that merely owns
    the pod (no `controller: true`) would not put it back, so that pod is treated like any other."""
    ref = controller_of(pod)
    return ref is not None and ref.get("kind") == "DaemonSet"


def mirror(pod: Mapping[str, Any]) -> bool:
    """A static pod's API mirror: annotated so by its kubelet, or owned by its Node (Karpenter's IsOwnedByNode).
    It goes with its node; evicting it would do nothing."""
    meta = pod.get("metadata") or {}
    return MIRROR_POD in (meta.get("annotations") or {}) or \
        any(r.get("kind") == "Node" for r in meta.get("ownerReferences") or [])


def terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: finished, nothing left to stop."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def evictable(pod: Mapping[str, Any]) -> bool:
    """A pod a drain asks to leave: not a DaemonSet's or a mirror pod, and not finished."""
    return not (owned_by_daemonset(pod) or mirror(pod) or terminal(pod))


def busy(pods: Iterable[Mapping[str, Any]]) -> bool:
    """Some workload runs among `pods` (a node's): a pod a drain would evict that is not already leaving."""
    return any(evictable(p) and not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)


def object_key(obj: Mapping[str, Any]) -> str:
    """"namespace/name", the way pods are named in logs, annotations and gaps (`default` when unset)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """Raises QuantityError naming the container field that does not parse."""
    containers = Resources()
    for i, c in enumerate(spec.get("containers") or []):
        containers = containers + container_requests(c, f"spec.containers[{i}]")
    init = Resources()
    for i, c in enumerate(spec.get("initContainers") or []):
        init = init.max_with(container_requests(c, f"spec.initContainers[{i}]"))
    total = containers.max_with(init) + Resources.parse(spec.get("overhead"))
    total[PODS] = total.get(PODS, 0) + 1000
    return total


def container_requests(container: Mapping[str, Any], path: str) -> Resources:
    resources = container.get("resources") or {}
    requests = Resources()
    for field in ("limits", "requests"):                      # limits stand in for missing requests
        try:
            requests.update(Resources.parse(resources.get(field)))
        except QuantityError as e:
            raise QuantityError(f"{path}.resources.{field}.{e}") from None
    return requests
