"""Validation of the AWS settings: the inline `provider` and AWSNodeTemplate.

Karpenter v0.16.3's rules: a launch template excludes the settings it
carries itself, selectors need non-empty keys and values, metadata options
take EC2's values, block devices need a device name and a sane EBS volume.
Every error carries its field path. Pure.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import pydantic

from karpy.apis.errors import FieldError, from_validation_error, join
from karpy.apis.object_meta_validation import validate_object_metadata
from karpy.apis.quantity import Quantity
from karpy.apis.v1alpha1 import (
    AMI_FAMILIES,
    AMI_FAMILY_CUSTOM,
    VOLUME_TYPES,
    AWSNodeTemplate,
    AWSSettings,
    BlockDeviceMapping,
    MetadataOptions,
)

MIN_VOLUME_SIZE = Quantity.parse("1G")     # v0.16.3: NewScaledQuantity(1, Giga), decimal
MAX_VOLUME_SIZE = Quantity.parse("64T")    # v0.16.3: NewScaledQuantity(64, Tera), decimal
# v0.16.3 searches (does not anchor) these patterns in each comma-separated id of `aws-ids`.
ID_PATTERNS = {
    "subnetSelector": ("subnet-id", re.compile("subnet-[0-9a-z]+")),
    "securityGroupSelector": ("group-id", re.compile("sg-[0-9a-z]+")),
    "amiSelector": ("ami-id", re.compile("ami-[0-9a-z]+")),
}


def decode_awsnodetemplate(raw: Mapping[str, Any]) -> tuple[AWSNodeTemplate | None, list[FieldError]]:
    """The AWSNodeTemplate in `raw`, or None and one error per field that does not decode."""
    try:
        return AWSNodeTemplate.model_validate(raw), []
    except pydantic.ValidationError as e:
        return None, from_validation_error(e)


def read_awsnodetemplate(raw: Mapping[str, Any]) -> tuple[AWSNodeTemplate | None, list[FieldError]]:
    """Decoded, then validated: the AWSNodeTemplate when it breaks no rule, else None and every error."""
    template, errors = decode_awsnodetemplate(raw)
    if template is not None:
        errors = validate_awsnodetemplate(template)
    return (None if errors else template), errors


def validate_awsnodetemplate(t: AWSNodeTemplate) -> list[FieldError]:
    """Every rule `t` breaks."""
    spec, path = t.spec, "spec"
    errs = validate_object_metadata(t.metadata)
    errs += validate_aws(spec, path=path)
    if spec.launch_template_name is not None:
        if spec.user_data is not None:
            errs.append(_one_of(path, "userData", "launchTemplate"))
        if spec.ami_selector is not None:
            errs.append(_one_of(path, "amiSelector", "launchTemplate"))
    errs += _selector_errors(spec.ami_selector, join(path, "amiSelector"))
    if spec.ami_family == AMI_FAMILY_CUSTOM and not spec.ami_selector:
        errs.append(FieldError(join(path, "amiSelector"), "required when amiFamily is Custom"))
    return errs


def validate_aws(a: AWSSettings, *, path: str) -> list[FieldError]:
    """The rules shared by the inline provider and the AWSNodeTemplate spec."""
    errs: list[FieldError] = []
    if a.launch_template_name is not None:
        for field, value in (
            ("securityGroupSelector", a.security_group_selector),
            ("metadataOptions", a.metadata_options),
            ("amiFamily", a.ami_family),
            ("instanceProfile", a.instance_profile),
            ("blockDeviceMappings", a.block_device_mappings or None),
        ):
            if value is not None:
                errs.append(_one_of(path, field, "launchTemplate"))
    if a.subnet_selector is None:
        errs.append(FieldError(join(path, "subnetSelector"), "missing required field"))
    errs += _selector_errors(a.subnet_selector, join(path, "subnetSelector"))
    if a.launch_template_name is None and a.security_group_selector is None:
        errs.append(FieldError(join(path, "securityGroupSelector"), "missing required field"))
    errs += _selector_errors(a.security_group_selector, join(path, "securityGroupSelector"))
    for key, value in (a.tags or {}).items():
        if not key:
            errs.append(FieldError(join(path, "tags"), f"the tag with key : '' and value : {value!r} is invalid because empty tag keys aren't supported"))
    if a.ami_family is not None and a.ami_family not in AMI_FAMILIES:
        errs.append(FieldError(join(path, "amiFamily"), f"{a.ami_family!r} is not one of {', '.join(AMI_FAMILIES)}"))
    if a.metadata_options is not None:
        errs += _metadata_options_errors(a.metadata_options, join(path, "metadataOptions"))
    for i, mapping in enumerate(a.block_device_mappings or []):
        errs += _block_device_errors(mapping, join(join(path, "blockDeviceMappings"), i))
    return errs


def _one_of(path: str, a: str, b: str) -> FieldError:
    return FieldError(join(path, a), f"expected exactly one, got both: {join(path, a)}, {join(path, b)}")


def _selector_errors(selector: Mapping[str, str] | None, path: str) -> list[FieldError]:
    """Empty keys or values, and `aws-ids` entries that are not ids of the selector's kind."""
    errs = []
    field = path.rsplit(".", 1)[-1]
    for key, value in (selector or {}).items():
        if not key or not value:
            errs.append(FieldError(join(path, key), "keys and values must not be empty"))
        if key == "aws-ids" and field in ID_PATTERNS:
            kind, pattern = ID_PATTERNS[field]
            errs += [
                FieldError(join(path, key), f"invalid value {one!r}: must be a valid {kind} (regex: {pattern.pattern})")
                for one in (part.strip() for part in value.split(","))
                if not pattern.search(one)
            ]
    return errs


def _metadata_options_errors(m: MetadataOptions, path: str) -> list[FieldError]:
    errs = []
    for field, value, allowed in (
        ("httpEndpoint", m.http_endpoint, ("enabled", "disabled")),
        ("httpProtocolIPv6", m.http_protocol_ipv6, ("enabled", "disabled")),
        ("httpTokens", m.http_tokens, ("required", "optional")),
    ):
        if value is not None and value not in allowed:
            errs.append(FieldError(join(path, field), f"{value!r} is not one of {', '.join(allowed)}"))
    hops = m.http_put_response_hop_limit
    if hops is not None and not 1 <= hops <= 64:
        errs.append(FieldError(join(path, "httpPutResponseHopLimit"), f"must be between 1 and 64 (got {hops})"))
    return errs


def _block_device_errors(m: BlockDeviceMapping, path: str) -> list[FieldError]:
    errs = []
    if not m.device_name:
        errs.append(FieldError(join(path, "deviceName"), "missing required field"))
    if m.ebs is None:
        errs.append(FieldError(join(path, "ebs"), "missing required field"))
        return errs
    ebs = join(path, "ebs")
    if m.ebs.volume_type is not None and m.ebs.volume_type not in VOLUME_TYPES:
        errs.append(FieldError(join(ebs, "volumeType"), f"{m.ebs.volume_type!r} is not one of {', '.join(VOLUME_TYPES)}"))
    if m.ebs.volume_size is None and m.ebs.snapshot_id is None:
        errs.append(FieldError(join(ebs, "volumeSize"), "missing required field"))
    elif m.ebs.volume_size is not None:
        size = Quantity.parse(m.ebs.volume_size)
        if not MIN_VOLUME_SIZE <= size <= MAX_VOLUME_SIZE:
            errs.append(FieldError(join(ebs, "volumeSize"), f"expected 1G <= {m.ebs.volume_size} <= 64T"))
    return errs
