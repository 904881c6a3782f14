"""An EC2NodeClass resolved against AWS, as Karpenter v1 resolves it: the subnets, security groups and AMIs its
selector terms find, and the instance profile it launches with (made for its `role`, or its `instanceProfile`
as is). Each part raises NodeClassNotReady naming what found nothing; the node class controller turns that
into the status's conditions."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
from typing import Any, Callable, Iterator

import botocore.exceptions

from karpy.apis import labels as wk
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.controller.cloudprovider.aws.amifamily import (
    AMISelectionError,
    alias_of,
    alias_parameters,
    describe_images_queries,
    image_requirements,
    newest_per_requirements,
    tag_filters,
)

NODE_CLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
EKS_CLUSTER_NAME_TAG = "eks:eks-cluster-name"
Obj = dict[str, Any]


class NodeClassNotReady(ValueError):
    """A part of an EC2NodeClass that AWS cannot give (nothing matches, a call failed); the message says which."""


def instance_profile_name(cluster: str, region: str, node_class: str) -> str:
    """Stable across restarts: the cluster, and a digest of the region and node class (IAM allows 128 characters)."""
    digest = int(hashlib.sha256(f"{region}{node_class}".encode()).hexdigest()[:16], 16)
    return f"{cluster}_{digest}"[:128]


def instance_profile_tags(node_class: EC2NodeClass, cluster: str, region: str) -> dict[str, str]:
    """The node class's tags, then the ones that mark the profile as this node class's (those win)."""
    return {**(node_class.spec.tags or {}), f"kubernetes.io/cluster/{cluster}": "owned", EKS_CLUSTER_NAME_TAG: cluster,
            NODE_CLASS_TAG: node_class.name, wk.REGION: region}


class NodeClassResolver:
    def __init__(self, ec2: Any, ssm: Any, iam: Any, *, cluster: str, region: str, kubernetes_minor: str,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        self.ec2, self.ssm, self.iam = ec2, ssm, iam
        self.cluster, self.region, self.kubernetes_minor, self.now = cluster, region, kubernetes_minor, now

    # --- subnets and security groups --------------------------------------------------------------
    def subnets(self, node_class: EC2NodeClass) -> list[Obj]:
        """Every subnet a term matches, most free addresses first (v1 launches into those first)."""
        found: dict[str, Obj] = {}
        for term in node_class.spec.subnet_selector_terms:
            query: Obj = {"SubnetIds": [term.id]} if term.id else {"Filters": tag_filters(term.tags or {})}
            with failing_as_not_ready("describing subnets"):
                subnets = self.ec2.describe_subnets(**query)["Subnets"]
            found.update({s["SubnetId"]: s for s in subnets})
        if not found:
            raise NodeClassNotReady("no subnet matches subnetSelectorTerms")
        ordered = sorted(found.values(), key=lambda s: (-s.get("AvailableIpAddressCount", 0), s["SubnetId"]))
        return [{"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s.get("AvailabilityZoneId")} for s in ordered]

    def security_groups(self, node_class: EC2NodeClass) -> list[Obj]:
        found: dict[str, Obj] = {}
        for term in node_class.spec.security_group_selector_terms:
            if term.id:
                query: Obj = {"GroupIds": [term.id]}
            else:
                query = {"Filters": ([{"Name": "group-name", "Values": [term.name]}] if term.name else [])
                         + tag_filters(term.tags or {})}
            with failing_as_not_ready("describing security groups"):
                groups = self.ec2.describe_security_groups(**query)["SecurityGroups"]
            found.update({g["GroupId"]: g for g in groups})
        if not found:
            raise NodeClassNotReady("no security group matches securityGroupSelectorTerms")
        return [{"id": g["GroupId"], "name": g.get("GroupName")} for g in sorted(found.values(), key=lambda g: g["GroupId"])]

    # --- AMIs ------------------------------------------------------------------------------------
    def amis(self, node_class: EC2NodeClass) -> list[Obj]:
        """The status's AMIs: the newest image per set of requirements, newest first."""
        try:
            alias = alias_of(node_class)
        except AMISelectionError as e:
            raise NodeClassNotReady(str(e)) from None
        candidates: list[tuple[Obj, list[Obj]]] = []
        if alias is not None:
            known: dict[str, Any] = {}
            for parameter, variants in alias_parameters(alias, self.kubernetes_minor).items():
                image_id = self._parameter(parameter)
                if image_id is not None:
                    known.setdefault(image_id, []).extend(variants)
            if not known:
                raise NodeClassNotReady(f"no AMI parameter answers for alias {alias.family.lower()}@{alias.version} "
                                        f"(Kubernetes {self.kubernetes_minor})")
            for image in self._images({"ImageIds": sorted(known)}):
                candidates += [(image, image_requirements(image, variant)) for variant in known[image["ImageId"]]]
        else:
            terms = node_class.spec.ami_selector_terms
            queries = describe_images_queries(terms)
            ssm_ids = [i for i in (self._parameter(t.ssm_parameter) for t in terms if t.ssm_parameter) if i]
            if ssm_ids:
                queries.append({"ImageIds": ssm_ids})
            for query in queries:
                candidates += [(image, image_requirements(image)) for image in self._images(query)]
        amis = newest_per_requirements([c for c in candidates if c[0].get("Architecture") in ("x86_64", "arm64")],
                                       self.now())
        if not amis:
            raise NodeClassNotReady("no image matches amiSelectorTerms")
        return amis

    def _parameter(self, name: str) -> str | None:
        try:
            return str(self.ssm.get_parameter(Name=name)["Parameter"]["Value"])
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] == "ParameterNotFound":
                return None
            raise NodeClassNotReady(f"reading SSM parameter {name}: {e.response['Error']['Code']}") from None

    def _images(self, query: Obj) -> list[Obj]:
        try:
            return list(self.ec2.describe_images(**query)["Images"])
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"].startswith("InvalidAMIID"):
                return []       # an id that no longer exists finds nothing, as a filter would
            raise NodeClassNotReady(f"describing images: {e.response['Error']['Code']}") from None

    # --- instance profile ----------------------------------------------------------------------
    def instance_profile(self, node_class: EC2NodeClass, uid: str = "") -> str:
        """spec.instanceProfile as is; for spec.role, the node class's own profile, made and tagged if missing,
        holding the role (a changed role replaces the old one)."""
        if node_class.spec.instance_profile:
            return node_class.spec.instance_profile
        role = node_class.spec.role
        if not role:
            raise NodeClassNotReady("neither spec.role nor spec.instanceProfile is set")
        name = instance_profile_name(self.cluster, self.region, node_class.name)
        try:
            profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] != "NoSuchEntity":
                raise NodeClassNotReady(f"reading instance profile {name}: {e.response['Error']['Code']}") from None
            tags = instance_profile_tags(node_class, self.cluster, self.region)
            path = f"/karpenter/{self.region}/{self.cluster}/{uid}/" if uid else "/"
            with failing_as_not_ready(f"creating instance profile {name}"):
                profile = self.iam.create_instance_profile(InstanceProfileName=name, Path=path, Tags=[
                    {"Key": k, "Value": v} for k, v in sorted(tags.items())])["InstanceProfile"]
        role_name = role.rsplit("/", 1)[-1]       # AddRoleToInstanceProfile takes no path
        current = [r["RoleName"] for r in profile.get("Roles") or []]
        if current != [role_name]:
            with failing_as_not_ready(f"putting role {role_name} in instance profile {name}"):
                for old in current:
                    self.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=old)
                self.iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
        return name

    def delete_instance_profile(self, node_class: EC2NodeClass) -> None:
        """Remove the profile made for the node class's role (its roles first); gone already is done."""
        if node_class.spec.instance_profile or not node_class.spec.role:
            return                       # not karpy's to delete
        name = instance_profile_name(self.cluster, self.region, node_class.name)
        try:
            profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] == "NoSuchEntity":
                return
            raise NodeClassNotReady(f"reading instance profile {name}: {e.response['Error']['Code']}") from None
        with failing_as_not_ready(f"deleting instance profile {name}"):
            for r in profile.get("Roles") or []:
                self.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=r["RoleName"])
            self.iam.delete_instance_profile(InstanceProfileName=name)


@contextlib.contextmanager
def failing_as_not_ready(what: str) -> Iterator[None]:
    """An AWS error inside becomes NodeClassNotReady saying what was being done."""
    try:
        yield
    except botocore.exceptions.ClientError as e:
        error = e.response["Error"]
        raise NodeClassNotReady(f"{what}: {error['Code']}: {error.get('Message', '')}") from None
