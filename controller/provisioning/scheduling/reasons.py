"""Why a pod does not fit: a typed reason and the sentence users read.

The scheduling core says why a node, a provisioner or the whole plan turns a
pod away. Callers decide by the reason's `kind` (is it a missing instance
type? a failure?), never by parsing its words; the words (`text`, and
`str()` of the reason) are what Events, `karpy plan` and its JSON show.
Pure.
"""

from __future__ import annotations

import dataclasses
import enum


class Why(enum.Enum):
    TAINT = "taint"                          # the pod does not tolerate a taint of the node or provisioner
    HOST_PORT = "host-port"                  # a host port the pod asks for is taken on the node
    NODE_LABELS = "node-labels"              # the existing node's labels do not meet the pod's requirements
    INSUFFICIENT = "insufficient"            # the existing node has too little of a resource left
    UNKNOWN_RESOURCE = "unknown-resource"    # no instance type has a resource the pod asks for
    REQUIREMENTS = "requirements"            # the pod's requirements contradict the provisioner's or the node's
    TOPOLOGY = "topology"                    # a topology spread or pod (anti-)affinity leaves no domain
    LIMITS = "limits"                        # the provisioner's limits leave no room
    NO_INSTANCE_TYPE = "no-instance-type"    # no instance type meets the pod's requests and requirements together
    NO_PROVISIONER = "no-provisioner"        # nothing can launch nodes
    PROVISIONERS = "provisioners"            # every provisioner turned the pod away (see `parts`)
    FAILED = "failed"                        # reading or placing the pod raised an error


@dataclasses.dataclass(frozen=True)
class Reason:
    kind: Why
    text: str
    parts: tuple[Reason, ...] = ()           # for PROVISIONERS: each provisioner's own reason

    def __str__(self) -> str:
        return self.text

    def rephrased(self, text: str) -> Reason:
        """The same kind of reason in other words (more precise ones, once the cause is known)."""
        return dataclasses.replace(self, text=text)


def failed(error: str) -> Reason:
    """An error confined to one pod, as its reason."""
    return Reason(Why.FAILED, f"scheduling failed, {error}")


def every_provisioner(reasons: list[Reason]) -> Reason:
    """Each provisioner's reason, in the order tried; one alone is itself."""
    if len(reasons) == 1:
        return reasons[0]
    return Reason(Why.PROVISIONERS, "; ".join(r.text for r in reasons), tuple(reasons))
