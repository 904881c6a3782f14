"""A provisioner's AWS node template: its inline `provider` block, or the AWSNodeTemplate its providerRef names."""

from __future__ import annotations

from typing import Callable, Protocol

from kubernetes.client.exceptions import ApiException

from karpy.apis.awsnodetemplate_validation import decode_awsnodetemplate
from karpy.apis.v1alpha1 import AWSSettings
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.cloudprovider.aws.provider import AwsConfigError
from karpy.kubeclient.raw import RawClient, path_of


class Provisioners(Protocol):
    """What a template lookup reads: the cluster state's valid Provisioners, and its client (a provider sits
    below the controllers, so it names only what it uses of their ClusterState)."""

    client: RawClient

    def provisioner(self, name: str) -> Provisioner | None: ...


def node_templates(state: Provisioners) -> Callable[[str], AWSSettings]:
    def lookup(provisioner_name: str) -> AWSSettings:
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



