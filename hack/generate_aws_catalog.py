"""Generate controller/cloudprovider/aws/instance_types.json, the `aws` catalog's facts.

Sources: EC2's DescribeInstanceTypes and us-east-1 DescribeInstanceTypeOfferings
data as moto ships it (vCPUs, memory, architectures, accelerators, zones), and
hack/data/ for on-demand prices (us-east-1), ENI limits and the burstable types' cpu
economics (aws-burstable.json: baseline share per vCPU, credit mode, surplus credit
price, with the AWS pages they come from). Only types
that have a price, run Linux on x86_64 or arm64 and are offered in a zone are
kept. Derived numbers (max pods, overhead, spot prices) are computed when the
catalog is loaded (controller/cloudprovider/aws/catalog.py), not stored here.

    python3 hack/generate_aws_catalog.py [--data hack/data]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from karpy.controller.cloudprovider.aws.instancetypes import record

OUT = ROOT / "controller" / "cloudprovider" / "aws" / "instance_types.json"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(ROOT / "hack" / "data"), help="directory of the price and ENI tables")
    args = parser.parse_args()
    import moto

    resources = Path(os.path.dirname(moto.__file__)) / "ec2" / "resources"
    types = json.load(gzip.open(resources / "instance_types.json.gz"))
    offerings = json.load(gzip.open(resources / "instance_type_offerings" / "availability-zone" / "us-east-1.json.gz"))
    prices = json.load(open(Path(args.data) / "aws-on-demand-prices.json"))["prices"]["us-east-1"]
    enis = json.load(open(Path(args.data) / "aws-eni-limits.json"))["limits"]
    burstable = json.load(open(Path(args.data) / "aws-burstable.json"))["types"]
    zones: dict[str, list[str]] = {}
    for o in offerings:
        zones.setdefault(o["InstanceType"], []).append(o["Location"])
    catalog = []
    for name in sorted(types):
        info = types[name]
        if name not in prices or name not in enis:
            continue
        # the shipped table's ENI limits win: the catalog must not change with moto's copy of EC2's
        entry = record({**info, "NetworkInfo": {}}, zones=zones.get(name, []), price=prices[name], enis=enis[name],
                       burstable=burstable.get(name))
        if entry is None:
            continue
        catalog.append(entry)
    OUT.write_text(json.dumps({"source": "hack/generate_aws_catalog.py: moto's EC2 data (us-east-1), "
                                         "hack/data prices, ENI limits and burstable cpu economics", "instanceTypes": catalog},
                              separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(catalog)} instance types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
