"""Many YAML documents, read as PyYAML's safe loader reads them, in about half its time.

PyYAML's parser (its C one where built) turns each document into a tree of nodes; its constructor then
builds the Python objects through several calls per node, and its resolver matches every plain scalar
against the implicit types' patterns. Inputs of thousands of manifests repeat the same few scalars
(`apiVersion: v1`, `name: app`...) and hold nothing but maps, lists, strings, numbers, booleans and
nulls. So here a scalar's type is resolved once per distinct spelling, and such plain trees are built
in one recursive pass. A document holding anything else (a merge key, a timestamp, a custom tag, a
self-referencing alias) is built by PyYAML's own constructor, with its own errors."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR, _INT, _BOOL, _NULL, _FLOAT = (f"tag:yaml.org,2002:{name}" for name in ("str", "int", "bool", "null", "float"))
_SEQ, _MAP = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_PLAIN_SCALARS = frozenset((_STR, _INT, _BOOL, _NULL, _FLOAT))


class _NotPlain(Exception):
    """The document holds a node the one-pass build leaves to PyYAML's constructor."""


class _Loader(_BaseLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._tags: dict[tuple[str, Any], str] = {}

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is not ScalarNode:
            return str(super().resolve(kind, value, implicit))
        tag = self._tags.get(key := (value, implicit))
        if tag is None:
            tag = self._tags[key] = super().resolve(kind, value, implicit)
        return tag

    def construct_document(self, node: Node) -> Any:
        try:
            return self._build(node, {})
        except _NotPlain:
            return super().construct_document(node)

    def _build(self, node: Node, built: dict[int, Any]) -> Any:
        tag = node.tag
        if type(node) is ScalarNode:
            if tag == _STR:
                return node.value
            if tag == _INT:
                return self.construct_yaml_int(node)
            if tag == _BOOL:
                return self.construct_yaml_bool(node)
            if tag == _NULL:
                return None
            if tag == _FLOAT:
                return self.construct_yaml_float(node)
            raise _NotPlain
        # an alias is the very node it names: built once, shared as PyYAML shares it (and an alias bomb stays small)
        if (done := built.get(id(node), _NotPlain)) is not _NotPlain:
            if done is None:
                raise _NotPlain                   # an alias inside the node it names: a recursive structure
            return done
        built[id(node)] = None
        out: Any
        if type(node) is MappingNode and tag == _MAP:
            out = {}
            for key, value in node.value:
                if type(key) is not ScalarNode or key.tag not in _PLAIN_SCALARS:
                    raise _NotPlain               # a merge key (`<<`) or a key PyYAML may refuse as unhashable
                out[self._build(key, built)] = self._build(value, built)
        elif type(node) is SequenceNode and tag == _SEQ:
            out = [self._build(item, built) for item in node.value]
        else:
            raise _NotPlain
        built[id(node)] = out
        return out


def load_all(text: str) -> list[Any]:
    """Every document of `text`, as PyYAML's safe loader gives them; raises yaml.YAMLError as it does."""
    return list(yaml.load_all(text, Loader=_Loader))
