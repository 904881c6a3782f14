"""Run `karpy plan` as a user would: documents written to a file, the CLI's output read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from karpy.main import main


class PlanRun:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.out)

    def node_of(self, pod_key: str) -> dict[str, Any]:
        for n in self.json["nodes"]:
            if pod_key in n["pods"]:
                return n
        raise AssertionError(f"{pod_key} is on no new node: {self.json['unschedulable']}")


Plan = Callable[..., PlanRun]


@pytest.fixture
def karpy_plan_here(capsys: pytest.CaptureFixture[str]) -> Callable[..., PlanRun]:
    """`karpy plan ARGS` in this process: the command's own code path, without a new interpreter's start-up."""
    def run(*args: str) -> PlanRun:
        capsys.readouterr()
        try:
            code = main(["plan", *args])
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return PlanRun(code, captured.out, captured.err)
    return run


@pytest.fixture
def plan(tmp_path: Path, karpy_plan_here: Callable[..., PlanRun]) -> Plan:
    counter = [0]

    def run(*documents: dict[str, Any], catalog: str | None = None, output: str = "json", args: tuple[str, ...] = ()) -> PlanRun:
        counter[0] += 1
        path = tmp_path / f"input-{counter[0]}.yaml"
        path.write_text(yaml.safe_dump_all(list(documents), sort_keys=False))
        argv = ["-f", str(path), "-o", output, *args]
        if catalog:
            argv += ["--catalog", catalog]
        return karpy_plan_here(*argv)

    return run
