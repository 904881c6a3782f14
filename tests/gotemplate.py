"""A renderer for the subset of Helm's Go templates karpy's chart uses, so the chart is tested without helm.

Supported: `{{ pipeline }}` with `{{-`/`-}}` trimming; if/else/end, with/end, define/end; `$v := ...` and
`$v = ...`; field paths on `.`, `$v` and `$`; parenthesised sub-pipelines; string, number and nil
literals; and the functions below (Sprig's, as Helm has them). Anything else raises TemplateError, so a
template that leaves the subset fails the test rather than rendering wrongly. genCA and genSignedCert
make real certificates with `cryptography`, as Helm's do with Go's crypto. `lookup` answers from the
objects the Renderer is given (the cluster as `helm upgrade` would find it), an empty map otherwise, as
Helm answers when the object does not exist or there is no cluster (`helm template`).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import shlex
from pathlib import Path
from typing import Any, Callable

import yaml

TAG = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
Missing = None


class TemplateError(ValueError):
    pass


class Cert:
    def __init__(self, cert: str, key: str, *, signer: Any = None) -> None:
        self.Cert, self.Key, self.signer = cert, key, signer


def _keypair(cn: str, days: int, dns: list[str], ca: Cert | None) -> Cert:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now)
               .not_valid_after(now + dt.timedelta(days=days)))
    if ca is None:
        builder = builder.issuer_name(name).add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        signer = key
    else:
        builder = builder.issuer_name(ca.signer[1].subject).add_extension(
            x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
        signer = ca.signer[0]
    cert = builder.sign(signer, hashes.SHA256())
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return Cert(cert.public_bytes(serialization.Encoding.PEM).decode(), pem_key, signer=(key, cert))


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False).rstrip("\n")


def _go_str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _index(collection: Any, *keys: Any) -> Any:
    for key in keys:
        if collection is None:
            raise TemplateError("index of a nil value")
        collection = collection.get(key) if isinstance(collection, dict) else collection[key]
    return collection


def _truthy(value: Any) -> bool:
    return bool(value) and value != 0


class Renderer:
    def __init__(self, chart: Path, values: dict[str, Any], *, release: str, namespace: str,
                 cluster: list[dict[str, Any]] | None = None) -> None:
        chart_doc = yaml.safe_load((chart / "Chart.yaml").read_text())
        self.root = {"Values": values, "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
                     "Chart": {"Name": chart_doc["name"], "Version": chart_doc["version"],
                               "AppVersion": chart_doc.get("appVersion", "")}}
        self.defines: dict[str, list[Any]] = {}
        self.referenced: set[str] = set()      # every .Values path read
        self.functions: dict[str, Callable[..., Any]] = {
            "quote": lambda *a: " ".join('"' + _go_str(x).replace('"', '\\"') + '"' for x in a),
            "default": lambda d, v=None: v if _truthy(v) else d,
            "required": self._required,
            "toYaml": _to_yaml,
            "nindent": lambda n, s: "\n" + "\n".join(" " * n + line if line else line for line in _go_str(s).split("\n")),
            "indent": lambda n, s: "\n".join(" " * n + line for line in _go_str(s).split("\n")),
            "b64enc": lambda s: base64.b64encode(_go_str(s).encode()).decode(),
            "printf": lambda f, *a: re.sub(r"%[sdv]", "{}", f).format(*map(_go_str, a)),
            "list": lambda *a: list(a),
            "not": lambda v: not _truthy(v),
            "eq": lambda a, b: a == b,
            "and": lambda *a: next((x for x in a if not _truthy(x)), a[-1]),
            "or": lambda *a: next((x for x in a if _truthy(x)), a[-1]),
            "genCA": lambda cn, days: _keypair(cn, days, [], None),
            "genSignedCert": lambda cn, ips, dns, days, ca: _keypair(cn, days, list(dns or []), ca),
            "include": self._include,
            "index": _index,
            "lookup": self._lookup,
        }
        self.cluster = cluster or []
        for path in sorted((chart / "templates").glob("_*.tpl")):
            self._parse(path.read_text())

    def _lookup(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        for obj in self.cluster:
            meta = obj.get("metadata", {})
            if (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace", ""), meta.get("name")) == \
                    (api_version, kind, namespace, name):
                return obj
        return {}

    @staticmethod
    def _required(message: str, value: Any) -> Any:
        if value is None or value == "":
            raise TemplateError(message)
        return value

    # parsing -------------------------------------------------------------------------------------
    def _tokens(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        pos = 0
        for m in TAG.finditer(text):
            literal = text[pos:m.start()]
            if m.group(1):
                literal = literal.rstrip(" \t\n\r")
            if out and out[-1][0] == "trim-next":
                out.pop()
                literal = literal.lstrip(" \t\n\r")
            out.append(("text", literal))
            body = m.group(2)
            if not body.startswith("/*"):
                out.append(("action", body))
            if m.group(3):
                out.append(("trim-next", ""))
            pos = m.end()
        literal = text[pos:]
        if out and out[-1][0] == "trim-next":
            out.pop()
            literal = literal.lstrip(" \t\n\r")
        out.append(("text", literal))
        return out

    def _parse(self, text: str) -> list[Any]:
        stack: list[list[Any]] = [[]]
        blocks: list[Any] = []
        for kind, body in self._tokens(text):
            if kind == "text":
                if body:
                    stack[-1].append(("text", body))
                continue
            word = body.split(None, 1)[0]
            rest = body[len(word):].strip()
            if word in ("if", "with"):
                node: list[Any] = [word, rest, [], None]
                stack[-1].append(node)
                blocks.append(node)
                stack.append(node[2])
            elif word == "define":
                node = ["define", shlex.split(rest)[0], [], None]
                blocks.append(node)
                stack.append(node[2])
            elif word == "else":
                node = blocks[-1]
                stack.pop()
                node[3] = []
                stack.append(node[3])
            elif word == "end":
                node = blocks.pop()
                stack.pop()
                if node[0] == "define":
                    self.defines[node[1]] = node[2]
            elif word in ("range", "template", "block", "tpl"):
                raise TemplateError(f"{word} is outside the supported subset")
            else:
                stack[-1].append(("action", body))
        if blocks:
            raise TemplateError("unclosed block")
        return stack[0]

    # evaluation ----------------------------------------------------------------------------------
    def render(self, text: str) -> str:
        return self._run(self._parse(text), self.root, {"$": self.root})

    def _include(self, name: str, dot: Any) -> str:
        if name not in self.defines:
            raise TemplateError(f"no template {name!r}")
        return self._run(self.defines[name], dot, {"$": self.root})

    def _run(self, nodes: list[Any], dot: Any, scope: dict[str, Any]) -> str:
        out = []
        for node in nodes:
            if node[0] == "text":
                out.append(node[1])
            elif node[0] == "action":
                m = re.match(r"^(\$\w+)\s*(:?=)\s*(.*)$", node[1], re.S)
                if m:
                    scope[m.group(1)] = self._pipeline(m.group(3), dot, scope)
                else:
                    out.append(_go_str(self._pipeline(node[1], dot, scope)))
            elif node[0] == "if":
                branch = node[2] if _truthy(self._pipeline(node[1], dot, scope)) else (node[3] or [])
                out.append(self._run(branch, dot, scope))
            elif node[0] == "with":
                value = self._pipeline(node[1], dot, scope)
                out.append(self._run(node[2], value, scope) if _truthy(value) else self._run(node[3] or [], dot, scope))
        return "".join(out)

    def _pipeline(self, text: str, dot: Any, scope: dict[str, Any]) -> Any:
        value: Any = Missing
        first = True
        for command in self._split(text, "|"):
            args = self._split(command, " ")
            values = [self._term(a, dot, scope) for a in args[1:]]
            if not first:
                values.append(value)
            head = args[0]
            if head in self.functions:
                value = self.functions[head](*values)
            elif len(args) == 1 and first:
                value = self._term(head, dot, scope)
            else:
                raise TemplateError(f"unknown function {head!r}")
            first = False
        return value

    @staticmethod
    def _split(text: str, sep: str) -> list[str]:
        parts, depth, quote, cur = [], 0, False, ""
        for ch in text:
            if ch == '"' and not cur.endswith("\\"):
                quote = not quote
            if not quote:
                depth += (ch == "(") - (ch == ")")
            if ch == sep and depth == 0 and not quote:
                if cur.strip():
                    parts.append(cur.strip())
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur.strip())
        return parts

    def _term(self, term: str, dot: Any, scope: dict[str, Any]) -> Any:
        if term.startswith("(") and term.endswith(")"):
            return self._pipeline(term[1:-1], dot, scope)
        if term.startswith('"'):
            return term[1:-1].replace('\\"', '"')
        if term == "nil":
            return None
        if re.fullmatch(r"-?\d+", term):
            return int(term)
        if term == ".":
            return dot
        if term.startswith("."):
            base, path = dot, term[1:].split(".")
            if dot is self.root and path[0] == "Values":
                self.referenced.add(".".join(path[1:]))
        elif term.startswith("$"):
            name, *path = term.split(".")
            if name not in scope:
                raise TemplateError(f"undefined variable {name}")
            base = scope[name]
            if base is self.root and path and path[0] == "Values":
                self.referenced.add(".".join(path[1:]))
        elif term in self.functions:
            return self.functions[term]()
        else:
            raise TemplateError(f"cannot read {term!r}")
        for key in path:
            if isinstance(base, dict):
                base = base.get(key)
            elif base is None:
                return None
            else:
                base = getattr(base, key)
        return base
