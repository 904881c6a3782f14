"""A long YAML text read by rapidyaml's C++ parser, when that gives what PyYAML's safe loader gives.

rapidyaml (`ryml`) parses a text into a tree and writes the tree as JSON, which msgspec reads; for 20,000 pods that
is about four times faster than PyYAML with yaml_reader's own constructor. The two read YAML by different rules
(rapidyaml's plain scalars follow YAML 1.2's JSON-like types, PyYAML's YAML 1.1's: `yes`, `~`, `0x1f`, `1:30`, a
date), so the text is read here only where the outcome is provably PyYAML's; else `read` answers None and the
caller reads it with PyYAML:

- the text has no directive (`%YAML`), document end marker (`...`), tab, tag (`!`), merge key (`<<`), explicit
  key (`? `) or plain `=` (PyYAML cannot build it), and every alias names an anchor of its own document (rapidyaml would follow it into an earlier one, where PyYAML refuses);
- it ends with a line break (rapidyaml ends a last block scalar with one where PyYAML does not) and has no
  character PyYAML reads as a line break where rapidyaml does not (NEL, LS, PS) or refuses as unprintable;
- every number the JSON holds is spelled as PyYAML reads it as that number (rapidyaml writes plain `1e3` as a
  number, PyYAML reads a string);
- every string of the JSON reads as a string to PyYAML, or could only have come from a quoted scalar: rapidyaml
  writes plain `yes` as the string "yes", which PyYAML reads as True; quoted, "yes" is a string to both. A key is
  always written quoted, so a key PyYAML reads as another type (`1:`) is never taken here.

Anything rapidyaml refuses (invalid YAML, a container as a key) is left to PyYAML, whose error names the line. An
alias is copied where PyYAML shares one object (equal either way); since a copy of copies can grow without bound (an
alias bomb), `read_to_send` caps the memory of the process it runs in, which must be one of its own."""

from __future__ import annotations

import bisect
import marshal
import os
import re
import resource
from typing import Any, Iterator

import msgspec
import yaml
from yaml.nodes import ScalarNode

try:
    import ryml  # type: ignore[import-untyped]  # rapidyaml: a SWIG module without type hints
except ImportError:  # a platform it has no wheel for: yaml_reader reads every text with PyYAML
    ryml = None

_STR, _FLOAT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:float"
_SEPARATORS = " \t\r\n[{,"                       # what may come before a node's tag, anchor or alias
# what PyYAML reads as a line break (NEL, LS, PS) or refuses as unprintable, where rapidyaml reads other text; a byte
# order mark past the start is left to PyYAML too
_NOT_PLAIN_TEXT = re.compile("[^\t\n\r\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
_PRINTABLE_ASCII = b"\t\n\r" + bytes(range(0x20, 0x7F))
_NAME = re.compile(r"[^\s,\[\]{}]+")              # an anchor's or alias's name, after its `&` or `*`
MEMORY_PER_CHARACTER = 64           # a text's documents take about 30 bytes a character while read here: twice that
MEMORY_HEADROOM = 512 << 20


class _Declined(Exception):
    """The text is not one this reader reads as PyYAML does."""


def available() -> bool:
    return ryml is not None


def read(text: str) -> list[Any] | None:
    """Every document of `text` as PyYAML's safe loader gives them (aliases copied, not shared), or None when this
    reader cannot promise that (see the module's docstring) or rapidyaml refuses the text."""
    if ryml is None or not text.endswith("\n"):     # (a block scalar ending the text: rapidyaml ends it with one)
        return None
    if _follows_other_rules(text) or not _aliases_stay_in_their_documents(text):
        return None
    try:
        encoded = text.encode()
    except UnicodeEncodeError:                         # a lone surrogate: not text PyYAML reads either
        return None
    if encoded.translate(None, _PRINTABLE_ASCII) and _NOT_PLAIN_TEXT.search(text.removeprefix("\ufeff")):
        return None                                    # (the bytes first: ten times faster than the pattern)
    try:
        tree = ryml.parse_in_arena(encoded)
        tree.resolve()                                # aliases: copies of the nodes they name
        root = tree.root_id()
        written = ryml.emit_json_malloc(tree, root)
        if not written:
            return None
        docs = _Scalars().decode(written)
        return docs if tree.is_stream(root) else [docs]
    except (_Declined, msgspec.DecodeError, ryml.ExceptionBasic):
        return None


def read_to_send(text: str) -> bytes | None:
    """read(text), marshalled, in a process of its own (`forked.start(..., only_forked=True)`): its memory is capped
    (an alias bomb fails here, and PyYAML, which shares aliases, reads it instead) and rapidyaml's own report of an
    error, written to standard error, is silenced (PyYAML's is the one the user reads)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + MEMORY_PER_CHARACTER * len(text) + MEMORY_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    docs = read(text)
    return None if docs is None else marshal.dumps(docs)


def _address_space() -> int:
    """This process's virtual memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _follows_other_rules(text: str) -> bool:
    """Whether `text` holds a directive (`%YAML`), a document end marker (`...`), a tab, a tag (`!`), a merge key
    (`<<`), an explicit key (`? `, where rapidyaml's aliases go astray) or a plain `=` (a value PyYAML cannot
    build, even where a later duplicate key discards it): PyYAML reads them by rules this reader does not follow.
    (Searched for as plain characters: a pattern takes ten times longer.)"""
    if text.startswith(("%", "...")) or "\n%" in text or "\n..." in text or "<<" in text or "\t" in text:
        return True                                    # (past a document end marker and around tabs, rapidyaml
                                                       # reads on where PyYAML finds an error)
    for indicator, followed_by in (("!", None), ("?", " \t\r\n")):
        for at in _places(text, indicator):
            if (at == 0 or text[at - 1] in _SEPARATORS) and (
                    followed_by is None or at + 1 == len(text) or text[at + 1] in followed_by):
                return True
    # a plain `=` starts the text or follows a separator (searched for together: most `=` are within a scalar)
    for separator in _SEPARATORS:
        if any(_equals_alone(text, at + 1) for at in _places(text, separator + "=")):
            return True
    return text.startswith("=") and _equals_alone(text, 0)


def _equals_alone(text: str, at: int) -> bool:
    """Whether the `=` at `at` is all of its scalar (spaces, then the end of the line, the text or a collection's item)."""
    end = at + 1
    while end < len(text) and text[end] == " ":
        end += 1
    return end == len(text) or text[end] in "\r\n,]}#"


def _aliases_stay_in_their_documents(text: str) -> bool:
    """Whether every alias (`*a`) follows an anchor of its name (`&a`) in its own document."""
    if "*" not in text:
        return True
    starts = _found(text, "\n---")                   # (a text with `...` is declined before)
    document, anchored = -1, set[str]()
    for at in _found(text, "&", "*"):
        if at and text[at - 1] not in _SEPARATORS:
            continue                                   # within a scalar (`a&b`, `2*3`)
        name = _NAME.match(text, at + 1)
        here = bisect.bisect_right(starts, at)
        if here != document:
            document, anchored = here, set()
        if text[at] == "&":
            anchored.add(name.group() if name else "")
        elif name is None or name.group() not in anchored:
            return False
    return True


def _found(text: str, *needles: str) -> list[int]:
    """Where any of `needles` is found in `text`, in order."""
    return sorted(at for needle in needles for at in _places(text, needle))


def _places(text: str, needle: str) -> Iterator[int]:
    """Where `needle` is found in `text`, in order. (str.find: a pattern takes several times longer.)"""
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + 1)


class _Scalars:
    """rapidyaml's JSON read into Python objects, each scalar checked against PyYAML's reading of it."""

    def __init__(self) -> None:
        self._resolver = yaml.resolver.Resolver()
        self._tags: dict[str, str] = {}
        self._written_plain: dict[str, bool] = {}
        self._decoder = msgspec.json.Decoder(float_hook=self._float)

    def decode(self, written: str) -> Any:
        docs = self._decoder.decode(written)
        self._check(docs)
        return docs

    def _plain_tag(self, value: str) -> str:
        """The type PyYAML gives `value` written as a plain scalar."""
        tag = self._tags.get(value)
        if tag is None:
            tag = self._tags[value] = self._resolver.resolve(ScalarNode, value, (True, False))
        return tag

    def _float(self, spelling: str) -> float:
        # rapidyaml writes plain `-.5` (a string to PyYAML) as -0.5, and `.5` and `1.` as 0.5 and 1.0 (floats to both)
        if self._plain_tag(spelling) != _FLOAT or spelling.startswith("-0."):
            raise _Declined(spelling)
        return float(spelling)

    def _string_written_plain(self, value: str) -> bool:
        """Whether rapidyaml writes `value`, a plain scalar, as this very string (so the string may have been plain)."""
        kept = self._written_plain.get(value)
        if kept is None:
            try:
                tree = ryml.parse_in_arena(b"- " + value.encode())
                kept = msgspec.json.decode(ryml.emit_json_malloc(tree, tree.root_id())) == [value]
            except (msgspec.DecodeError, ryml.ExceptionBasic):
                kept = True                            # no telling: as if it had been
            self._written_plain[value] = kept
        return kept

    def _check(self, docs: Any) -> None:
        """Raise _Declined where a string of `docs` may be one PyYAML reads as another type."""
        keys: set[str] = set()                         # strings found to be strings to PyYAML too
        values: set[str] = set()
        pending = [docs]
        while pending:
            node = pending.pop()
            children: Any
            if type(node) is dict:
                if not keys.issuperset(node):
                    for key in node:
                        if key not in keys:
                            if self._plain_tag(key) != _STR:
                                raise _Declined(key)   # written quoted whatever it was: `1:` is an int to PyYAML
                            keys.add(key)
                children = node.values()
            elif type(node) is list:
                children = node
            else:
                children = (node,)                     # a document that is a scalar
            for value in children:
                if type(value) is str:
                    if value not in values:
                        self._check_string(value, values)
                elif type(value) is dict or type(value) is list:
                    pending.append(value)

    def _check_string(self, value: str, values: set[str]) -> None:
        if self._plain_tag(value) != _STR and self._string_written_plain(value):
            raise _Declined(value)
        values.add(value)
