"""The command line's own manners: `--version`, the command list when none is named, and a wrong flag answered
with the usage of the command it was given to. Usage errors exit 2, as argparse's do; `karpy plan` run as a command
ends with its code once all it wrote is out."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from karpy.main import main
from tests.builders import pod, provisioner


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(stopped.value.code or 0), out, err


def test_version_prints_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"karpy {importlib.metadata.version('karpy')}\n")


@pytest.mark.parametrize(("argv", "listed"), [
    pytest.param([], ["plan", "controller", "extender", "webhook", "sim", "demo", "certs"], id="karpy"),
    pytest.param(["certs"], ["generate", "inject-ca"], id="karpy-certs"),
])
def test_naming_no_command_lists_the_commands(capsys: pytest.CaptureFixture[str], argv: list[str], listed: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    commands = {line.split()[0] for line in err.splitlines() if line.startswith("    ") and not line.startswith("     ")}
    assert set(listed) <= commands, err
    assert err.rstrip().splitlines()[-1].endswith("error: the following arguments are required: "
                                                  + ("ACTION" if argv else "COMMAND"))


@pytest.mark.parametrize("argv", [
    pytest.param(["controller", "--bogus"], id="controller"),
    pytest.param(["extender", "--port", "0", "--bogus"], id="extender"),
    pytest.param(["certs", "inject-ca", "--ca", "x", "-f", "y", "--bogus"], id="certs-inject-ca"),
])
def test_a_wrong_flag_shows_the_usage_of_its_own_command(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capsys, *argv)
    command = "karpy " + " ".join(a for a in argv if not a.startswith("-") and a not in ("0", "x", "y"))
    assert code == 2
    assert err.startswith(f"usage: {command} [-h]"), err
    assert err.rstrip().endswith(f"{command}: error: unrecognized arguments: --bogus"), err


def test_plan_run_as_a_command_ends_with_its_code_after_all_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(yaml.safe_dump_all([provisioner("default"), *[pod(f"p-{i}", cpu="1") for i in range(300)]]))
    done = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(path), "-o", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["scheduled"] == 300      # every byte out before the process ended
    missing = subprocess.run([sys.executable, "-m", "karpy.main", "plan", "-f", str(tmp_path / "none.yaml")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "none.yaml" in missing.stderr
