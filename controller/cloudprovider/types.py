"""The cloud-provider seam: what an instance type is, and what a provider does.

Data are frozen dataclasses; only the provider itself is a Protocol. The
scheduling core reads InstanceType and Offering and nothing else from here,
so `karpy plan`, the controller and the extender share one picture of the
catalog.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol, Sequence

from karpy.apis.requirements import Requirements
from karpy.apis.resources import Resources


@dataclasses.dataclass(frozen=True, slots=True)
class Offering:
    zone: str
    capacity_type: str                    # "spot" | "on-demand"
    price_per_hour: float
    available: bool = True


@dataclasses.dataclass(frozen=True, eq=False)
class InstanceType:
    """A launchable machine shape. `requirements` holds every label it resolves
    (instance type, arch, os, zones and capacity types of its offerings, ...)."""

    name: str
    requirements: Requirements
    capacity: Resources
    overhead: Resources
    offerings: tuple[Offering, ...]

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
    provider_id: str                      # "fake://default-7kq2m", "aws:///us-east-1a/i-0abc..."
    node_name: str
    labels: Mapping[str, str]             # instance type, zone, capacity type as launched
    warnings: tuple[str, ...] = dataclasses.field(default=(), compare=False)   # errors met on the way, in plain words


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

    def instance_types(self, kubelet: object | None = None) -> Sequence[InstanceType]:
        """Every type, including those with no offering available right now."""
