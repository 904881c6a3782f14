"""The cloud-provider seam: what an instance type is, and what a provider does.

Data are frozen dataclasses; only the provider itself is a Protocol. The
scheduling core reads InstanceType and Offering and nothing else from here,
so `karpy plan`, the controller and the extender share one picture of the
catalog.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from karpy.apis import labels as wk
from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources

if TYPE_CHECKING:
    from karpy.controller.cloudprovider.catalog import Catalog


@dataclasses.dataclass(frozen=True, slots=True)
class Offering:
    zone: str
    capacity_type: str                    # "spot" | "on-demand"
    price_per_hour: float
    available: bool = True

    def allowed_by(self, reqs: Requirements) -> bool:
        """Pure: available now, in a zone and of a capacity type that `reqs` allow."""
        zone, capacity_type = reqs.get(wk.ZONE), reqs.get(wk.CAPACITY_TYPE)
        return self.available and (zone is None or zone.has(self.zone)) and (
            capacity_type is None or capacity_type.has(self.capacity_type))


@dataclasses.dataclass(frozen=True, slots=True)
class Burst:
    """A burstable type's cpu economics (EC2 T2/T3/T3a/T4g): each vCPU sustains `baseline` (a share, 0.2 = 20%)
    for free. In unlimited mode cpu above it is billed at `credit_price` dollars per vCPU-hour; in standard mode
    (`unlimited` False) it is throttled to the baseline instead."""

    baseline: float
    unlimited: bool
    credit_price: float = 0.0


@dataclasses.dataclass(frozen=True, eq=False)
class InstanceType:
    """A launchable machine shape. `requirements` holds every label it resolves
    (instance type, arch, os, zones and capacity types of its offerings, ...)."""

    name: str
    requirements: Requirements
    capacity: Resources
    overhead: Resources
    offerings: tuple[Offering, ...]
    burst: Burst | None = None            # None: every vCPU sustains its full speed

    @property
    def allocatable(self) -> Resources:
        """capacity - overhead, never negative."""
        return (self.capacity - self.overhead).clamp_zero()

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InstanceType) and other.name == self.name


@dataclasses.dataclass(frozen=True)
class NodeRequest:
    node_name: str                        # chosen before launch: the idempotency key
    provisioner: str
    requirements: Requirements            # provisioner ∩ packed pods
    instance_type_options: tuple[InstanceType, ...]   # cheapest first
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Instance:
    """What a provider launched, with what the launch module needs to write its Node."""

    provider_id: str                      # "fake://default-7kq2m", "aws:///us-east-1a/i-0abc..."
    node_name: str                        # the Node's name: the claim's on fake, the private DNS name on aws
    labels: Mapping[str, str]             # instance type, zone, capacity type (and region) as launched
    claim_name: str = ""                  # the NodeClaim it was launched for ("" when its tag is missing)
    capacity: Resources | None = None     # of the launched type, when the provider knows it
    allocatable: Resources | None = None
    price_per_hour: float | None = None
    image_id: str | None = None           # the AMI it booted (NodeClaim status.imageID: AMI drift compares it)
    warnings: tuple[str, ...] = dataclasses.field(default=(), compare=False)   # errors met on the way, in plain words
    # create() found it already launched for this claim (a retry, a restart) and returned it: not launched again
    adopted: bool = dataclasses.field(default=False, compare=False)

    @property
    def instance_type(self) -> str | None:
        return self.labels.get(wk.INSTANCE_TYPE)

    @property
    def zone(self) -> str | None:
        return self.labels.get(wk.ZONE)

    @property
    def capacity_type(self) -> str | None:
        return self.labels.get(wk.CAPACITY_TYPE)


def launched_as(it: InstanceType | None, offering_zone: str, capacity_type: str) -> dict[str, Any]:
    """Pure: capacity, allocatable and price of `it` launched in that zone and capacity type (empty when unknown)."""
    if it is None:
        return {}
    price = next((o.price_per_hour for o in it.offerings if o.zone == offering_zone and o.capacity_type == capacity_type), None)
    return {"capacity": it.capacity, "allocatable": it.allocatable, "price_per_hour": price}


SPOT_INTERRUPTION = "SpotInterrupted"
REBALANCE = "RebalanceRecommendation"
SCHEDULED_CHANGE = "ScheduledChange"
STATE_CHANGE = "InstanceStateChange"


@dataclasses.dataclass(frozen=True)
class Interruption:
    """What the cloud announced about some of its instances; the interruption controller acts on it."""

    kind: str                          # SPOT_INTERRUPTION | REBALANCE | SCHEDULED_CHANGE | STATE_CHANGE
    instance_ids: tuple[str, ...]      # as the queue names them (InterruptionQueue.instance_id maps a provider ID)
    detail: str                        # for people: what the event said

    @property
    def drains(self) -> bool:
        """Whether the node must go (a rebalance recommendation is only reported)."""
        return self.kind != REBALANCE


@dataclasses.dataclass(frozen=True)
class Notice:
    """One message read from an interruption queue: an interruption, nothing for karpy (both None),
    or a message karpy cannot read (`problem` says why). Deleted once handled, whichever it is."""

    receipt: str
    interruption: Interruption | None = None
    problem: str | None = None


class InterruptionQueue(Protocol):
    name: str

    def receive(self) -> Sequence[Notice]:
        """Up to a batch of messages, waiting a little for the first; raises CloudError."""

    def delete(self, notice: Notice) -> None:
        """Raises CloudError."""

    def instance_id(self, provider_id: str) -> str | None:
        """How this queue's messages name the instance of `provider_id`; None for another cloud's."""


class InstanceNotFound(LookupError):
    """The instance is gone (terminated, or never existed)."""


class InsufficientCapacity(RuntimeError):
    """No option launchable now; try others later."""


class CloudError(RuntimeError):
    """The cloud refused or did not answer; the message says what happened in plain words."""


class CloudProvider(Protocol):         # Sequence, not list[...]: in here, `list` is the method
    name: str

    def create(self, request: NodeRequest) -> Instance:
        """Launch the cheapest launchable option; called again with the same
        node_name it returns that instance instead of launching a second."""

    def delete(self, provider_id: str) -> None:
        """Start terminating; raise InstanceNotFound once it is gone."""

    def get(self, provider_id: str) -> Instance: ...

    def list(self) -> Sequence[Instance]: ...

    def instance_types(self, kubelet: Any | None = None) -> Sequence[InstanceType]:
        """Every type, including those with no offering available right now."""

    def catalog(self) -> Catalog:
        """The catalog the scheduling core plans with (the AWS one is read from EC2 and cached)."""

    def interruption_queue(self, name: str) -> InterruptionQueue | None:
        """The queue `name` of spot interruption, rebalance and scheduled-change messages, or None when the
        cloud has none; raises a ValueError saying why when the queue cannot be found."""
