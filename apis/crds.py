"""CustomResourceDefinitions: Provisioner, AWSNodeTemplate and NodeClaim generated from the pydantic models;
Karpenter v1's NodePool, NodeClaim and EC2NodeClass as Karpenter publishes them.

The pydantic JSON schema becomes a Kubernetes structural schema: references
inlined, optional fields unwrapped, quantities as int-or-string, open parts
(status, metadata) kept open with x-kubernetes-preserve-unknown-fields.
`hack/generate_crds.py` writes these to manifests/crds/; `karpy demo`
installs them. Pure: the published v1 CRDs are read from files shipped inside
this package (apis/v1/*.yaml), never from elsewhere.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
from typing import Any

import yaml
from pydantic import BaseModel

from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.v1alpha1 import AWSNodeTemplate
from karpy.apis.v1alpha5 import Provisioner

QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    "x-kubernetes-int-or-string": True,
}


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return structural(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            return structural(options[0], defs)
    if "const" in schema:
        return {"type": "string", "enum": [schema["const"]]}
    kind = schema.get("type")
    out: dict[str, Any] = {}
    if kind == "object":
        out["type"] = "object"
        props = schema.get("properties")
        if props:
            out["properties"] = {k: structural(v, defs) for k, v in props.items()}
            required = [r for r in schema.get("required", []) if r in props]
            if required:
                out["required"] = required
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = structural(extra, defs)
        elif extra is not False:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out = {"type": "array", "items": structural(schema.get("items", {}), defs)}
    elif kind in ("string", "integer", "boolean", "number"):
        out = {"type": kind}
        if "enum" in schema:
            out["enum"] = schema["enum"]
        if kind == "integer":
            out["format"] = "int64"
    elif schema.get("description") == "quantity" or schema == {}:
        out = {"x-kubernetes-preserve-unknown-fields": True}
    else:
        raise ValueError(f"cannot express {schema} as a structural schema")
    return out


def quantities(schema: dict[str, Any]) -> dict[str, Any]:
    """Resource lists and volume sizes accept integers as well as strings."""
    schema = copy.deepcopy(schema)
    paths = [
        ("spec", "limits", "resources"),
        ("spec", "kubeletConfiguration", "kubeReserved"),
        ("spec", "kubeletConfiguration", "systemReserved"),
        ("status", "resources"),
    ]
    for path in paths:
        node = schema
        for part in path:
            node = node.get("properties", {}).get(part)
            if node is None:
                break
        if node is not None:
            node["additionalProperties"] = dict(QUANTITY)
    return schema


def openapi(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["apiVersion"] = {"type": "string"}
    schema["properties"]["kind"] = {"type": "string"}
    schema.pop("required", None)
    return quantities(schema)


def crd(*, group: str, version: str, kind: str, plural: str, singular: str, short: list[str],
        model: type, columns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                      **({"shortNames": short} if short else {}), "categories": ["karpenter"]},
            "scope": "Cluster",
            "versions": [{
                "name": version,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": openapi(model)},
            }],
        },
    }


def definitions() -> dict[str, dict[str, Any]]:
    """File name -> CRD document."""
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    crds = {
        "karpenter.sh_provisioners.yaml": crd(
            group="karpenter.sh", version="v1alpha5", kind="Provisioner", plural="provisioners",
            singular="provisioner", short=[], model=Provisioner,
            columns=[
                {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight"},
                {"name": "TTLAfterEmpty", "type": "integer", "jsonPath": ".spec.ttlSecondsAfterEmpty", "priority": 1},
                {"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu"},
                age,
            ],
        ),
        "karpenter.k8s.aws_awsnodetemplates.yaml": crd(
            group="karpenter.k8s.aws", version="v1alpha1", kind="AWSNodeTemplate", plural="awsnodetemplates",
            singular="awsnodetemplate", short=[], model=AWSNodeTemplate, columns=[age],
        ),
        "karpy.dev_nodeclaims.yaml": crd(
            group="karpy.dev", version="v1alpha1", kind="NodeClaim", plural="nodeclaims",
            singular="nodeclaim", short=[], model=NodeClaim,
            columns=[
                {"name": "Provisioner", "type": "string", "jsonPath": ".spec.provisioner"},
                {"name": "Type", "type": "string", "jsonPath": ".status.instanceType"},
                {"name": "Zone", "type": "string", "jsonPath": ".status.zone"},
                {"name": "Node", "type": "string", "jsonPath": ".status.nodeName"},
                {"name": "ProviderID", "type": "string", "jsonPath": ".status.providerID", "priority": 1},
                age,
            ],
        ),
    }
    return crds


# Karpenter v1's CRDs, verbatim: their schemas carry the validation rules (x-kubernetes-validations) an API
# server enforces, which a generated schema would only approximate. tests/apis/test_v1_models.py holds the
# pydantic models in apis/v1/ to these schemas.
PUBLISHED = ("karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml", "karpenter.k8s.aws_ec2nodeclasses.yaml")


@functools.cache
def published_text(name: str) -> str:
    """A published v1 CRD file as shipped in apis/v1/, its origin and license in its first line."""
    return (importlib.resources.files("karpy.apis.v1") / name).read_text()


def published() -> dict[str, dict[str, Any]]:
    """File name -> published v1 CRD document (a fresh copy each call)."""
    return {name: yaml.safe_load(published_text(name)) for name in PUBLISHED}


def all_definitions() -> dict[str, dict[str, Any]]:
    """File name -> CRD document, both API generations."""
    return {**definitions(), **published()}


def generate() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    header = "# Generated by hack/generate_crds.py from apis/. Do not edit.\n"
    texts = {name: header + yaml.safe_dump(doc, sort_keys=False) for name, doc in definitions().items()}
    copied = "# Copied by hack/generate_crds.py from apis/v1/. Do not edit.\n"
    texts.update({name: copied + published_text(name) for name in PUBLISHED})
    return texts
