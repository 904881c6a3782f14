"""kube-scheduler's extender JSON (Go field names): reading its requests, shaping the answers.

`ExtenderArgs {"Pod", "Nodes", "NodeNames"}` in; `ExtenderFilterResult`,
`HostPriorityList` and `ExtenderBindingResult` out. A request of the wrong
shape raises BadArgs naming the field. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from apis.pods import pod_requests
from apis.quantity import QuantityError
from apis.resources import Resources

Obj = dict[str, Any]


class BadArgs(ValueError):
    """A request that is not what kube-scheduler sends; the message names the field."""


@dataclasses.dataclass(frozen=True)
class ExtenderArgs:
    pod: Obj
    nodes: list[Obj] | None           # full Nodes (nodeCacheCapable: false)
    node_names: list[str] | None      # names only (nodeCacheCapable: true)

    @property
    def key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"

    @property
    def names(self) -> list[str]:
        return self.node_names if self.node_names is not None else [n["metadata"]["name"] for n in self.nodes or []]

    def requests(self) -> Resources:
        try:
            return pod_requests(self.pod.get("spec") or {})
        except QuantityError as e:
            raise BadArgs(f"Pod.{e}") from None


@dataclasses.dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_args(body: Any) -> ExtenderArgs:
    if not isinstance(body, dict):
        raise BadArgs(f"expected an ExtenderArgs object, got {type(body).__name__}")
    pod = body.get("Pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict) or not isinstance(pod["metadata"].get("name"), str):
        raise BadArgs("Pod: required, an object with metadata.name")
    if pod.get("spec") is not None and not isinstance(pod["spec"], dict):
        raise BadArgs("Pod.spec: expected an object")
    nodes, names = body.get("Nodes"), body.get("NodeNames")
    if nodes is None and names is None:
        raise BadArgs("Nodes or NodeNames: one is required")
    node_list = None
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list):
            raise BadArgs("Nodes.items: expected a list of Node objects")
        for i, n in enumerate(items):
            if not isinstance(n, dict) or not isinstance(n.get("metadata"), dict) or not isinstance(n["metadata"].get("name"), str):
                raise BadArgs(f"Nodes.items[{i}]: expected a Node with metadata.name")
        node_list = items
    if names is not None and node_list is None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadArgs("NodeNames: expected a list of strings")
    return ExtenderArgs(pod=pod, nodes=node_list, node_names=None if node_list is not None else names)


def parse_binding(body: Any) -> BindingArgs:
    if not isinstance(body, dict):
        raise BadArgs(f"expected an ExtenderBindingArgs object, got {type(body).__name__}")
    fields = ("PodName", "PodNamespace", "PodUID", "Node")
    wrong = [f for f in fields if not isinstance(body.get(f), str) or (not body[f] and f != "PodUID")]
    if wrong:
        raise BadArgs(f"{', '.join(wrong)}: required, {'each ' if len(wrong) > 1 else ''}a non-empty string")
    return BindingArgs(*(body[f] for f in fields))


def filter_result(args: ExtenderArgs, passed: list[str], failed: dict[str, str]) -> Obj:
    """Answer in the form asked: Nodes for Nodes, NodeNames for NodeNames."""
    result: Obj = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.nodes is not None:
        keep = set(passed)
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                           "items": [n for n in args.nodes if n["metadata"]["name"] in keep]}
        result["NodeNames"] = None
    else:
        result["Nodes"] = None
        result["NodeNames"] = passed
    return result


def host_priorities(names: list[str], scores: dict[str, int]) -> list[Obj]:
    """One `{"Host", "Score"}` per host given, in the order given."""
    return [{"Host": name, "Score": int(scores.get(name, 0))} for name in names]
