"""EC2 errors in words a person understands, for the log and for Events; `plainly` raises boto's as CloudError."""

from __future__ import annotations

import contextlib
from typing import Iterator

import botocore.exceptions

from karpy.controller.cloudprovider.types import CloudError

CAPACITY = {"InsufficientInstanceCapacity", "UnfulfillableCapacity", "MaxSpotInstanceCountExceeded", "Unsupported",
            "InsufficientFreeAddressesInSubnet", "SpotMaxPriceTooLow", "InsufficientCapacityOnHost"}
THROTTLING = {"RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException",
              "EC2ThrottledException", "PriorRequestNotComplete"}


def explain(code: str, message: str = "", *, instance_type: str | None = None, zone: str | None = None,
            capacity_type: str | None = None) -> str:
    """One sentence on what went wrong and what karpy does about it, ending with EC2's own code."""
    what = " ".join(p for p in (capacity_type, instance_type) if p) or "the instance type"
    where = f" in {zone}" if zone else ""
    if code == "InsufficientInstanceCapacity" or code == "InsufficientCapacityOnHost":
        text = f"EC2 has no {what} capacity{where} right now; karpy skips it for 3 minutes and tries the next cheapest option"
    elif code == "UnfulfillableCapacity":
        text = f"EC2 cannot fulfil {what}{where} now; karpy skips it for 3 minutes and tries the next cheapest option"
    elif code == "MaxSpotInstanceCountExceeded":
        text = ("the account has reached its limit of spot instances; karpy skips spot "
                f"{instance_type or 'capacity'}{where} for 3 minutes (ask AWS to raise the quota)")
    elif code == "SpotMaxPriceTooLow":
        text = f"the spot price of {what}{where} is above the maximum price; karpy skips it for 3 minutes"
    elif code == "Unsupported":
        text = f"{what} cannot be launched{where}; karpy skips it for 3 minutes"
    elif code == "InsufficientFreeAddressesInSubnet":
        text = f"the subnet{where} has no free IP addresses left; karpy skips that zone for {what} for 3 minutes"
    elif code == "VcpuLimitExceeded":
        text = "the account has reached its vCPU quota for this kind of instance; ask AWS to raise the quota"
    elif code in THROTTLING:
        text = "EC2 is throttling karpy's requests; karpy waits and retries"
    elif code in ("UnauthorizedOperation", "AuthFailure", "AccessDenied", "AccessDeniedException"):
        text = "karpy's AWS credentials are not allowed to do this; check the controller's IAM role and policy"
    elif code.startswith("InvalidLaunchTemplate"):
        text = "the launch template is missing or invalid; karpy makes a new one on the next launch"
    elif code.startswith("InvalidAMIID"):
        text = "the AMI does not exist or is not shared with this account; check amiFamily or amiSelector"
    elif code.startswith("InvalidSubnet") or code.startswith("InvalidGroup"):
        text = "a discovered subnet or security group no longer exists; karpy discovers them again on the next launch"
    elif code.startswith("InvalidParameter") or code == "InvalidFleetConfiguration":
        text = "EC2 refused the launch request as invalid"
    else:
        text = "EC2 refused the request"
    detail = f"{code}: {message}" if message else code
    return f"{text} ({detail})"


def is_capacity_error(code: str) -> bool:
    return code in CAPACITY


def is_throttling(code: str) -> bool:
    return code in THROTTLING


@contextlib.contextmanager
def plainly(doing: str) -> Iterator[None]:
    """AWS's errors as CloudError, saying what karpy was doing and what went wrong in words."""
    try:
        yield
    except botocore.exceptions.ClientError as e:
        error = e.response.get("Error") or {}
        raise CloudError(f"{doing}: {explain(error.get('Code', ''), error.get('Message', ''))}") from None
    except botocore.exceptions.BotoCoreError as e:
        raise CloudError(f"{doing}: AWS could not be reached ({e})") from None
