"""Generate docs/cli.md, every command's flags, from karpy's own argument parser.

    python3 hack/generate_cli_docs.py

tests/test_docs.py fails when docs/cli.md differs from what this prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from karpy.main import build_parser

OUT = ROOT / "docs" / "cli.md"
HEADER = """# Command line reference

Generated from `karpy`'s argument parser by `python3 hack/generate_cli_docs.py`; every flag of every
command, with its default. Commands that talk to a cluster (`controller`, `explain`, `extender`) find it
as kubectl does: `--kubeconfig` (one file, which must exist), else the files `$KUBECONFIG` lists
(separated by `:`; merged, the first to name a cluster, user, context or current-context winning; missing
files skipped, with one warning when none exists), else the in-cluster service account, else
`~/.kube/config` (read only when `$KUBECONFIG` is unset). `karpy extender` without `--kubeconfig` or
`--in-cluster` serves without a cluster when `$KUBECONFIG` is unset or names no existing file.
`karpy --version` prints the version. `karpy` alone, or `karpy certs` alone, prints the commands it takes;
like every usage error (a wrong flag shows the usage of the command it was given to) it exits 2. Servers listen on every interface inside a pod and on 127.0.0.1 elsewhere unless
`--host` says otherwise. Environment: `KARPY_LOG_LEVEL` (debug, info, warning, error; default info).
"""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """name -> (parser, its one-line help)"""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (child, helps.get(name, "")) for name, child in action.choices.items()}
    return {}


def flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest.upper()}`"
        if action.option_strings and action.nargs != 0:
            names += f" {action.metavar or action.dest.upper()}"
        help_text = (action.help or "").replace("|", "\\|")
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            help_text += f" (one of: {', '.join(map(str, action.choices))})"
        extras = []
        if action.required:
            extras.append("required")
        if action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
            extras.append(f"default `{action.default}`")
        if isinstance(action, argparse._AppendAction) and "repeatable" not in help_text:
            extras.append("repeatable")
        rows.append(f"| {names} | {help_text}{' (' + '; '.join(extras) + ')' if extras else ''} |")
    return rows


def render() -> str:
    out = [HEADER]

    def walk(parser: argparse.ArgumentParser, path: list[str], summary: str) -> None:
        children = subcommands(parser)
        if path:
            out.append(f"\n## `karpy {' '.join(path)}`\n")
            if summary:
                out.append(summary[0].upper() + summary[1:] + ".\n")
            rows = flag_rows(parser)
            if rows:
                out.append("| flag | meaning |\n|---|---|")
                out.extend(rows)
        for name, (child, help_text) in children.items():
            walk(child, [*path, name], help_text)

    walk(build_parser(), [], "")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(OUT)
