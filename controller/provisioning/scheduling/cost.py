"""What a node costs per hour with the pods planned onto it: the one number every packing decision minimises.

    cost = list price of the offering
         + surplus cpu credits (burstable types in unlimited mode)
         + per-node costs: root volume(s), a public IPv4 address, the operator's own figure

Burstable types (EC2 T2/T3/T3a/T4g) sustain a share of each vCPU (their baseline). The load is the cpu the
node's pods and DaemonSets request, sustained: in unlimited mode (T3/T3a/T4g by default) the load above the
baseline is billed as surplus credits per vCPU-hour; in standard mode (T2 by default) the instance is throttled
to its baseline, so the planner gives pods no more cpu than the baseline (`sustained_cpu`). Overhead already
taken off allocatable (kube-reserved, system-reserved, eviction) is not priced again; DaemonSet requests count
once, as load. Pure: numbers in, numbers out. See docs/cost.md.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from karpy.apis.quantity import Quantity
from karpy.apis.resources import CPU
from karpy.apis.v1alpha1 import AWSSettings
from karpy.controller.cloudprovider.types import InstanceType

HOURS_PER_MONTH = 730                       # AWS prices EBS per GB-month of 730 hours
# EBS volume prices, us-east-1, $ per GB-month (https://aws.amazon.com/ebs/pricing/)
VOLUME_PRICE_PER_GB_MONTH = {"gp3": 0.08, "gp2": 0.10, "io1": 0.125, "io2": 0.125, "st1": 0.045, "sc1": 0.015,
                             "standard": 0.05}
# the root volumes Karpenter gives each AMI family when the template names none: (size GiB, type) per volume
AMI_FAMILY_VOLUMES = {"AL2": ((20, "gp3"),), "Ubuntu": ((20, "gp3"),), "Custom": ((20, "gp3"),),
                      "Bottlerocket": ((4, "gp3"), (20, "gp3"))}
DEFAULT_AMI_FAMILY = "AL2"
# a public IPv4 address, in use, per hour (https://aws.amazon.com/vpc/pricing/, since February 2024)
PUBLIC_IPV4_PER_HOUR = 0.005
# whether a node gets a public IPv4 address when nothing says (no subnet is known offline): EKS's default
# public subnets assign one, and pricing it keeps a plan of many small nodes from looking cheaper than it is
DEFAULT_PUBLIC_IPV4 = True
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class NodeCosts:
    """What every node of a provisioner costs per hour besides its instance."""

    volumes: float = 0.0                    # EBS volumes
    public_ipv4: float = 0.0
    operator: float = 0.0                   # --node-cost-per-hour: what the operator says a node costs besides

    @property
    def per_hour(self) -> float:
        return self.volumes + self.public_ipv4 + self.operator


def volume_per_hour(size_gib: float, volume_type: str) -> float:
    """What an EBS volume costs per hour; an unknown type is priced as gp3."""
    return size_gib * VOLUME_PRICE_PER_GB_MONTH.get(volume_type, VOLUME_PRICE_PER_GB_MONTH["gp3"]) / HOURS_PER_MONTH


def node_costs(settings: AWSSettings | None, *, operator: float = 0.0, public_ipv4: bool = DEFAULT_PUBLIC_IPV4) -> NodeCosts:
    """The per-node costs of nodes launched with `settings` (a provisioner's AWS block or AWSNodeTemplate):
    the block device mappings' volumes when given (a mapping without a size is 20 GiB, without a type gp3),
    else the AMI family's default volumes."""
    volumes: list[tuple[float, str]] = []
    for mapping in (settings.block_device_mappings if settings is not None else None) or []:
        ebs = mapping.ebs
        size = Quantity.parse(ebs.volume_size).milli / 1000 / GIB if ebs is not None and ebs.volume_size else 20.0
        volumes.append((size, (ebs.volume_type if ebs is not None else None) or "gp3"))
    if not volumes:
        family = (settings.ami_family if settings is not None else None) or DEFAULT_AMI_FAMILY
        volumes = list(AMI_FAMILY_VOLUMES.get(family, AMI_FAMILY_VOLUMES[DEFAULT_AMI_FAMILY]))
    return NodeCosts(volumes=sum(volume_per_hour(size, kind) for size, kind in volumes),
                     public_ipv4=PUBLIC_IPV4_PER_HOUR if public_ipv4 else 0.0, operator=operator)


def sustained_cpu(t: InstanceType) -> int:
    """The cpu (thousandths) `t` sustains: all of it, except a standard-mode burstable type's baseline."""
    cpu = t.capacity.get(CPU, 0)
    if t.burst is not None and not t.burst.unlimited:
        return int(cpu * t.burst.baseline)
    return cpu


def credits_per_hour(t: InstanceType, load: int) -> float:
    """Surplus credits an unlimited-mode burstable `t` is billed per hour under `load` cpu (thousandths)."""
    if t.burst is None or not t.burst.unlimited:
        return 0.0
    baseline = t.capacity.get(CPU, 0) * t.burst.baseline
    return max(0.0, load - baseline) / 1000 * t.burst.credit_price


def node_cost(t: InstanceType, price: float, load: int, per_node: NodeCosts) -> float:
    """What a node of type `t` at list `price` costs per hour with `load` cpu (thousandths: pods and DaemonSets)."""
    return price + credits_per_hour(t, load) + per_node.per_hour


class CostTable:
    """The cost model over a row of instance types, so a node's cost over all its options is one expression:
    cost[i] = list price[i] + fixed + rate[i] * max(0, load - baseline[i])."""

    def __init__(self, types: Sequence[InstanceType], per_node: NodeCosts, daemon_cpu: int) -> None:
        self.fixed = per_node.per_hour
        self.daemon_cpu = daemon_cpu
        unlimited = [t.burst is not None and t.burst.unlimited for t in types]
        self.rate = np.array([t.burst.credit_price / 1000 if u and t.burst else 0.0 for t, u in zip(types, unlimited)])
        self.baseline = np.array([t.capacity.get(CPU, 0) * t.burst.baseline if u and t.burst else np.inf
                                  for t, u in zip(types, unlimited)])
        self.bursts = bool(self.rate.any())

    def extra(self, pods_cpu: float, which: np.ndarray | None = None) -> np.ndarray | float:
        """What the types (`which` of them, else all) cost beyond their list price with `pods_cpu` requested by
        pods (the DaemonSets' requests are added here)."""
        if not self.bursts:
            return self.fixed
        rate, baseline = (self.rate, self.baseline) if which is None else (self.rate[which], self.baseline[which])
        surplus = np.maximum(0.0, pods_cpu + self.daemon_cpu - np.where(rate > 0, baseline, 0.0))
        return self.fixed + rate * surplus
