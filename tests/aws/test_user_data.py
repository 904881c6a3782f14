"""User data that joins a node: AL2/Ubuntu bootstrap.sh with custom parts merged as MIME, Bottlerocket TOML."""

from __future__ import annotations

import email
import tomllib
from email.message import Message
from typing import Any

import pytest

from karpy.controller.cloudprovider.aws.launch import al2_user_data, bottlerocket_user_data

JOIN: dict[str, Any] = dict(cluster="prod", endpoint="https://api.example", ca_bundle="Q0E=", max_pods=29,
            labels={"karpenter.sh/provisioner-name": "default", "team": "web"},
            taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])


def parts(document: str) -> list[str]:
    message = email.message_from_string(document)
    assert message.is_multipart()
    return [str(p.get_payload()) for p in message.get_payload() if isinstance(p, Message)]


def test_al2_without_custom_user_data_is_the_bootstrap_script() -> None:
    script = al2_user_data(**JOIN)
    assert script.startswith("#!/bin/bash") and "/etc/eks/bootstrap.sh 'prod'" in script
    assert "--max-pods=29" in script and "--register-with-taints=dedicated=db:NoSchedule" in script


def test_al2_custom_shell_script_runs_before_the_bootstrap() -> None:
    found = parts(al2_user_data(**JOIN, custom="#!/bin/bash\necho tuned > /etc/motd\n"))
    assert len(found) == 2 and "echo tuned" in found[0] and "/etc/eks/bootstrap.sh" in found[1]


def test_al2_custom_mime_keeps_its_parts() -> None:
    custom = ('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="XX"\n\n--XX\nContent-Type: text/cloud-config\n\n'
              "#cloud-config\npackages: [jq]\n\n--XX\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho one\n--XX--\n")
    found = parts(al2_user_data(**JOIN, custom=custom))
    assert len(found) == 3 and "packages: [jq]" in found[0] and "echo one" in found[1] and "bootstrap.sh" in found[2]


def test_bottlerocket_settings_join_the_node_and_keep_custom_settings() -> None:
    custom = ('[settings.kernel]\nlockdown = "integrity"\n[settings.kubernetes]\ncluster-name = "other"\n'
              '[settings.kubernetes.node-labels]\nowner = "ops"\n')
    settings = tomllib.loads(bottlerocket_user_data(**JOIN, custom=custom))["settings"]
    k8s = settings["kubernetes"]
    assert settings["kernel"] == {"lockdown": "integrity"}
    assert (k8s["cluster-name"], k8s["api-server"], k8s["cluster-certificate"], k8s["max-pods"]) == \
        ("prod", "https://api.example", "Q0E=", 29)                       # the joining keys are karpy's
    assert k8s["node-labels"] == {"owner": "ops", "karpenter.sh/provisioner-name": "default", "team": "web"}
    assert k8s["node-taints"] == {"dedicated": ["db:NoSchedule"]}


def test_bottlerocket_rejects_custom_user_data_that_is_not_toml() -> None:
    with pytest.raises(ValueError, match="userData: not valid TOML"):
        bottlerocket_user_data(**JOIN, custom="#!/bin/bash\necho no\n")
