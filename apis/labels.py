"""Well-known labels, annotations, finalizers and label-domain rules of Karpenter v0.16.

Each name is spelled here once; every other module imports it. Also the
syntax checks of Kubernetes label keys and values (IsQualifiedName,
IsValidLabelValue), which validation and scheduling both need. Pure.
"""

from __future__ import annotations

import re
from typing import Mapping

GROUP = "karpenter.sh"
AWS_GROUP = "karpenter.k8s.aws"

# Labels
PROVISIONER_NAME = "karpenter.sh/provisioner-name"
NODEPOOL = "karpenter.sh/nodepool"                # a v1 NodePool's nodes carry this instead of provisioner-name
REGISTERED = "karpenter.sh/registered"            # v1: the node joined and its unregistered taint is gone
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INITIALIZED = "karpenter.sh/initialized"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
HOSTNAME = "kubernetes.io/hostname"

# AWS labels (well known when the AWS cloud provider is in use)
AWS_INSTANCE_HYPERVISOR = "karpenter.k8s.aws/instance-hypervisor"
AWS_INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
AWS_INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
AWS_INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
AWS_INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
AWS_INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
AWS_INSTANCE_MEMORY = "karpenter.k8s.aws/instance-memory"
AWS_INSTANCE_PODS = "karpenter.k8s.aws/instance-pods"
AWS_INSTANCE_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
AWS_INSTANCE_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
AWS_INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
AWS_INSTANCE_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
AWS_INSTANCE_LOCAL_NVME = "karpenter.k8s.aws/instance-local-nvme"

# Annotations and finalizer
EMPTINESS_TIMESTAMP = "karpenter.sh/emptiness-timestamp"
DO_NOT_EVICT = "karpenter.sh/do-not-evict"
DO_NOT_CONSOLIDATE = "karpenter.sh/do-not-consolidate"
TERMINATION_FINALIZER = "karpenter.sh/termination"
MIRROR_POD = "kubernetes.io/config.mirror"       # a static pod's API mirror: it goes with its node
# a cordoned karpy node is taken out of external load balancers before its pods go (value "karpenter")
EXCLUDE_FROM_LOAD_BALANCERS = "node.kubernetes.io/exclude-from-external-load-balancers"
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

# karpy's own node annotations
PRICE_PER_HOUR = "karpy.dev/price-per-hour"      # what the launched offering costs
# the pods ("ns/name,...") an older karpy launched the node for: read from such nodes, no longer written (a
# NodeClaim's karpy.dev/pods annotation says it now: apis/launch_record.py)
LAUNCHED_FOR = "karpy.dev/launched-for"
MOVING_IN = "karpy.dev/moving-in"                # pods consolidation moves here, by owner (apis/moving_in.py)

# the Event reason the scheduler extender reports a pod it left without a node with
CAPACITY_GAP_REASON = "CapacityGap"

# Taints Kubernetes puts on nodes that are not ready yet
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"   # what a cordon means to a pod's tolerations
# v1: a NodePool's node starts with this NoExecute taint, removed when it registers
TAINT_UNREGISTERED = "karpenter.sh/unregistered"
# the label that names a node's owner: a Provisioner's, else a NodePool's
POOL_LABELS = (PROVISIONER_NAME, NODEPOOL)

# priority classes whose pods a drain evicts last (Kubernetes' graceful node shutdown order)
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
ARCH_AMD64 = "amd64"
ARCH_ARM64 = "arm64"
EC2_ARCHITECTURES = {"x86_64": ARCH_AMD64, "arm64": ARCH_ARM64}   # EC2's names -> kubernetes.io/arch
OS_LINUX = "linux"

WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {PROVISIONER_NAME, ZONE, REGION, INSTANCE_TYPE, ARCH, OS, CAPACITY_TYPE}
)
AWS_WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        AWS_INSTANCE_HYPERVISOR, AWS_INSTANCE_CATEGORY, AWS_INSTANCE_FAMILY,
        AWS_INSTANCE_GENERATION, AWS_INSTANCE_SIZE, AWS_INSTANCE_CPU, AWS_INSTANCE_MEMORY,
        AWS_INSTANCE_PODS, AWS_INSTANCE_GPU_NAME, AWS_INSTANCE_GPU_MANUFACTURER,
        AWS_INSTANCE_GPU_COUNT, AWS_INSTANCE_GPU_MEMORY, AWS_INSTANCE_LOCAL_NVME,
    }
)
RESTRICTED_LABEL_DOMAINS: frozenset[str] = frozenset({"kubernetes.io", "k8s.io", GROUP})
AWS_RESTRICTED_LABEL_DOMAINS: frozenset[str] = frozenset({AWS_GROUP})
LABEL_DOMAIN_EXCEPTIONS: frozenset[str] = frozenset({"kops.k8s.io", "node.kubernetes.io"})
RESTRICTED_LABELS: frozenset[str] = frozenset({EMPTINESS_TIMESTAMP, HOSTNAME})

# Deprecated aliases, rewritten to their stable names wherever a key is read.
NORMALIZED_LABELS: dict[str, str] = {
    "failure-domain.beta.kubernetes.io/zone": ZONE,
    "failure-domain.beta.kubernetes.io/region": REGION,
    "beta.kubernetes.io/arch": ARCH,
    "beta.kubernetes.io/os": OS,
    "beta.kubernetes.io/instance-type": INSTANCE_TYPE,
}


def normalize(key: str) -> str:
    """The stable name of a label key (deprecated aliases rewritten)."""
    return NORMALIZED_LABELS.get(key, key)


def well_known_labels(*, aws: bool) -> frozenset[str]:
    return WELL_KNOWN_LABELS | AWS_WELL_KNOWN_LABELS if aws else WELL_KNOWN_LABELS


def _domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def restricted_label_error(key: str, *, aws: bool = True) -> str | None:
    """Why `key` may not be set by a Provisioner, or None when it may (IsRestrictedLabel)."""
    known = well_known_labels(aws=aws)
    if key in known:
        return None
    domain = _domain(key)
    domains = RESTRICTED_LABEL_DOMAINS | (AWS_RESTRICTED_LABEL_DOMAINS if aws else frozenset())
    restricted = key in RESTRICTED_LABELS
    if not any(_in_domain(domain, d) for d in LABEL_DOMAIN_EXCEPTIONS):
        restricted = restricted or any(_in_domain(domain, d) for d in domains)
    if not restricted:
        return None
    return (
        f"label {key} is restricted; specify a well known label: {sorted(known)}, "
        f"or a custom label that does not use a restricted domain: {sorted(domains)}"
    )


def _in_domain(domain: str, parent: str) -> bool:
    return domain == parent or domain.endswith("." + parent)


# --- syntax of label keys and values (k8s.io/apimachinery validation) ----------
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)


def qualified_name_errors(value: str) -> list[str]:
    """Problems with `value` as a qualified name (`prefix/name`), empty when valid."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errs = dns1123_subdomain_errors(prefix)
        if errs:
            return [f"prefix part {e}" for e in errs]
    else:
        return [
            "a qualified name " + _NAME_MESSAGE + " with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    if len(name) > 63:
        return ["name part must be no more than 63 characters"]
    if not _NAME.match(name):
        return ["name part " + _NAME_MESSAGE + " (e.g. 'MyName', 'my.name', or '123-abc')"]
    return []


def dns1123_subdomain_errors(value: str) -> list[str]:
    if len(value) > 253:
        return ["must be no more than 253 characters"]
    if not _DNS1123_SUBDOMAIN.match(value):
        return [
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        ]
    return []


_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns1035_label_errors(value: str, *, prefix: bool = False) -> list[str]:
    """Problems with `value` as a DNS-1035 label (apimachinery's NameIsDNS1035Label).

    With `prefix` (a generateName), a trailing '-' is allowed: the server appends
    the random suffix after it."""
    if prefix and len(value) > 1 and value.endswith("-"):
        value = value[:-1] + "a"
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1035_LABEL.match(value):
        errs.append(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
            "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
            "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """Problems with `value` as a label value, empty when valid (empty values are valid)."""
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if value and not _NAME.match(value):
        return ["a valid label value must be an empty string or " + _NAME_MESSAGE]
    return []


def owner_label(labels: Mapping[str, str], owner: str) -> str:
    """The label that names `owner` on a node whose planned `labels` these are: `karpenter.sh/nodepool` when they
    say a NodePool owns it, else `karpenter.sh/provisioner-name`."""
    return NODEPOOL if labels.get(NODEPOOL) == owner else PROVISIONER_NAME


def pool_of(labels: Mapping[str, str] | None) -> str | None:
    """The Provisioner or NodePool a node's labels name as its owner, or None."""
    labels = labels or {}
    return next((labels[key] for key in POOL_LABELS if labels.get(key)), None)
