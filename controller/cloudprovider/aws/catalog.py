"""The `aws` catalog: EC2 instance types as an EKS-optimized AMI's node would have them.

Built from records as instance_types.json holds them (the shipped us-east-1
table, or what aws/instancetypes.py read from EC2): max pods by the ENI
formula, overhead as the AMI's kubelet reserves it, spot prices by the
documented rule where EC2 reported none. Pure apart from reading the shipped
data file; imports nothing of boto3, so `karpy plan --catalog aws` runs
without the `aws` extra.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from karpy.apis import eks_node
from karpy.apis import labels as wk
from karpy.apis.errors import FieldError
from karpy.apis.resources import CPU, MEMORY, PODS, Resources
from karpy.apis.v1alpha5 import KubeletConfiguration
from karpy.controller.cloudprovider.catalog import (
    BaseType,
    Catalog,
    CatalogError,
    base_requirements,
    burst_from,
    eviction_memory,
    reserved,
)
from karpy.controller.cloudprovider.types import Offering

AWS_DATA = Path(__file__).parent / "instance_types.json"
AWS_REGION = "us-east-1"
SPOT_BASE_DISCOUNT = 0.30                 # spot = on-demand x (0.30 + 0.02 x ((zone index + len(family)) % 5))

_NAME = re.compile(r"^(?P<family>(?P<category>[a-z]+)(?P<generation>[0-9]+)[a-z0-9-]*)\.(?P<size>.+)$")


def _aws_overhead(kubelet: KubeletConfiguration | None, capacity: Resources) -> Resources:
    kube = eks_node.kube_reserved(vcpu=capacity.get(CPU, 0) // 1000, max_pods=capacity.get(PODS, 0) // 1000)
    kube.update(reserved(kubelet, "kube_reserved") or {})
    system = Resources(eks_node.SYSTEM_RESERVED)
    system.update(reserved(kubelet, "system_reserved") or {})
    total = kube + system
    total[MEMORY] = total.get(MEMORY, 0) + eviction_memory(kubelet, capacity, eks_node.EVICTION_MEMORY_MI)
    return total


def spot_price(on_demand: float, *, family: str, zone_index: int) -> float:
    """The documented spot rule: 30-38% of on-demand, varying by zone and family."""
    return round(on_demand * (SPOT_BASE_DISCOUNT + 0.02 * ((zone_index + len(family)) % 5)), 5)


def aws_catalog(data: Path = AWS_DATA) -> Catalog:
    return aws_catalog_from_records(json.loads(data.read_text())["instanceTypes"])


def aws_catalog_from_records(records: Sequence[Mapping[str, Any]], *, region: str = AWS_REGION,
                             spot_prices: Mapping[tuple[str, str], float] | None = None, name: str = "aws") -> Catalog:
    """Instance types from records as instance_types.json holds them (name, vcpu, memoryMiB, arch, hypervisor,
    spot, zones, price, enis, ipv4PerEni, accelerator, burstable). `spot_prices` by (type, zone) replace the
    documented spot rule where EC2 reported them."""
    zones = sorted({z for t in records for z in t["zones"]})
    types = []
    for t in records:
        match = _NAME.match(t["name"])
        family = match["family"] if match else t["name"]
        offerings = [Offering(z, wk.CAPACITY_TYPE_ON_DEMAND, t["price"]) for z in t["zones"]]
        if t["spot"]:
            offerings += [Offering(z, wk.CAPACITY_TYPE_SPOT, (spot_prices or {}).get((t["name"], z)) or
                                   spot_price(t["price"], family=family, zone_index=zones.index(z)))
                          for z in t["zones"]]
        capacity = eks_node.capacity(vcpu=t["vcpu"], memory_mib=t["memoryMiB"])
        max_pods = eks_node.eni_max_pods(t["enis"], t["ipv4PerEni"])
        labels = {
            wk.ARCH: t["arch"], wk.REGION: region,
            wk.AWS_INSTANCE_CPU: str(t["vcpu"]), wk.AWS_INSTANCE_MEMORY: str(t["memoryMiB"]),
            wk.AWS_INSTANCE_PODS: str(max_pods), wk.AWS_INSTANCE_HYPERVISOR: t["hypervisor"],
        }
        if match:
            labels.update({wk.AWS_INSTANCE_CATEGORY: match["category"], wk.AWS_INSTANCE_FAMILY: family,
                           wk.AWS_INSTANCE_GENERATION: match["generation"], wk.AWS_INSTANCE_SIZE: match["size"]})
        if "localNvmeGB" in t:
            labels[wk.AWS_INSTANCE_LOCAL_NVME] = str(t["localNvmeGB"])
        acc = t.get("accelerator")
        if acc:
            capacity[acc["resource"]] = acc["count"] * 1000
            labels.update({wk.AWS_INSTANCE_GPU_NAME: acc["name"], wk.AWS_INSTANCE_GPU_MANUFACTURER: acc["manufacturer"],
                           wk.AWS_INSTANCE_GPU_COUNT: str(acc["count"]), wk.AWS_INSTANCE_GPU_MEMORY: str(acc["memoryMiB"])})
        offers = tuple(offerings)
        errors: list[FieldError] = []
        burst = burst_from(t.get("burstable"), f"{t['name']}.burstable", errors)
        if errors:
            raise CatalogError(errors)
        types.append(BaseType(t["name"], base_requirements(t["name"], labels, offers), capacity, offers,
                              _aws_overhead, default_max_pods=max_pods, burst=burst))
    return Catalog(name, types)
