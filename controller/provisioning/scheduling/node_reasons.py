"""Why a planned node exists: what its pods ask of a node that no node they could share
provides, as the short phrases `karpy plan` prints under `reasons`.

Read from the plan itself: a resource beyond cpu, memory, pods and
ephemeral storage (a GPU), a required topology spread (with the domain the
node is in), a required pod (anti-)affinity, a taint its pods tolerate, a
node selector or required node affinity pinning a label (a zone, a type, a
capacity type), or the limits of a provisioner tried before its own that
would otherwise have taken its pods. A node whose pods ask for none of these exists for their
room alone: "capacity". Each phrase names the first pod it comes from and
how many more share it. Pure.
"""

from __future__ import annotations

from typing import Sequence

from karpy.apis.selectors import tolerates, untolerated
from karpy.controller.provisioning.scheduling.nodes import NodeTemplate
from karpy.controller.provisioning.scheduling.pods import PodInfo
from karpy.controller.provisioning.scheduling.scheduler import PlannedNode

CAPACITY = "capacity"
STANDARD_RESOURCES = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def node_reasons(node: PlannedNode, templates: Sequence[NodeTemplate] = ()) -> list[str]:
    """What forced `node`, in the order its pods first show it; ["capacity"] when nothing but room did.
    `templates` are the scheduler's, in the order it tries them, their limits as the plan left them."""
    found: dict[str, list[str]] = {}          # phrase -> the pods it comes from, in order

    def note(phrase: str, pod_key: str) -> None:
        found.setdefault(phrase, []).append(pod_key)

    for pod in node.pods:
        for resource in sorted(pod.requests):
            if resource not in STANDARD_RESOURCES and pod.requests[resource] > 0:
                note(f"resource {resource}", pod.key)
        for spread in pod.spreads:
            if spread.required:
                note(f"topology spread over {spread.key} (domain {node.labels.get(spread.key, '<unset>')})", pod.key)
        for term in pod.affinities:
            if not term.weight:
                note(f"pod {'anti-affinity' if term.anti else 'affinity'} on {term.key}", pod.key)
        for taint in node.taints:
            if tolerates(pod.tolerations, taint):
                note(f"taint {taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}", pod.key)
        for requirement in pod.strict_requirements.values():
            note(f"node selector {requirement}", pod.key)
    for template in templates:
        if template.name == node.provisioner:
            break
        if template.remaining is not None and node.pods and all(_admits(template, p) for p in node.pods):
            left = ", ".join(f"{n}={q}" for n, q in template.remaining.clamp_zero().to_manifest().items())
            note(f"limits of provisioner {template.name} (remaining {left})", node.pods[0].key)
    if not found:
        return [CAPACITY]
    return [f"{phrase} ({_pods(keys)})" for phrase, keys in found.items()]


def _admits(template: NodeTemplate, pod: PodInfo) -> bool:
    """True when `template`'s nodes would take `pod` but for its limits (labels and taints only)."""
    return (not untolerated(pod.tolerations, template.taints)
            and template.requirements.compatible(pod.requirements, well_known=template.well_known) is None)


def _pods(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else f"{keys[0]} and {len(keys) - 1} more"
