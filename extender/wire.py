"""kube-scheduler's extender JSON (Go field names): reading its requests, shaping the answers.

`ExtenderArgs {"Pod", "Nodes", "NodeNames"}` in; `ExtenderFilterResult`,
`HostPriorityList` and `ExtenderBindingResult` out. A request of the wrong
shape raises BadArgs naming the field. Pure.

A filter call with full Nodes is megabytes, and turning all of it into
Python objects is most of the cost of answering. So the body is only split
into its Nodes' bytes; each Node is read (`decode_node`) only as far as the
decisions need (name, labels, annotations, timestamps, taints,
allocatable), and only when its bytes were not seen before; the ones that
pass are answered back byte for byte.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypedDict

import msgspec

from karpy.apis.pods import object_key
from karpy.apis.quantity import QuantityError
from karpy.extender.decisions import PodNeeds, needs_of

Obj = dict[str, Any]


class BadArgs(ValueError):
    """A request that is not what kube-scheduler sends; the message names the field."""


class _NodeMetadata(TypedDict, total=False):
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    creationTimestamp: str
    deletionTimestamp: str


class _NodeStatus(TypedDict, total=False):
    allocatable: dict[str, Any]


class _NodeSpec(TypedDict, total=False):
    taints: list[dict[str, Any]]
    unschedulable: bool


class _Node(TypedDict, total=False):
    """The part of a Node the decisions read; the rest is skipped, not built."""
    metadata: _NodeMetadata
    spec: _NodeSpec
    status: _NodeStatus


class _NodeList(TypedDict, total=False):
    items: list[msgspec.Raw]


class _Args(TypedDict, total=False):
    Pod: Any
    Nodes: _NodeList | None                      # each Node kept as its bytes: found, not built
    NodeNames: Any


_ARGS = msgspec.json.Decoder(_Args)
_NODE = msgspec.json.Decoder(_Node)
_ENCODER = msgspec.json.Encoder()
_AT = re.compile(r"^(.*) - at `\$\.?(.*)`$")


@dataclasses.dataclass(frozen=True)
class ExtenderArgs:
    pod: Obj
    raw_nodes: list[msgspec.Raw] | None   # full Nodes (nodeCacheCapable: false), each as sent
    node_names: list[str] | None          # names only (nodeCacheCapable: true)

    @property
    def key(self) -> str:
        return object_key(self.pod)

    def needs(self) -> PodNeeds:
        """What the pod asks of a node; BadArgs naming the field that cannot be read."""
        try:
            return needs_of(self.pod)
        except QuantityError as e:
            raise BadArgs(f"Pod.{e}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadArgs(f"Pod.spec.affinity.nodeAffinity: {e}") from None


@dataclasses.dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def decode_args(raw: bytes) -> ExtenderArgs:
    """ExtenderArgs from a request body."""
    try:
        body = _ARGS.decode(raw)
    except msgspec.ValidationError as e:
        raise BadArgs(_located(e, "ExtenderArgs")) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise BadArgs(_not_json(e)) from None
    pod = body.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict) or not isinstance(pod["metadata"].get("name"), str):
        raise BadArgs("Pod: required, an object with metadata.name")
    if pod.get("spec") is not None and not isinstance(pod["spec"], dict):
        raise BadArgs("Pod.spec: expected an object")
    nodes, names = body.get("Nodes"), body.get("NodeNames")
    if nodes is None and names is None:
        raise BadArgs("Nodes or NodeNames: one is required")
    if nodes is not None:
        if "items" not in nodes:
            raise BadArgs("Nodes.items: expected a list of Node objects")
        return ExtenderArgs(pod=pod, raw_nodes=nodes["items"], node_names=None)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadArgs("NodeNames: expected a list of strings")
    return ExtenderArgs(pod=pod, raw_nodes=None, node_names=names)


def decode_node(raw: msgspec.Raw | bytes, index: int) -> Obj:
    """The part of the `index`th Node of a request that the decisions read; BadArgs naming it when it is no Node."""
    try:
        node = _NODE.decode(raw)
    except msgspec.ValidationError as e:
        raise BadArgs(_located(e, f"Nodes.items[{index}]")) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise BadArgs(f"Nodes.items[{index}]: {_not_json(e)}") from None
    if not isinstance((node.get("metadata") or {}).get("name"), str):
        raise BadArgs(f"Nodes.items[{index}]: expected a Node with metadata.name")
    return dict(node)


def _not_json(e: Exception) -> str:
    """msgspec checks UTF-8 only inside strings, and says so with a UnicodeDecodeError."""
    if isinstance(e, UnicodeDecodeError):
        return f"body is not valid JSON: not UTF-8 at byte {e.start}"
    return f"body is not valid JSON: {e}"


def _located(e: msgspec.ValidationError, where: str) -> str:
    """msgspec's "Expected `str`, got `int` - at `$.metadata.name`" as "where.metadata.name: expected `str`, got `int`"."""
    m = _AT.match(str(e))
    if not m:
        return f"{where}: {e}"
    path = m.group(2)
    joined = where if not path else path if where == "ExtenderArgs" else f"{where}{'' if path.startswith('[') else '.'}{path}"
    return f"{joined}: {m.group(1)[:1].lower()}{m.group(1)[1:]}"


def encode(payload: Any) -> bytes:
    """JSON for an answer; Nodes kept as bytes go out as they came."""
    return _ENCODER.encode(payload)


def decode_binding(raw: bytes) -> BindingArgs:
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise BadArgs(_not_json(e)) from None
    if not isinstance(body, dict):
        raise BadArgs(f"expected an ExtenderBindingArgs object, got {type(body).__name__}")
    fields = ("PodName", "PodNamespace", "PodUID", "Node")
    wrong = [f for f in fields if not isinstance(body.get(f), str) or (not body[f] and f != "PodUID")]
    if wrong:
        raise BadArgs(f"{', '.join(wrong)}: required, {'each ' if len(wrong) > 1 else ''}a non-empty string")
    return BindingArgs(*(body[f] for f in fields))


def filter_result(args: ExtenderArgs, names: list[str], passed: list[str], failed: dict[str, str]) -> Obj:
    """Answer in the form asked: Nodes for Nodes, NodeNames for NodeNames. `names` are the request's nodes' names."""
    result: Obj = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.raw_nodes is not None:
        keep = set(passed)
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                           "items": [raw for name, raw in zip(names, args.raw_nodes) if name in keep]}
        result["NodeNames"] = None
    else:
        result["Nodes"] = None
        result["NodeNames"] = passed
    return result


def host_priorities(names: list[str], scores: dict[str, int]) -> list[Obj]:
    """One `{"Host", "Score"}` per host given, in the order given."""
    return [{"Host": name, "Score": int(scores.get(name, 0))} for name in names]
