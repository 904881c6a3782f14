"""Many YAML documents, read as PyYAML's safe loader reads them, in about half its time.

PyYAML's parser (its C one where built) turns each document into a tree of nodes; its constructor then
builds the Python objects through several calls per node, and its resolver matches every plain scalar
against the implicit types' patterns. Inputs of thousands of manifests repeat the same few scalars
(`apiVersion: v1`, `name: app`...) and hold nothing but maps, lists, strings, numbers, booleans and
nulls. So here a scalar's type is resolved once per distinct spelling, and such plain trees are built
in one recursive pass. A document holding anything else (a merge key, a timestamp, a custom tag, a
self-referencing alias) is built by PyYAML's own constructor, with its own errors.

A long text is cut at document starts into one part per core. Each part is read at once in a process of its own
(forked) while the process that asked goes on, by rapidyaml where that gives what PyYAML gives (yaml_rapid.py),
several times faster. Where it does not for some part, PyYAML reads the text, cut again into one part per core:
each part but the first in a process of its own, the first by the process that asked. A `---` line ends whatever
was open (a block scalar; a quoted one is an error) and an anchor names a node of its own document, so the parts'
documents, in order, are the text's. Whatever goes wrong in PyYAML's parts, the whole text is read again here, so
an error names its line in the text."""

from __future__ import annotations

import functools
import marshal
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from karpy.controller.provisioning.scheduling import forked
from karpy.plan import yaml_rapid

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


# the share of a long text read in the process that asked, after what it goes on with meanwhile (`karpy plan`
# imports its planning modules, about as long as reading a fifth of a 20,000-pod file): the others start at once
FIRST_SHARE = 0.4
PARALLEL_CHARS = 1_000_000       # a shorter text is read in this process alone: starting others costs more than it saves
MAX_PARTS = 8
_DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|$)", re.MULTILINE)   # a `---` line: a document starts


def load_all(text: str, *, parts: int | None = None) -> list[Any]:
    """Every document of `text`, as PyYAML's safe loader gives them; raises yaml.YAMLError as it does. `parts`:
    how many processes read it at once (default: one per core for a long text, else this one alone)."""
    return start_loading(text, parts=parts).result()


def start_loading(text: str, *, parts: int | None = None) -> Loading:
    """load_all(text) begun now: a long text is read in forked processes while this one goes on (`karpy plan`
    imports what it plans with meanwhile), by rapidyaml in one part per core when `parts` is not given and it may;
    `.result()` gives the documents."""
    can_fork = forked.can_fork()
    long = can_fork and len(text) >= PARALLEL_CHARS
    if parts is None:
        return Loading(text, parts=min(forked.cores(), MAX_PARTS) if long else 1, rapid=long and yaml_rapid.available())
    return Loading(text, parts=parts if can_fork else 1, rapid=False)


class Loading:
    """A text being read: in `parts` parts by rapidyaml, each in a process of its own from the start, or else
    (rapidyaml declined a part) by PyYAML in parts: its first part here when asked for, each other part in a
    process of its own."""

    def __init__(self, text: str, *, parts: int, rapid: bool) -> None:
        self._text = text
        self._parts = parts
        self._rapid = [forked.start(functools.partial(yaml_rapid.read_to_send, piece), fork=True, only_forked=True)
                       for piece in split_documents(text, parts)] if rapid else None
        self._in_parts = None if rapid else _InParts(text, parts, first=FIRST_SHARE)

    def result(self) -> list[Any]:
        """The documents, in order."""
        if self._rapid is not None:
            docs = _received(self._rapid)            # None: a part declined, ran out of memory (an alias bomb) or died
            self._rapid = None
            if docs is not None:
                return docs
            self._in_parts = _InParts(self._text, self._parts, first=None)    # begun now: even parts
        assert self._in_parts is not None
        return self._in_parts.result()


class _InParts:
    """A text read in parts by PyYAML: its first part here when asked for, each other part in a process of its own
    from the start."""

    def __init__(self, text: str, parts: int, *, first: float | None) -> None:
        self._text = text
        pieces = split_documents(text, parts, first=first) if parts > 1 else [text]
        self._first = pieces[0]
        self._later = [forked.start(functools.partial(_load_to_send, piece), fork=True, only_forked=True)
                       for piece in pieces[1:]]

    def result(self) -> list[Any]:
        """The documents, in order. Whatever goes wrong in a part, the whole text is read again here (once every
        part's process has ended), so that an error names its line in the text."""
        first: list[Any] | None
        try:
            first = _load(self._first)
        except Exception:  # its line is the text's too, but a later part's error may come first: read whole
            first = None
        later = _received(self._later)             # None: a part's own error (its line is in the part), or it died
        return _load(self._text) if first is None or later is None else first + later


def _received(parts: list[forked.Started[Any]]) -> list[Any] | None:
    """The documents the parts' processes sent (marshalled, or as they are), in order; None when one sent None
    (rapidyaml declined its part), failed or died. Every part's process has ended either way."""
    docs: list[Any] | None = []
    for part in parts:
        try:
            sent = part.result()
        except forked.ForkFailed:
            sent = None
        if sent is None:
            docs = None
        elif docs is not None:
            docs += marshal.loads(sent) if isinstance(sent, bytes) else sent
    return docs


def split_documents(text: str, parts: int, *, first: float | None = None) -> list[str]:
    """`text` cut into at most `parts` pieces, each cut where a document starts (a `---` line): the first `first` of
    its length (default: as long as the others), the others of about equal length; the text whole when it has
    directives (they belong to the document after them) or no such line."""
    # a line starting `%` (`%YAML`, `%TAG`) is a directive, searched for as a plain substring (a pattern takes longer)
    if parts <= 1 or text.startswith("%") or "\n%" in text:
        return [text]
    head = 1 / parts if first is None else first
    cuts = [0]
    for k in range(1, parts):
        at = head + (1 - head) * (k - 1) / (parts - 1)
        found = _DOCUMENT_START.search(text, max(cuts[-1] + 1, int(len(text) * at)))
        if found is None:
            break
        cuts.append(found.start())
    return [text[start:end] for start, end in zip(cuts, cuts[1:] + [len(text)])]


def _load_to_send(piece: str) -> bytes | list[Any]:
    """_load(piece) as a forked process sends it back: marshalled when it is plain data (many times faster to write
    than pickled, and as fast to read; shared and recursive nodes stay so), else as it is (a timestamp's date)."""
    loaded = _load(piece)
    try:
        return marshal.dumps(loaded)
    except ValueError:
        return loaded


def _load(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_Loader))
