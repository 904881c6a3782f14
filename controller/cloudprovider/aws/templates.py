"""What a launch on AWS launches from: a Provisioner's node template (its inline `provider` block, or the
AWSNodeTemplate its providerRef names), or a NodePool's EC2NodeClass (its nodeClassRef), read with its status."""

from __future__ import annotations

from typing import Any, Callable, Protocol

import pydantic
from kubernetes.client.exceptions import ApiException

from karpy.apis.awsnodetemplate_validation import decode_awsnodetemplate
from karpy.apis.v1 import ec2nodeclass
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1alpha1 import AWSSettings
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.cloudprovider.aws.provider import AwsConfigError
from karpy.kubeclient.raw import RawClient, path_of


class Provisioners(Protocol):
    """What a template lookup reads: the cluster state's valid Provisioners, and its client (a provider sits
    below the controllers, so it names only what it uses of their ClusterState)."""

    client: RawClient

    def provisioner(self, name: str) -> Provisioner | None: ...

    def pool_object(self, name: str) -> dict[str, Any] | None: ...


def node_class(state: Provisioners, pool: dict[str, Any]) -> EC2NodeClass:
    """The EC2NodeClass a NodePool's nodeClassRef names, as the API server holds it now (its status is what a
    launch uses); AwsConfigError naming the NodePool when it is missing or unreadable."""
    name = pool["metadata"]["name"]
    ref = (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    if ref.get("kind") != "EC2NodeClass" or not ref.get("name"):
        raise AwsConfigError(f"NodePool {name!r}: spec.template.spec.nodeClassRef names no EC2NodeClass")
    try:
        raw = state.client.get(path_of(ec2nodeclass.GROUP_VERSION, ec2nodeclass.PLURAL, name=ref["name"]))
        return EC2NodeClass.model_validate(raw)
    except ApiException as e:
        raise AwsConfigError(f"NodePool {name!r}: EC2NodeClass {ref['name']!r}: {e.status} {e.reason}") from None
    except pydantic.ValidationError as e:
        raise AwsConfigError(f"NodePool {name!r}: EC2NodeClass {ref['name']!r}: {e.error_count()} invalid field(s)") from None


def node_templates(state: Provisioners) -> Callable[[str], AWSSettings | EC2NodeClass]:
    def lookup(provisioner_name: str) -> AWSSettings | EC2NodeClass:
        pool = state.pool_object(provisioner_name)
        if pool is not None and pool.get("kind") == "NodePool":
            return node_class(state, pool)
        provisioner = state.provisioner(provisioner_name)
        if provisioner is None:
            raise AwsConfigError(f"provisioner {provisioner_name!r} is not known (or not valid)")
        if provisioner.spec.provider is not None:
            return provisioner.spec.provider
        ref = provisioner.spec.provider_ref
        if ref is None:
            raise AwsConfigError(f"provisioner {provisioner_name!r} has neither spec.provider nor spec.providerRef")
        try:
            raw = state.client.get(path_of("karpenter.k8s.aws/v1alpha1", "awsnodetemplates", name=ref.name))
        except ApiException as e:
            raise AwsConfigError(f"provisioner {provisioner_name!r}: spec.providerRef {ref.name!r}: {e.status} {e.reason}") from None
        template, errors = decode_awsnodetemplate(raw)
        if template is None:
            raise AwsConfigError(f"AWSNodeTemplate {ref.name!r}: {'; '.join(map(str, errors))}")
        return template.spec
    return lookup



