"""Shared pieces of the API types: object metadata, quantity strings, model bases.

Spec models forbid unknown fields (a typo in a Provisioner is an error, not
a silently ignored setting); metadata and status keep unknown fields, so an
object read from the API server and written back loses nothing. Pure.
"""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from pydantic import BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from karpy.apis.quantity import Quantity, QuantityError


def _quantity_text(value: Any) -> str:
    """Accept `1000`, `0.5`, `"500m"`; reject what the API server would reject."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{value!r} is not a quantity")
    try:
        Quantity.parse(value)
    except QuantityError as e:
        raise ValueError(str(e)) from None
    return value if isinstance(value, str) else str(value)


QuantityStr = Annotated[str, BeforeValidator(_quantity_text)]
ResourceList = dict[str, QuantityStr]


class Spec(pydantic.BaseModel):
    """A spec: wire names in camelCase, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=False,
        validate_default=False,
    )

    def to_manifest(self) -> dict[str, Any]:
        """Wire form: exactly the fields that were set, with their wire names."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class Open(Spec):
    """A part of an object that keeps fields it does not know (metadata, status)."""

    model_config = ConfigDict(extra="allow")


class ObjectMeta(Open):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None


class Object(Open):
    """A top-level API object: apiVersion, kind, metadata; subclasses add spec/status."""

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
