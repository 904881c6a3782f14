"""The AWS cloud provider: EC2 capacity straight from the catalog with CreateFleet, no node groups.

A launch resolves the provisioner's node template (inline `provider` or the
AWSNodeTemplate its `providerRef` names), discovers subnets and security
groups by their tags, resolves the AMI through the public SSM parameter EKS
publishes for the cluster's Kubernetes version, creates (or reuses, by a hash
of its content) a launch template whose user data joins the cluster, and
calls CreateFleet `instant` with the allowed instance type x subnet
overrides, cheapest first; identical launches at the same moment share one
call (fleet.py). Offerings EC2 reports as out of capacity are skipped for 3
minutes and the launch is retried at once with the rest. Each instance is
tagged with the NodeClaim it was launched for (at launch, by fleet.py, and
then with its own claim tag), so a retry, even by a restarted controller,
finds it instead of launching a second. The provider returns what it
launched and writes no Kubernetes object: the launch module creates the
Node, named after the instance's private DNS name.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

import boto3
import botocore.config
import botocore.exceptions

from karpy.apis import labels as wk
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1alpha1 import AWSNodeTemplateSpec, AWSSettings
from karpy.controller.cloudprovider.aws.amifamily import KUBE_ARCH, NEURON, NVIDIA_GPU
from karpy.controller.cloudprovider.aws.errors import explain, is_capacity_error, plainly
from karpy.controller.cloudprovider.aws.fleet import FleetLauncher, assigned, batch_tag
from karpy.controller.cloudprovider.aws.instancetypes import InstanceTypes, shipped_prices
from karpy.controller.cloudprovider.aws.launch import (
    MAX_OVERRIDES,
    ClusterFacts,
    LaunchSpec,
    al2_user_data,
    ami_parameter,
    bottlerocket_user_data,
    fleet_request,
    group_by_image,
    launch_template_data,
    launch_template_name,
    nodeclass_launch_templates,
)
from karpy.controller.cloudprovider.aws.nodeclass import NodeClassResolver
from karpy.controller.cloudprovider.aws.pricing import OnDemandPricing, pricing_region
from karpy.controller.cloudprovider.catalog import Catalog
from karpy.controller.cloudprovider.types import (
    Instance,
    InstanceNotFound,
    InstanceType,
    InsufficientCapacity,
    InterruptionQueue,
    NodeRequest,
    launched_as,
)

log = logging.getLogger("controller.cloudprovider.aws")
UNAVAILABLE_SECONDS = 180.0
DISCOVERY_TTL_SECONDS = 60.0     # subnets, security groups and AMIs found by selector or parameter
NODE_CLAIM_TAG = "karpy.dev/node-claim"          # the NodeClaim's name, chosen before launch: the idempotency key
LIVE_STATES = ["pending", "running"]
RETRIES = botocore.config.Config(retries={"mode": "adaptive", "max_attempts": 8})   # throttling: back off and retry


class AwsConfigError(ValueError):
    """Settings that cannot work (no region, no template, nothing discovered); the message says which."""


def resolve_region(flag: str | None) -> str:
    """--aws-region, else AWS_REGION (what EKS injects), else AWS_DEFAULT_REGION."""
    region = flag or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise AwsConfigError("no AWS region: pass --aws-region or set AWS_REGION")
    return region


@dataclasses.dataclass(frozen=True)
class AwsSettings:
    region: str
    cluster_name: str
    cluster_endpoint: str
    kubernetes_minor: str                      # "1.31", from the API server's /version
    default_instance_profile: str | None = None
    ca_bundle: str | None = None
    cluster_cidr: str | None = None            # the service CIDR: AL2023's NodeConfig needs it
    launch_batch_idle_seconds: float = 0.035   # Karpenter's CreateFleet batching window; 0 sends each launch alone
    launch_batch_max_seconds: float = 1.0
    fleet_timeout_seconds: float = 60.0        # CreateFleet's read timeout; a lost answer is recovered, not resent blindly


def parse_provider_id(provider_id: str) -> tuple[str, str]:
    """aws:///us-east-1a/i-0abc -> (zone, instance id)."""
    if not provider_id.startswith("aws:///") or provider_id.count("/") != 4:
        raise InstanceNotFound(f"{provider_id!r} is not an AWS provider ID")
    zone, instance_id = provider_id.removeprefix("aws:///").split("/")
    return zone, instance_id


class AwsCloudProvider:
    name = "aws"

    def __init__(self, session: Any | None, settings: AwsSettings,
                 templates: Callable[[str], AWSSettings], *, clock: Callable[[], float] = time.monotonic) -> None:
        """`session` None: boto3's own credential and endpoint chain (AWS_ENDPOINT_URL included)."""
        session = session or boto3.session.Session()
        self.ec2 = session.client("ec2", region_name=settings.region, config=RETRIES)
        self.ssm = session.client("ssm", region_name=settings.region, config=RETRIES)
        self.sqs = session.client("sqs", region_name=settings.region, config=RETRIES)   # the interruption queue
        self.iam = session.client("iam", region_name=settings.region, config=RETRIES)   # EC2NodeClass instance profiles
        # CreateFleet is retried by the fleet launcher, which looks for a lost launch before sending again
        fleet_client = session.client("ec2", region_name=settings.region, config=botocore.config.Config(
            retries={"total_max_attempts": 1}, read_timeout=settings.fleet_timeout_seconds))
        self.fleet = FleetLauncher(fleet_client, describe=self._describe, find=self._instances_matching,
                                   idle=settings.launch_batch_idle_seconds, max_wait=settings.launch_batch_max_seconds)
        self.settings, self.templates, self.clock = settings, templates, clock
        # one try, short timeouts: the shipped table stands in until the Pricing API answers
        pricing = session.client("pricing", region_name=pricing_region(settings.region), config=botocore.config.Config(
            retries={"total_max_attempts": 1}, connect_timeout=3, read_timeout=10))
        self.pricing = OnDemandPricing(pricing, settings.region, shipped_prices())
        self.types = InstanceTypes(self.ec2, settings.region, self.pricing.prices)
        self._unavailable: dict[tuple[str, str, str], float] = {}   # (type, zone, capacity type) -> until
        self._discovered: dict[str, tuple[float, Any]] = {}    # what a selector or parameter found, and when
        self._templates_made: set[str] = set()
        self._lock = threading.Lock()

    # --- catalog -------------------------------------------------------------------------------
    def catalog(self) -> Catalog:
        return self.types.catalog()

    def instance_types(self, kubelet: Any | None = None) -> Sequence[InstanceType]:
        return self.catalog().instance_types(kubelet)

    def interruption_queue(self, name: str) -> InterruptionQueue | None:
        from karpy.controller.cloudprovider.aws.interruption import SqsQueue  # it imports this module

        return SqsQueue(self.sqs, name)

    def node_class_resolver(self) -> NodeClassResolver:
        """What resolves EC2NodeClasses against this provider's account and region."""
        return NodeClassResolver(self.ec2, self.ssm, self.iam, cluster=self.settings.cluster_name,
                                 region=self.settings.region, kubernetes_minor=self.settings.kubernetes_minor)

    def node_class_launch_templates(self, node_class: EC2NodeClass, launch: LaunchSpec) -> dict[str, str]:
        """instance type -> the launch template (created if missing) to launch it with from a resolved EC2NodeClass."""
        cluster = ClusterFacts(name=self.settings.cluster_name, endpoint=self.settings.cluster_endpoint,
                               ca_bundle=self.settings.ca_bundle, cidr=self.settings.cluster_cidr)
        with plainly(f"creating launch templates for EC2NodeClass {node_class.name}"):
            made = {self.ensure_launch_template(name, data): members
                    for name, (data, members) in nodeclass_launch_templates(node_class, cluster, launch).items()}
        return {member: name for name, members in made.items() for member in members}

    # --- launch --------------------------------------------------------------------------------
    def create(self, request: NodeRequest) -> Instance:
        with plainly(f"launching node {request.node_name}"):
            return self._create(request)

    def _create(self, request: NodeRequest) -> Instance:
        found = self._claimed(request.node_name)
        if found is not None:                    # launched before a crash or a retry: adopt, never twice
            return dataclasses.replace(self._launched(request, found), adopted=True)
        template = self.templates(request.provisioner)
        subnets = self._subnets(template)
        groups = self._security_groups(template)
        warnings: list[str] = []
        for _ in range(3):
            overrides, capacity_type = self._overrides(request, subnets)
            if not overrides:
                raise InsufficientCapacity("; ".join([*warnings, f"no capacity left for any of {len(request.instance_type_options)} "
                                                      "instance type option(s) in the zones of the discovered subnets"]))
            # templates only for the types the fleet request will carry
            names = self._launch_templates(request, template, groups, [o[0] for o in overrides[:MAX_OVERRIDES]])
            overrides = [o for o in overrides if o[0] in names]
            tags = {"Name": f"karpy/{self.settings.cluster_name}/{request.provisioner}",
                    wk.owner_label(request.labels, request.provisioner): request.provisioner, f"kubernetes.io/cluster/{self.settings.cluster_name}": "owned",
                    **(template.tags or {})}
            launched = self.fleet.launch(fleet_request(templates=names, overrides=overrides, capacity_type=capacity_type,
                                                       tags=tags), request.node_name)
            warnings += self._note_errors(launched.errors, capacity_type)
            if launched.instance is not None:
                # the name planned for it: a retry of this launch finds the instance instead of making another
                self.ec2.create_tags(Resources=[launched.instance["InstanceId"]],
                                     Tags=[{"Key": NODE_CLAIM_TAG, "Value": request.node_name}])
                return dataclasses.replace(self._launched(request, launched.instance), warnings=tuple(warnings))
            log.info("CreateFleet launched nothing for %s; retrying with the remaining options", request.node_name)
        raise InsufficientCapacity("; ".join([*warnings, f"EC2 had no capacity for {request.node_name} after 3 attempts"]))

    def _overrides(self, request: NodeRequest, subnets: dict[str, str]) -> tuple[list[tuple[str, str, str, float]], str]:
        now = self.clock()
        allowed = request.requirements
        capacity_types = allowed.get(wk.CAPACITY_TYPE)
        spot_ok = capacity_types is None or capacity_types.has(wk.CAPACITY_TYPE_SPOT)
        by_type: dict[str, list[tuple[str, str, str, float]]] = {wk.CAPACITY_TYPE_SPOT: [], wk.CAPACITY_TYPE_ON_DEMAND: []}
        for it in request.instance_type_options:
            for o in it.offerings:
                if o.zone not in subnets or self._unavailable.get((it.name, o.zone, o.capacity_type), 0) > now:
                    continue
                if not o.allowed_by(allowed):
                    continue
                by_type[o.capacity_type].append((it.name, subnets[o.zone], o.zone, o.price_per_hour))
        # spot whenever the pods allow it and EC2 has it (Karpenter's rule), on-demand otherwise
        capacity_type = wk.CAPACITY_TYPE_SPOT if spot_ok and by_type[wk.CAPACITY_TYPE_SPOT] else wk.CAPACITY_TYPE_ON_DEMAND
        return sorted(by_type[capacity_type], key=lambda o: (o[3], o[0], o[2])), capacity_type

    def _note_errors(self, errors: list[dict[str, Any]], capacity_type: str) -> list[str]:
        """Log each error of a fleet in plain words, and mark out-of-capacity offerings unavailable for a while."""
        said = []
        for e in errors:
            override = (e.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            code, lifecycle = e.get("ErrorCode", ""), e.get("Lifecycle", capacity_type)
            text = explain(code, e.get("ErrorMessage", ""), instance_type=override.get("InstanceType"),
                           zone=override.get("AvailabilityZone"), capacity_type=lifecycle)
            log.error("Launching: %s", text)
            said.append(text)
            if is_capacity_error(code) and override.get("InstanceType"):
                with self._lock:
                    self._unavailable[(override["InstanceType"], override.get("AvailabilityZone", ""),
                                       lifecycle)] = self.clock() + UNAVAILABLE_SECONDS
        return list(dict.fromkeys(said))

    def _launch_templates(self, request: NodeRequest, template: AWSSettings, groups: list[str],
                          offered: Sequence[str]) -> dict[str, str]:
        """instance type -> the launch template to launch it with, for the types in `offered`.

        As Karpenter v0.16: each instance type's AMI is resolved (its architecture, GPU and Neuron variant,
        or the newest amiSelector image it is compatible with), the types are grouped by AMI, and each group
        gets a launch template of its own. A type whose AMI cannot be resolved is left out (said in the log);
        only when none resolves is the launch an error."""
        types = {it.name: it for it in request.instance_type_options if it.name in set(offered)}
        if template.launch_template_name:
            return dict.fromkeys(types, template.launch_template_name)
        images: dict[str, str] = {}
        problems: list[str] = []
        for name, it in types.items():
            try:
                images[name] = self._image(template, it)
            except AwsConfigError as e:
                problems.append(str(e))
        if not images:
            raise AwsConfigError("; ".join(dict.fromkeys(problems)))
        for problem in dict.fromkeys(problems):
            log.error("Resolving AMIs for %s: %s; launching with the instance types that have one", request.node_name, problem)
        names: dict[str, str] = {}
        for image, members in group_by_image(images).items():
            name = self._launch_template(request, template, groups, image=image, members=[types[m] for m in members])
            names.update(dict.fromkeys(members, name))
        return names

    def _launch_template(self, request: NodeRequest, template: AWSSettings, groups: list[str], *, image: str,
                         members: Sequence[InstanceType]) -> str:
        labels = {**request.labels, wk.owner_label(request.labels, request.provisioner): request.provisioner}
        custom = template.user_data if isinstance(template, AWSNodeTemplateSpec) else None
        max_pods = min((int(t.capacity.get("pods", 0) // 1000) for t in members), default=None)
        family = template.ami_family or "AL2"
        if family == "Custom":
            user_data = custom or ""                   # the image joins the node its own way
        else:
            join = bottlerocket_user_data if family == "Bottlerocket" else al2_user_data   # Ubuntu uses bootstrap.sh too
            user_data = join(cluster=self.settings.cluster_name, endpoint=self.settings.cluster_endpoint,
                             ca_bundle=self.settings.ca_bundle, max_pods=max_pods, labels=labels,
                             taints=request.taints, custom=custom)
        data = launch_template_data(
            image_id=image, user_data=user_data,
            instance_profile=template.instance_profile or self.settings.default_instance_profile, security_groups=groups,
            metadata=template.metadata_options.model_dump(by_alias=True, exclude_none=True) if template.metadata_options else None,
            block_devices=[b.model_dump(by_alias=True, exclude_none=True) for b in template.block_device_mappings or []],
            tags={f"kubernetes.io/cluster/{self.settings.cluster_name}": "owned", **(template.tags or {})})
        return self.ensure_launch_template(launch_template_name(self.settings.cluster_name, data), data)

    def ensure_launch_template(self, name: str, data: dict[str, Any]) -> str:
        """Create launch template `name` with `data` unless it exists (names are content hashes: same name, same data)."""
        with self._lock:
            if name in self._templates_made:
                return name
        try:
            self.ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data, TagSpecifications=[
                {"ResourceType": "launch-template",
                 "Tags": [{"Key": f"kubernetes.io/cluster/{self.settings.cluster_name}", "Value": "owned"}]}])
            log.info("Created launch template %s", name)
        except botocore.exceptions.ClientError as e:
            if "AlreadyExists" not in e.response["Error"]["Code"]:
                raise
        with self._lock:
            self._templates_made.add(name)
        return name

    def _image(self, template: AWSSettings, it: InstanceType) -> str:
        """The AMI for instance type `it`: its family's SSM parameter, or the newest amiSelector image it fits."""
        selector = template.ami_selector if isinstance(template, AWSNodeTemplateSpec) else None
        if selector:
            images = self._remembered(f"amis {sorted(selector.items())}", lambda: self._selected_images(selector))
            return self._newest_fitting(images, it, selector)
        arch = it.requirements.get(wk.ARCH)
        parameter = ami_parameter(
            template.ami_family or "AL2", self.settings.kubernetes_minor,
            wk.ARCH_ARM64 if arch is not None and arch.has(wk.ARCH_ARM64) else wk.ARCH_AMD64,
            nvidia_gpu=it.capacity.get(NVIDIA_GPU, 0) > 0, neuron=it.capacity.get(NEURON, 0) > 0)
        return self._remembered(parameter, lambda: self._image_parameter(parameter))

    def _image_parameter(self, parameter: str) -> str:
        try:
            return str(self.ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
        except botocore.exceptions.ClientError as e:
            raise AwsConfigError(f"AMI parameter {parameter}: {e.response['Error']['Code']}") from None

    def _selected_images(self, selector: dict[str, str]) -> list[dict[str, Any]]:
        """amiSelector: the images with its tags, or its `aws-ids`."""
        ids = [i.strip() for i in selector.get("aws-ids", "").split(",") if i.strip()]
        tags = {k: v for k, v in selector.items() if k != "aws-ids"}
        return list(self.ec2.describe_images(**({"ImageIds": ids} if ids else {}),
                                             Filters=_tag_filters(tags) if tags else [])["Images"])

    @staticmethod
    def _newest_fitting(images: list[dict[str, Any]], it: InstanceType, selector: dict[str, str]) -> str:
        """Of `images`, the newest `it` is compatible with: the image's architecture and its well-known-label
        tags (as v0.16 reads an image's requirements) must be ones the instance type can have."""
        fitting = [i for i in images if _image_fits(i, it)]
        if not fitting:
            arch = it.requirements.get(wk.ARCH)
            machine = "arm64" if arch is not None and arch.has(wk.ARCH_ARM64) else "x86_64"
            raise AwsConfigError(f"no {machine} image matches amiSelector {selector} for {it.name}")
        return str(max(fitting, key=lambda i: (i.get("CreationDate", ""), i["ImageId"]))["ImageId"])

    # --- discovery -----------------------------------------------------------------------------
    def _remembered(self, key: str, find: Callable[[], Any]) -> Any:
        """What `find` returns, asked again only after DISCOVERY_TTL_SECONDS: every launch needs it, and it rarely changes."""
        with self._lock:
            found = self._discovered.get(key)
        if found is not None and self.clock() - found[0] < DISCOVERY_TTL_SECONDS:
            return found[1]
        value = find()
        with self._lock:
            self._discovered[key] = (self.clock(), value)
        return value

    def _subnets(self, template: AWSSettings) -> dict[str, str]:
        """zone -> the subnet with the most free addresses there."""
        if not template.subnet_selector:
            raise AwsConfigError("the node template has no subnetSelector")
        selector = template.subnet_selector
        return self._remembered(f"subnets {sorted(selector.items())}", lambda: self._find_subnets(selector))

    def _find_subnets(self, selector: dict[str, str]) -> dict[str, str]:
        best: dict[str, dict[str, Any]] = {}
        for s in self.ec2.describe_subnets(Filters=_tag_filters(selector))["Subnets"]:
            zone = s["AvailabilityZone"]
            if zone not in best or s["AvailableIpAddressCount"] > best[zone]["AvailableIpAddressCount"]:
                best[zone] = s
        if not best:
            raise AwsConfigError(f"no subnet matches subnetSelector {selector}")
        return {zone: s["SubnetId"] for zone, s in best.items()}

    def _security_groups(self, template: AWSSettings) -> list[str]:
        if not template.security_group_selector:
            raise AwsConfigError("the node template has no securityGroupSelector")
        selector = template.security_group_selector
        return self._remembered(f"security groups {sorted(selector.items())}", lambda: self._find_security_groups(selector))

    def _find_security_groups(self, selector: dict[str, str]) -> list[str]:
        groups = self.ec2.describe_security_groups(Filters=_tag_filters(selector))["SecurityGroups"]
        if not groups:
            raise AwsConfigError(f"no security group matches securityGroupSelector {selector}")
        return sorted(g["GroupId"] for g in groups)

    # --- instances -----------------------------------------------------------------------------
    def _claimed(self, claim: str) -> dict[str, Any] | None:
        """The live instance launched for NodeClaim `claim`: tagged with it, or, when the controller stopped
        between CreateFleet and tagging, the one fleet.py's batch tags assign to it (which is then tagged)."""
        found = self._live_instances([{"Name": f"tag:{NODE_CLAIM_TAG}", "Values": [claim]}])
        if found:
            return found[0]
        batch = self._instances_matching([{"Name": "tag-key", "Values": [batch_tag(claim)]}])
        instance = assigned(claim, batch)
        if instance is None or instance["State"]["Name"] not in LIVE_STATES:
            return None
        log.info("Found instance %s launched for %s before a restart", instance["InstanceId"], claim)
        self.ec2.create_tags(Resources=[instance["InstanceId"]], Tags=[{"Key": NODE_CLAIM_TAG, "Value": claim}])
        return instance

    def _live_instances(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pending or running instances that match `filters`."""
        return self._instances_matching([*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}])

    def _instances_matching(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every instance that matches `filters`, in any state."""
        out = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                out.extend(reservation["Instances"])
        return out

    def _describe(self, ids: list[str]) -> list[dict[str, Any]]:
        try:
            return [i for r in self.ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]]
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] == "InvalidInstanceID.NotFound":
                raise InstanceNotFound(", ".join(ids)) from None
            raise

    def _instance(self, described: dict[str, Any]) -> Instance:
        zone = described["Placement"]["AvailabilityZone"]
        tags = {t["Key"]: t["Value"] for t in described.get("Tags") or []}
        labels = {wk.INSTANCE_TYPE: described["InstanceType"], wk.ZONE: zone, wk.REGION: self.settings.region,
                  wk.CAPACITY_TYPE: wk.CAPACITY_TYPE_SPOT if described.get("InstanceLifecycle") == "spot" else wk.CAPACITY_TYPE_ON_DEMAND}
        labels.update({key: tags[key] for key in wk.POOL_LABELS if key in tags})
        return Instance(provider_id=f"aws:///{zone}/{described['InstanceId']}", claim_name=tags.get(NODE_CLAIM_TAG, ""),
                        node_name=described.get("PrivateDnsName") or described["InstanceId"], labels=labels,
                        image_id=described.get("ImageId"))

    def _launched(self, request: NodeRequest, described: dict[str, Any]) -> Instance:
        """The instance as the launch module needs it: with the capacity and price of its type, when it was an option."""
        instance = self._instance(described)
        it = next((t for t in request.instance_type_options if t.name == instance.instance_type), None)
        return dataclasses.replace(instance, claim_name=request.node_name,
                                   **launched_as(it, instance.zone or "", instance.capacity_type or ""))

    def delete(self, provider_id: str) -> None:
        _, instance_id = parse_provider_id(provider_id)
        with plainly(f"terminating instance {provider_id}"):
            described = self._describe([instance_id])
            if not described or described[0]["State"]["Name"] in ("shutting-down", "terminated"):
                raise InstanceNotFound(provider_id)
            self.ec2.terminate_instances(InstanceIds=[instance_id])
        log.info("Terminated instance %s", provider_id)

    def get(self, provider_id: str) -> Instance:
        _, instance_id = parse_provider_id(provider_id)
        with plainly(f"reading instance {provider_id}"):
            described = self._describe([instance_id])
        if not described or described[0]["State"]["Name"] not in LIVE_STATES:
            raise InstanceNotFound(provider_id)
        return self._instance(described[0])

    def list(self) -> Sequence[Instance]:
        with plainly("listing the cluster's instances"):
            return [self._instance(i) for i in self._live_instances([
                {"Name": f"tag:kubernetes.io/cluster/{self.settings.cluster_name}", "Values": ["owned"]}])]



def _image_fits(image: dict[str, Any], it: InstanceType) -> bool:
    """Whether instance type `it` can run `image`: its architecture, and the well-known labels it is tagged with."""
    wanted = {tag["Key"]: tag["Value"] for tag in image.get("Tags") or [] if tag["Key"] in wk.well_known_labels(aws=True)}
    wanted[wk.ARCH] = KUBE_ARCH.get(image.get("Architecture", "x86_64"), image.get("Architecture", "x86_64"))
    return all((r := it.requirements.get(key)) is None or r.has(value) for key, value in wanted.items())


def _tag_filters(selector: dict[str, str]) -> list[dict[str, Any]]:
    """Karpenter's selector: `key: value` (comma-separated values), `key: "*"` for any value."""
    filters = []
    for key, value in sorted(selector.items()):
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [v.strip() for v in value.split(",")]})
    return filters
