"""The cluster's CA bundle, which nodes need to join: bootstrap.sh's `--b64-cluster-ca` (AL2, Ubuntu) and
Bottlerocket's `settings.kubernetes.cluster-certificate`, both the base64 of the PEM certificate(s).

Found once, at start, from the first source that has it: the `--cluster-ca-bundle` flag; the CA the
controller's own connection to the API server trusts (the kubeconfig's certificate-authority, or the in-cluster
service account's ca.crt: on EKS both are the cluster CA); EKS DescribeCluster. Without any, nodes join
without it: AL2 and Ubuntu nodes then ask DescribeCluster themselves; Bottlerocket nodes cannot join. The
provider only carries the result (AwsSettings.ca_bundle); launch.py writes it into user data.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions

from karpy.controller.cloudprovider.aws.provider import RETRIES, AwsConfigError

log = logging.getLogger("controller.cloudprovider.aws")
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


@dataclasses.dataclass(frozen=True)
class CaBundle:
    data: str | None           # base64 PEM; None: no source had it
    source: str                # where it came from, for the log line


def checked_bundle(value: str, *, where: str) -> str:
    """`value` if it is the base64 of PEM certificate(s); AwsConfigError naming `where` otherwise."""
    try:
        pem = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise AwsConfigError(f"{where}: not base64 (expected the base64 of the cluster's PEM CA certificate, "
                             "as `aws eks describe-cluster` prints certificateAuthority.data)") from None
    if PEM_CERTIFICATE not in pem:
        raise AwsConfigError(f"{where}: decodes to no PEM certificate (expected {PEM_CERTIFICATE.decode()})")
    return value.strip()


def bundle_of_file(path: str | Path) -> str | None:
    """The base64 of the PEM CA file `path` (what the API client trusts), or None when it holds no certificate."""
    try:
        pem = Path(path).read_bytes()
    except OSError as e:
        log.warning("Could not read the API server's CA file %s: %s", path, e.strerror)
        return None
    return base64.b64encode(pem).decode() if PEM_CERTIFICATE in pem else None


def described_bundle(eks: Any, cluster_name: str) -> str | None:
    """The CA EKS DescribeCluster reports for `cluster_name`; None (logged) when the call fails, as it does for
    a cluster EKS does not run or without eks:DescribeCluster."""
    try:
        cluster = eks.describe_cluster(name=cluster_name)["cluster"]
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
        log.warning("Could not describe EKS cluster %s for its CA: %s", cluster_name, e)
        return None
    data = cluster.get("certificateAuthority", {}).get("data")
    return str(data) if data else None


def eks_client(region: str) -> Any:
    """The EKS client DescribeCluster goes through (boto3's own credential and endpoint chain)."""
    return boto3.session.Session().client("eks", region_name=region, config=RETRIES)


def resolve_ca_bundle(*, flag: str | None, ca_file: str | None, eks: Any, cluster_name: str) -> CaBundle:
    """The CA bundle from the first source that has it (the module docstring says the order).
    Raises AwsConfigError when the flag is given but malformed: a bad flag is never passed over."""
    if flag:
        return CaBundle(checked_bundle(flag, where="--cluster-ca-bundle"), "--cluster-ca-bundle")
    if ca_file and (data := bundle_of_file(ca_file)):
        return CaBundle(data, f"the API client's CA file {ca_file}")
    if data := described_bundle(eks, cluster_name):
        return CaBundle(data, f"EKS DescribeCluster {cluster_name}")
    return CaBundle(None, "none")
