"""The files `karpy plan` and `karpy convert` read, as documents (YAML or JSON, `List` documents expanded).

`karpy plan` begins reading a long YAML file (start_reading) before it imports the modules that plan: the file is
read in processes of their own meanwhile (yaml_reader.py). So this module imports no more than
reading needs."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from karpy.plan import yaml_reader

_DOCUMENT_START = re.compile(r"^---[ \t]*$", re.MULTILINE)     # a bare `---` line between documents
_JSON_START = re.compile(r"\s*(?:---[ \t]*\n\s*)*[{\[]")        # blanks and bare `---` lines, then `{` or `[`


class PlanInputError(ValueError):
    """Invalid input; str() is one line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclasses.dataclass(frozen=True)
class Document:
    source: str
    index: int                        # 1-based, in its file
    body: Mapping[str, Any]

    def where(self) -> str:
        kind = self.body.get("kind", "?")
        name = (self.body.get("metadata") or {}).get("name") if isinstance(self.body.get("metadata"), Mapping) else None
        return f"{self.source}: document {self.index} ({kind} {json.dumps(name)})" if name else f"{self.source}: document {self.index} ({kind})"


class Reading:
    """Files being read (start_reading): each file's text is read at once, its YAML begun (in processes of their
    own when long); `documents()` gives what they hold."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self._problems: list[str] = []
        self._texts: list[tuple[str, str, yaml_reader.Loading | None]] = []
        for path in self.paths:
            try:
                text = Path(path).read_text(encoding="utf-8") if path != "-" else sys.stdin.read()
            except OSError as e:
                self._problems.append(f"{path}: {e.strerror or e}")
                continue
            except UnicodeDecodeError:
                self._problems.append(f"{path}: not UTF-8 text")
                continue
            self._texts.append((path, text, None if _maybe_json(text) else yaml_reader.start_loading(text)))

    def documents(self) -> list[Document]:
        """Every document of every file, in order; raises PlanInputError naming every file's problem."""
        docs: list[Document] = []
        problems = list(self._problems)
        for path, text, loading in self._texts:
            try:
                loaded = _json_documents(text) if loading is None else None
                if loaded is None:
                    loaded = (loading or yaml_reader.start_loading(text)).result()
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
                problems.append(f"{path}: not valid YAML or JSON{at}: {getattr(e, 'problem', None) or e}")
                continue
            index = 0
            for body in loaded:
                if body is None:
                    continue
                index += 1
                if not isinstance(body, Mapping):
                    problems.append(f"{path}: document {index}: not a mapping (got {type(body).__name__})")
                    continue
                if body.get("kind") == "List" and isinstance(body.get("items"), list):
                    docs += [Document(path, index, item) for item in body["items"] if isinstance(item, Mapping)]
                else:
                    docs.append(Document(path, index, body))
        if problems:
            raise PlanInputError(problems)
        return docs


def start_reading(paths: Sequence[str]) -> Reading:
    """The files at `paths` ("-": standard input) read now, their YAML begun; `.documents()` gives them."""
    return Reading(paths)


def read_documents(paths: Sequence[str]) -> list[Document]:
    """Every document of every file (`List` documents expanded); raises PlanInputError."""
    return start_reading(paths).documents()


def _maybe_json(text: str) -> bool:
    """Whether `text`'s first document starts as JSON does (only then is it tried as JSON)."""
    return _JSON_START.match(text) is not None


def _json_documents(text: str) -> list[Any] | None:
    """The documents of `text` when every one of them is JSON (as `kubectl get -o json` and generated inputs
    are), else None for the YAML reader: JSON is YAML, and reading it as JSON is many times faster."""
    try:
        return [json.loads(chunk) for chunk in _DOCUMENT_START.split(text) if chunk.strip()]
    except ValueError:
        return None
