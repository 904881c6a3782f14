"""Generate controller/cloudprovider/aws/instance_types.json, the `aws` catalog's facts.

Sources: EC2's DescribeInstanceTypes and us-east-1 DescribeInstanceTypeOfferings
data as moto ships it (vCPUs, memory, architectures, accelerators, zones), and
../shared/data/ for on-demand prices (us-east-1) and ENI limits. Only types
that have a price, run Linux on x86_64 or arm64 and are offered in a zone are
kept. Derived numbers (max pods, overhead, spot prices) are computed when the
catalog is loaded (controller/cloudprovider/aws/catalog.py), not stored here.

    python3 hack/generate_aws_catalog.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "controller" / "cloudprovider" / "aws" / "instance_types.json"
ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
GPU_RESOURCES = {"NVIDIA": "nvidia.com/gpu", "AMD": "amd.com/gpu", "Habana": "habana.ai/gaudi"}


def accelerators(info: dict) -> dict:
    out = {}
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", default=str(ROOT.parent / "shared"))
    args = parser.parse_args()
    import moto

    resources = Path(os.path.dirname(moto.__file__)) / "ec2" / "resources"
    types = json.load(gzip.open(resources / "instance_types.json.gz"))
    offerings = json.load(gzip.open(resources / "instance_type_offerings" / "availability-zone" / "us-east-1.json.gz"))
    prices = json.load(open(Path(args.shared) / "data" / "aws-on-demand-prices.json"))["prices"]["us-east-1"]
    enis = json.load(open(Path(args.shared) / "data" / "aws-eni-limits.json"))["limits"]
    zones: dict[str, list[str]] = {}
    for o in offerings:
        zones.setdefault(o["InstanceType"], []).append(o["Location"])
    catalog = []
    for name in sorted(types):
        info = types[name]
        arch = next((ARCHITECTURES[a] for a in info["ProcessorInfo"]["SupportedArchitectures"] if a in ARCHITECTURES), None)
        if name not in prices or name not in enis or name not in zones or arch is None:
            continue
        entry = {
            "name": name,
            "vcpu": info["VCpuInfo"]["DefaultVCpus"],
            "memoryMiB": info["MemoryInfo"]["SizeInMiB"],
            "arch": arch,
            "hypervisor": info.get("Hypervisor", ""),
            "bareMetal": info.get("BareMetal", False),
            "spot": "spot" in info.get("SupportedUsageClasses", []),
            "zones": sorted(zones[name]),
            "price": prices[name],
            "enis": enis[name]["enis"],
            "ipv4PerEni": enis[name]["ipv4PerEni"],
        }
        if info.get("InstanceStorageSupported"):
            entry["localNvmeGB"] = info.get("InstanceStorageInfo", {}).get("TotalSizeInGB", 0)
        acc = accelerators(info)
        if acc:
            entry["accelerator"] = acc
        catalog.append(entry)
    OUT.write_text(json.dumps({"source": "hack/generate_aws_catalog.py: moto's EC2 data (us-east-1), "
                                         "shared/data prices and ENI limits", "instanceTypes": catalog},
                              separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(catalog)} instance types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
