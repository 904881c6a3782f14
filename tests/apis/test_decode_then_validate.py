"""Reading a Provisioner or an AWSNodeTemplate: decoded, then validated, in one step every reader shares."""

from __future__ import annotations

from karpy.apis.awsnodetemplate_validation import read_awsnodetemplate
from karpy.apis.provisioner_validation import read_provisioner
from tests.builders import provisioner


def test_a_valid_provisioner_is_read_with_no_errors() -> None:
    read, errors = read_provisioner(provisioner("default"), aws=False)
    assert read is not None and read.metadata.name == "default" and errors == []


def test_a_provisioner_that_decodes_but_breaks_a_rule_is_not_read() -> None:
    read, errors = read_provisioner(provisioner("default", ttlSecondsAfterEmpty=-1), aws=False)
    assert read is None and [e.path for e in errors] == ["spec.ttlSecondsAfterEmpty"]


def test_a_provisioner_that_does_not_decode_names_the_field() -> None:
    read, errors = read_provisioner(provisioner("default", weight="heavy"), aws=False)
    assert read is None and [e.path for e in errors] == ["spec.weight"]


def test_an_awsnodetemplate_breaking_a_rule_is_not_read() -> None:
    raw = {"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "t"},
           "spec": {"amiFamily": "Custom", "subnetSelector": {"Name": "*"}, "securityGroupSelector": {"Name": "*"}}}
    read, errors = read_awsnodetemplate(raw)
    assert read is None and [e.path for e in errors] == ["spec.amiSelector"]
