"""The pydantic models of apis/v1 against the published CRDs they stand beside: the same fields under the same
wire names, the same defaults, and they read what the CRDs accept."""

from __future__ import annotations

import copy
from typing import Any

import pydantic
import pytest

from karpy.apis.crds import PUBLISHED, published
from karpy.apis.meta import Object
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1.nodeclaim import NodeClaim
from karpy.apis.v1.nodepool import NodePool
from karpy.simulator import schema
from tests.simulator.test_v1_validation import VALID, nodeclass, nodepool

MODELS: dict[str, type[Object]] = {"NodePool": NodePool, "NodeClaim": NodeClaim, "EC2NodeClass": EC2NodeClass}
SCHEMAS = {doc["spec"]["names"]["kind"]: doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
           for doc in published().values()}


def model_fields(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """Wire name -> the model class (or None for a leaf) behind each field."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        wire = field.alias or name
        out[wire] = _inner_model(field.annotation)
    return out


def _inner_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def missing_fields(model: type[pydantic.BaseModel], node: dict[str, Any], path: str) -> list[str]:
    """CRD properties under `node` that `model` lacks, recursively, as dotted paths."""
    while node.get("type") == "array" or ("additionalProperties" in node and "properties" not in node):
        node = node.get("items") or node.get("additionalProperties") or {}
    fields = model_fields(model)
    missing = []
    for key, child in (node.get("properties") or {}).items():
        if key not in fields:
            missing.append(f"{path}.{key}")
        elif fields[key] is not None:
            missing += missing_fields(fields[key], child, f"{path}.{key}")
    return missing


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_every_field_of_the_published_crd_has_a_model_field(kind: str) -> None:
    crd_schema = SCHEMAS[kind]
    assert missing_fields(MODELS[kind], crd_schema, kind) == []


def test_the_published_crds_ship_inside_the_package() -> None:
    assert set(published()) == set(PUBLISHED)
    assert {doc["metadata"]["name"] for doc in published().values()} == {
        "nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"}


@pytest.mark.parametrize("obj", [nodepool(), nodeclass()], ids=["nodepool", "ec2nodeclass"])
def test_model_defaults_are_the_crds_defaults(obj: dict[str, Any]) -> None:
    stored, errors = schema.admit(copy.deepcopy(obj), SCHEMAS[obj["kind"]])
    assert errors == []
    model = MODELS[obj["kind"]]
    assert model.model_validate(obj).model_dump(by_alias=True, exclude_none=True, mode="json")["spec"] == stored["spec"]


@pytest.mark.parametrize("obj", VALID)
def test_the_models_read_every_object_the_crds_accept(obj: dict[str, Any]) -> None:
    read = MODELS[obj["kind"]].model_validate(obj)
    assert read.metadata.name == obj["metadata"]["name"]
    assert read.to_manifest()["spec"] == obj["spec"]


def test_the_models_reject_unknown_spec_fields_and_values_outside_the_enums() -> None:
    with pytest.raises(pydantic.ValidationError, match="consolidationPolicy"):
        NodePool.model_validate(nodepool(disruption={"consolidateAfter": "0s", "consolidationPolicy": "Sometimes"}))
    with pytest.raises(pydantic.ValidationError, match="amiFamiliy"):
        EC2NodeClass.model_validate(nodeclass(amiFamiliy="AL2"))
