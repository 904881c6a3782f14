"""The OpenAPI v3 documents kubectl reads before it writes.

kubectl asks, per group/version, whether the server takes the
`fieldValidation` and `dryRun` query parameters on a kind's PATCH; when it
does, kubectl leaves validation to the server (which checks CRD schemas) and
needs no schema of its own. These documents say so for every served kind.
Pure.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from karpy.simulator.resources import Registry, ResourceType

VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "gitCommit": "karpy-simulator", "gitTreeState": "clean",
           "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64"}


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (strings and messages); lengths here stay below 128."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def v2_document() -> bytes:
    """An OpenAPI v2 document with no definitions, in the protobuf encoding kubectl asks for.

    kubectl builds its client-side validator from /openapi/v2 before it learns that the
    server validates fields itself (from the v3 documents); a kind it finds no definition
    for it leaves to the server."""
    info = _field(1, b"Kubernetes") + _field(2, VERSION["gitVersion"].encode())   # Info.title, Info.version
    return _field(1, b"2.0") + _field(2, info)                                    # Document.swagger, Document.info


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def group_version_doc(types: list[ResourceType]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    params = [{"name": name, "in": "query", "description": name, "schema": {"type": "string", "uniqueItems": True}}
              for name in ("dryRun", "fieldManager", "fieldValidation", "pretty")]
    for t in types:
        gvk = {"group": t.group, "version": t.version, "kind": t.kind}
        base = f"/{_prefix(t.group, t.version)}" + ("/namespaces/{namespace}" if t.namespaced else "")
        operation = {"operationId": f"patch{t.kind}", "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk,
                     "responses": {"200": {"description": "OK"}}}
        paths[f"{base}/{t.plural}/{{name}}"] = {"parameters": params, "patch": operation,
                                               "get": {**operation, "operationId": f"read{t.kind}", "x-kubernetes-action": "get"}}
        paths[f"{base}/{t.plural}"] = {"parameters": params,
                                       "post": {**operation, "operationId": f"create{t.kind}", "x-kubernetes-action": "post"}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]}, "paths": paths,
            "components": {"schemas": {schema_name(t): kind_schema(t) for t in types if t.schema is not None}}}


def schema_name(t: ResourceType) -> str:
    """The API server's name for a kind's schema: the group reversed, the version, the kind (sh.karpenter.v1alpha5.Provisioner)."""
    return ".".join([*reversed(t.group.split(".")), t.version, t.kind])


def kind_schema(t: ResourceType) -> dict[str, Any]:
    """A CRD's openAPIV3Schema as the API server publishes it, tagged with its group/version/kind:
    `kubectl explain` finds a kind's schema by that tag."""
    schema = dict(t.schema or {})
    properties = dict(schema.get("properties") or {})
    properties.setdefault("apiVersion", {"type": "string", "description": "APIVersion defines the versioned schema of this "
                                         "representation of an object."})
    properties.setdefault("kind", {"type": "string", "description": "Kind is a string value representing the REST resource "
                                   "this object represents."})
    properties["metadata"] = {"type": "object", "description": "Standard object's metadata. More info: "
                              "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}
    schema["properties"] = properties
    schema.setdefault("type", "object")
    schema["x-kubernetes-group-version-kind"] = [{"group": t.group, "version": t.version, "kind": t.kind}]
    return schema


def index(registry: Registry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            doc = group_version_doc([t for t in registry.all() if t.group == group and t.version == version])
            digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
            out[_prefix(group, version)] = {"serverRelativeURL": f"/openapi/v3/{_prefix(group, version)}?hash={digest}"}
    return {"paths": out}


def document(registry: Registry, path: str) -> dict[str, Any] | None:
    """The document for `api/v1` or `apis/<group>/<version>`, or None."""
    parts = path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[:1] == ["apis"] and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    types = [t for t in registry.all() if t.group == group and t.version == version]
    return group_version_doc(types) if types else None
