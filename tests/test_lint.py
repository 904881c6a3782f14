"""ruff and mypy pass over the whole tree, with the settings in pyproject.toml.

mypy resolves modules by their place on disk and the checkout's folders install
as karpy.<folder> (setup.py), so it reads a tree of links shaped as the
installed package (as the import contracts do), kept in .mypy_cache beside its
cache so later runs only re-check what changed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layers import ROOT, installed_layout

pytestmark = pytest.mark.slow      # runs ruff, mypy and import-linter over the tree

# Checked beside the package: they import karpy, and each other, as the installed layout names them.
BESIDE = ["tests", "bench"]


def mypy_layout() -> Path:
    """The link tree, rebuilt each run (links are cheap; the cache is what is kept)."""
    tree = ROOT / ".mypy_cache" / "layout"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    installed_layout(tree)
    for folder in BESIDE:
        (tree / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return tree


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    tree = mypy_layout()
    scripts = sorted(str(p) for p in (ROOT / "hack").glob("*.py"))
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                             "--cache-dir", str(ROOT / ".mypy_cache"), "karpy", *BESIDE, *scripts],
                            cwd=tree, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
