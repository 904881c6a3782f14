"""The Helm chart and the plain manifests: parseable, least privilege, and the values Karpenter users pass."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "manifests" / "chart"


def test_values_accept_the_flags_karpenter_users_already_pass() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {"clusterName", "clusterEndpoint"} <= set(values["controller"])
    assert "defaultInstanceProfile" in values["aws"]
    assert {"create", "name"} <= set(values["serviceAccount"])
    templates = "".join(p.read_text() for p in (CHART / "templates").iterdir())
    for ref in (".Values.controller.clusterName", ".Values.controller.clusterEndpoint", ".Values.aws.defaultInstanceProfile",
                ".Values.serviceAccount.create", ".Values.serviceAccount.name"):
        assert ref in templates, ref
    flags = set(re.findall(r"- (--[a-z-]+)=", templates)) | set(re.findall(r"- (--[a-z-]+)\n", templates))
    from karpy.main import build_parser

    controller = build_parser()._subparsers._group_actions[0].choices["controller"]  # type: ignore[union-attr]
    known = {o for a in controller._actions for o in a.option_strings}
    assert flags <= known, flags - known


def test_controller_rbac_is_least_privilege() -> None:
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "controller" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if rule["resources"] == ["pods"]:
            assert "delete" not in rule["verbs"]          # pods are evicted, never deleted
    assert any(r["resources"] == ["pods/binding", "pods/eviction"] for r in role["rules"])


def test_plain_manifests_parse() -> None:
    for path in (ROOT / "manifests").rglob("*.yaml"):
        if "templates" in path.parts:
            continue
        assert all(isinstance(d, dict) for d in yaml.safe_load_all(path.read_text()) if d is not None), path
