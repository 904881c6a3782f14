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
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# setup.py holds the one list of folders that install under karpy; read, not run (running it builds)
FOLDERS = next(ast.literal_eval(n.value) for n in ast.parse((ROOT / "setup.py").read_text()).body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "FOLDERS")


def installed_layout(into: Path) -> Path:
    """Links shaped as site-packages/karpy: karpy/*.py and its packages, plus one link per mapped folder. Returns the tree's root."""
    package = into / "karpy"
    package.mkdir(parents=True)
    for source in (ROOT / "karpy").iterdir():
        if source.suffix == ".py" or (source / "__init__.py").is_file():
            (package / source.name).symlink_to(source, target_is_directory=source.is_dir())
    for folder in FOLDERS:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # beside this interpreter first: a venv's scripts are there whether or not the venv is activated
    lint = shutil.which("lint-imports", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert lint is not None, "lint-imports (import-linter) is not installed"
    return subprocess.run([lint, "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow      # runs import-linter
def test_import_contracts_are_kept(tmp_path: Path) -> None:
    result = lint_imports(installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# one import each contract forbids, in the module that must not make it
VIOLATIONS = {
    "apis is pure": ("apis/labels.py", "import karpy.controller.cloudprovider.types"),
    "operator and cluster meet only over HTTP": ("simulator/store.py", "import karpy.controller.clock"),
    "layers: apis, cloud providers, scheduling, controllers, commands": (
        "controller/cloudprovider/fake.py", "import karpy.controller.provisioning.scheduling.scheduler"),
    "AWS code only under cloudprovider/aws: nothing else imports boto3": ("controller/operator.py", "import boto3"),
    "the plan's input parsing and rendering live beside the command line": (
        "extender/wire.py", "import karpy.plan.inputs"),
}


def test_every_contract_is_checked_by_an_import_that_breaks_it() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert sorted(c["name"] for c in contracts) == sorted(VIOLATIONS)


@pytest.mark.parametrize("contract", sorted(VIOLATIONS))
@pytest.mark.slow      # runs import-linter
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, contract: str) -> None:
    path, line = VIOLATIONS[contract]
    tree = tmp_path / "copy"
    shutil.copytree(installed_layout(tmp_path / "links"), tree, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tree / "karpy" / path, "a") as module:
        module.write(f"\n{line}\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    broken = [row for row in result.stdout.splitlines() if "BROKEN" in row]
    assert any(row.startswith(contract) for row in broken), result.stdout
