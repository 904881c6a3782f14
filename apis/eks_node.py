"""What a node of the EKS-optimized AMIs reports: its capacity and what its kubelet reserves by default.

One source for the two sides that must agree: karpy's AWS catalog plans pods
onto `capacity - reserved`, and the local cluster's EC2 registrar makes the
joining Node report exactly that as allocatable, as the real kubelet would.
Resources are in thousandths (apis.resources). Pure.
"""

from __future__ import annotations

import math
from fractions import Fraction

from karpy.apis.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources

MI = 1024 * 1024
VM_MEMORY_OVERHEAD = Fraction(75, 1000)   # Karpenter v0.16's --vm-memory-overhead: memory the hypervisor keeps
EVICTION_MEMORY_MI = 100                  # the kubelet's default evictionHard memory.available
SYSTEM_RESERVED = Resources({CPU: 100, MEMORY: 100 * MI * 1000})


def eni_max_pods(enis: int, ipv4_per_eni: int) -> int:
    """How many pods the VPC CNI fits on an EC2 instance (the AMI's eni-max-pods): one address per ENI
    is the ENI's own, plus 2 host-network pods."""
    return enis * (ipv4_per_eni - 1) + 2


def capacity(*, vcpu: int, memory_mib: int, max_pods: int | None = None) -> Resources:
    """The node's capacity: its vCPUs, its memory less what the hypervisor keeps, a 20Gi root volume."""
    memory = Fraction(memory_mib * MI) * (1 - VM_MEMORY_OVERHEAD)
    out = Resources({CPU: vcpu * 1000, MEMORY: math.floor(memory) * 1000, EPHEMERAL_STORAGE: 20 * 1024 * MI * 1000})
    if max_pods is not None:
        out[PODS] = max_pods * 1000
    return out


def kube_reserved_cpu_milli(vcpu: int) -> int:
    """The EKS AMI's kube-reserved CPU: 6% of the first core, 1% of the second,
    0.5% of the third and fourth, 0.25% of every other."""
    milli = 0.0
    for core in range(vcpu):
        milli += 1000 * (0.06 if core == 0 else 0.01 if core == 1 else 0.005 if core < 4 else 0.0025)
    return int(math.ceil(milli))


def kube_reserved(*, vcpu: int, max_pods: int) -> Resources:
    """The EKS AMI's kube-reserved: CPU by cores, 11Mi per pod + 255Mi of memory, 1Gi of disk."""
    return Resources({CPU: kube_reserved_cpu_milli(vcpu), MEMORY: (11 * max_pods + 255) * MI * 1000,
                      EPHEMERAL_STORAGE: 1024 * MI * 1000})


def allocatable(node_capacity: Resources) -> Resources:
    """capacity - kube-reserved - system-reserved - the eviction threshold, with the kubelet's defaults."""
    vcpu, pods = node_capacity.get(CPU, 0) // 1000, node_capacity.get(PODS, 0) // 1000
    reserved = kube_reserved(vcpu=vcpu, max_pods=pods) + SYSTEM_RESERVED
    reserved[MEMORY] = reserved.get(MEMORY, 0) + EVICTION_MEMORY_MI * MI * 1000
    return (node_capacity - reserved).clamp_zero()
