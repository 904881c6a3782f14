"""The import contracts in pyproject.toml hold for the installed layout.

The repository keeps each part in a top-level folder that installs as
karpy.<folder> (setup.py); import-linter reads one package directory, so the
check runs over a tree of links shaped as the installed package.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# setup.py holds the one list of folders that install under karpy; read, not run (running it builds)
FOLDERS = next(ast.literal_eval(n.value) for n in ast.parse((ROOT / "setup.py").read_text()).body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "FOLDERS")


def installed_layout(into: Path) -> Path:
    """Links shaped as site-packages/karpy: karpy/*.py and its packages, plus one link per mapped folder. Returns the tree's root."""
    package = into / "karpy"
    package.mkdir()
    for source in (ROOT / "karpy").iterdir():
        if source.suffix == ".py" or (source / "__init__.py").is_file():
            (package / source.name).symlink_to(source, target_is_directory=source.is_dir())
    for folder in FOLDERS:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def test_import_contracts_are_kept(tmp_path: Path) -> None:
    tree = installed_layout(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    lint = shutil.which("lint-imports") or "lint-imports"
    result = subprocess.run([lint, "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
