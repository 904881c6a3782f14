"""EC2 instance types as karpy's catalog sees them: DescribeInstanceTypes, DescribeInstanceTypeOfferings and
DescribeSpotPriceHistory, turned into the same records the shipped `aws` catalog is built from.

On-demand prices come from the Pricing API (pricing.py), the shipped table
(us-east-1 list prices) where it does not answer; max pods from the ENI
limits EC2 reports (the shipped table where it does not). The
result is cached for `ttl` seconds: the catalog changes rarely and every
launch reads it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Mapping

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.aws.catalog import AWS_DATA, aws_catalog_from_records
from karpy.controller.cloudprovider.catalog import Catalog

log = logging.getLogger("controller.cloudprovider.aws")
GPU_RESOURCES = {"NVIDIA": "nvidia.com/gpu", "AMD": "amd.com/gpu", "Habana": "habana.ai/gaudi"}
Obj = dict[str, Any]


def accelerators(info: Mapping[str, Any]) -> Obj:
    """The GPU or accelerator of a DescribeInstanceTypes entry, with the resource name its device plugin uses."""
    out: Obj = {}
    for gpu in (info.get("GpuInfo") or {}).get("Gpus", []):
        resource = GPU_RESOURCES.get(gpu["Manufacturer"])
        if resource:
            out = {"resource": resource, "count": gpu["Count"], "name": gpu["Name"].lower().replace(" ", "-"),
                   "manufacturer": gpu["Manufacturer"].lower(), "memoryMiB": gpu["MemoryInfo"]["SizeInMiB"]}
    for acc in (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators", []):
        if acc["Manufacturer"] == "AWS":
            out = {"resource": "aws.amazon.com/neuron", "count": acc["Count"], "name": acc["Name"].lower(),
                   "manufacturer": "aws", "memoryMiB": (acc.get("MemoryInfo") or {}).get("SizeInMiB", 0)}
    for dev in (info.get("NeuronInfo") or {}).get("NeuronDevices", []):
        out = {"resource": "aws.amazon.com/neuron", "count": dev["Count"], "name": dev["Name"].lower(),
               "manufacturer": "aws", "memoryMiB": (dev.get("MemoryInfo") or {}).get("SizeInMiB", 0)}
    return out


def record(info: Mapping[str, Any], *, zones: list[str], price: float, enis: Mapping[str, int] | None,
           burstable: Mapping[str, Any] | None = None) -> Obj | None:
    """A catalog record from a DescribeInstanceTypes entry, or None when karpy cannot run Linux pods on it.
    `burstable`: the type's cpu economics (baseline, mode, credit price) when it is a burstable type."""
    arch = next((wk.EC2_ARCHITECTURES[a] for a in info["ProcessorInfo"]["SupportedArchitectures"] if a in wk.EC2_ARCHITECTURES), None)
    network = info.get("NetworkInfo") or {}
    eni_count = network.get("MaximumNetworkInterfaces") or (enis or {}).get("enis")
    per_eni = network.get("Ipv4AddressesPerInterface") or (enis or {}).get("ipv4PerEni")
    if arch is None or not zones or not eni_count or not per_eni:
        return None
    entry: Obj = {
        "name": info["InstanceType"], "vcpu": info["VCpuInfo"]["DefaultVCpus"], "memoryMiB": info["MemoryInfo"]["SizeInMiB"],
        "arch": arch, "hypervisor": info.get("Hypervisor", ""), "bareMetal": info.get("BareMetal", False),
        "spot": "spot" in info.get("SupportedUsageClasses", []), "zones": sorted(zones), "price": price,
        "enis": eni_count, "ipv4PerEni": per_eni,
    }
    if info.get("InstanceStorageSupported"):
        entry["localNvmeGB"] = (info.get("InstanceStorageInfo") or {}).get("TotalSizeInGB", 0)
    acc = accelerators(info)
    if acc:
        entry["accelerator"] = acc
    if burstable:
        entry["burstable"] = dict(burstable)
    return entry


def shipped_prices() -> dict[str, float]:
    return {t["name"]: t["price"] for t in json.loads(AWS_DATA.read_text())["instanceTypes"]}


def shipped_burstable() -> dict[str, Obj]:
    """The burstable types' cpu economics as the shipped catalog has them (EC2 does not report baselines)."""
    return {t["name"]: t["burstable"] for t in json.loads(AWS_DATA.read_text())["instanceTypes"] if "burstable" in t}


class InstanceTypes:
    """The region's instance types, read from EC2 and cached."""

    def __init__(self, ec2: Any, region: str, prices: Callable[[], dict[str, float]], *, ttl: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ec2, self.region, self.prices, self.ttl, self.clock = ec2, region, prices, ttl, clock
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None
        self._read_at = 0.0

    def catalog(self) -> Catalog:
        with self._lock:
            if self._catalog is None or self.clock() - self._read_at > self.ttl:
                self._catalog = self._read()
                self._read_at = self.clock()
            return self._catalog

    def _read(self) -> Catalog:
        zones: dict[str, list[str]] = {}
        for page in self.ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"):
            for o in page["InstanceTypeOfferings"]:
                zones.setdefault(o["InstanceType"], []).append(o["Location"])
        records = []
        prices, burstable = self.prices(), shipped_burstable()
        for page in self.ec2.get_paginator("describe_instance_types").paginate():
            for info in page["InstanceTypes"]:
                name = info["InstanceType"]
                if name in prices:                # a type without a known price cannot be compared; skip it
                    entry = record(info, zones=zones.get(name, []), price=prices[name], enis=None,
                                   burstable=burstable.get(name))
                    if entry is not None:
                        records.append(entry)
        spot = self._spot_prices({r["name"] for r in records if r["spot"]})
        log.info("Discovered %d instance types in %s (%d spot prices)", len(records), self.region, len(spot))
        return aws_catalog_from_records(records, region=self.region, spot_prices=spot, name=f"aws-{self.region}")

    def _spot_prices(self, names: set[str]) -> dict[tuple[str, str], float]:
        prices: dict[tuple[str, str], float] = {}
        for page in self.ec2.get_paginator("describe_spot_price_history").paginate(ProductDescriptions=["Linux/UNIX"]):
            for p in page["SpotPriceHistory"]:
                key = (p["InstanceType"], p["AvailabilityZone"])
                if p["InstanceType"] in names and key not in prices:      # newest first
                    prices[key] = float(p["SpotPrice"])
        return prices
