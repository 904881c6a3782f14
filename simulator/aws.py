"""The simulated cloud's EC2 side: instances running at an EC2 endpoint (a moto server) join as Nodes.

What a kubelet does when an EC2 instance boots: every running instance tagged
`kubernetes.io/cluster/<name>=owned` registers as a Node named after its
private DNS name, with providerID `aws:///<zone>/<instance-id>`, its instance
type's capacity, the allocatable its kubelet leaves after its reservations
(apis.eks_node, which karpy's AWS catalog plans with) and its addresses; a
Node the controller created first is adopted (its labels, taints and finalizer stay). When the instance ends, the
Node loses its backing (Ready=Unknown), as a node whose machine is gone does.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import boto3
from kubernetes.client.exceptions import ApiException

from karpy.apis import eks_node
from karpy.apis import labels as wk
from karpy.apis.resources import Resources
from karpy.kubeclient.informer import Informer
from karpy.kubeclient.raw import RawClient, now_rfc3339, path_of
from karpy.simulator.kubelet import node_info

log = logging.getLogger("simulator.aws")
Obj = dict[str, Any]


class Registrar:
    def __init__(self, client: RawClient, nodes: Informer, *, endpoint_url: str, cluster_name: str, region: str,
                 boot_delay: float = 2.0) -> None:
        self.client, self.nodes, self.cluster_name, self.boot_delay = client, nodes, cluster_name, boot_delay
        self.ec2 = boto3.session.Session().client("ec2", region_name=region, endpoint_url=endpoint_url)
        self._types: dict[str, Obj] = {}

    def reconcile(self) -> float | None:
        try:
            instances = [i for r in self.ec2.describe_instances(Filters=[
                {"Name": f"tag:kubernetes.io/cluster/{self.cluster_name}", "Values": ["owned"]}])["Reservations"]
                for i in r["Instances"]]
        except Exception as e:  # the cloud is away: try again shortly, as a kubelet would
            log.warning("listing EC2 instances: %s", e)
            return 2.0
        now = dt.datetime.now(dt.timezone.utc)
        for instance in instances:
            launched = instance.get("LaunchTime")
            if launched is not None and (now - launched).total_seconds() < self.boot_delay:
                continue                  # still booting: a kubelet joins after the instance is up, not at launch
            name = instance.get("PrivateDnsName") or instance["InstanceId"]
            node = self.nodes.get("", name)
            state = instance["State"]["Name"]
            try:
                if state == "running":
                    self._join(instance, name, node)
                elif state in ("shutting-down", "terminated") and node is not None:
                    self._gone(node)
            except ApiException as e:
                if e.status not in (404, 409):
                    log.warning("registering %s: %s", name, e.reason)
        return 1.0

    def _resources(self, instance_type: str) -> tuple[dict[str, str], dict[str, str], str]:
        """The node's capacity and allocatable (capacity less what the EKS AMI's kubelet reserves, as karpy's
        AWS catalog plans), and its architecture."""
        info = self._types.get(instance_type)
        if info is None:
            info = self._types[instance_type] = self.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
        network = info.get("NetworkInfo") or {}
        pods = eks_node.eni_max_pods(network.get("MaximumNetworkInterfaces", 1), network.get("Ipv4AddressesPerInterface", 2))
        arch = next((wk.EC2_ARCHITECTURES[a] for a in info["ProcessorInfo"]["SupportedArchitectures"] if a in wk.EC2_ARCHITECTURES), "amd64")
        capacity = eks_node.capacity(vcpu=info["VCpuInfo"]["DefaultVCpus"], memory_mib=info["MemoryInfo"]["SizeInMiB"],
                                     max_pods=pods)
        allocatable = eks_node.allocatable(capacity)
        gpus = sum(g["Count"] for g in (info.get("GpuInfo") or {}).get("Gpus", []) if g.get("Manufacturer") == "NVIDIA")
        devices = Resources({"nvidia.com/gpu": gpus * 1000} if gpus else {})   # the device plugin's
        return ({**capacity.to_manifest(), **devices.to_manifest()}, {**allocatable.to_manifest(), **devices.to_manifest()}, arch)

    def _join(self, instance: Obj, name: str, node: Obj | None) -> None:
        zone = instance["Placement"]["AvailabilityZone"]
        provider_id = f"aws:///{zone}/{instance['InstanceId']}"
        if node is not None and (node.get("spec") or {}).get("providerID") == provider_id and \
                (node.get("status") or {}).get("addresses"):
            return                                            # joined already
        capacity, allocatable, arch = self._resources(instance["InstanceType"])
        status = {"capacity": capacity, "allocatable": allocatable,
                  "addresses": [{"type": "InternalIP", "address": instance.get("PrivateIpAddress", "")},
                                {"type": "Hostname", "address": name}, {"type": "InternalDNS", "address": name}],
                  "nodeInfo": {**node_info(name), "architecture": arch, "systemUUID": instance["InstanceId"]}}
        if node is None:
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch,
                      "node.kubernetes.io/instance-type": instance["InstanceType"], "topology.kubernetes.io/zone": zone}
            self.client.create(path_of("v1", "nodes"), {"apiVersion": "v1", "kind": "Node",
                                                        "metadata": {"name": name, "labels": labels},
                                                        "spec": {"providerID": provider_id}, "status": status})
            log.info("Instance %s joined as node %s", instance["InstanceId"], name)
            return
        self.client.patch(path_of("v1", "nodes", name=name), {"spec": {"providerID": provider_id}})
        self.client.patch(path_of("v1", "nodes", name=name, subresource="status"), {"status": status})
        log.info("Instance %s adopted node %s", instance["InstanceId"], name)

    def _gone(self, node: Obj) -> None:
        conditions = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
        if any(c.get("type") == "Ready" and c.get("reason") == "InstanceTerminated"
               for c in (node.get("status") or {}).get("conditions") or []):
            return
        conditions.append({"type": "Ready", "status": "Unknown", "reason": "InstanceTerminated",
                           "message": "the EC2 instance is gone", "lastTransitionTime": now_rfc3339()})
        self.client.patch(path_of("v1", "nodes", name=node["metadata"]["name"], subresource="status"),
                          {"status": {"conditions": conditions}})
