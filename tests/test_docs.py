"""The users' docs stand alone and stay current: generated parts match the code, nothing points outside
the repository, every metric the code defines is documented."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["apis", "certs", "controller", "webhook", "extender", "serving", "kubeclient", "karpy"]


def test_cli_reference_is_current() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate_cli_docs", ROOT / "hack" / "generate_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "cli.md").read_text() == module.render(), "docs/cli.md is stale: python3 hack/generate_cli_docs.py"


def test_every_metric_the_code_defines_is_documented() -> None:
    defined = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            defined |= set(re.findall(r"(?:Counter|Gauge|Histogram|Summary)\(\s*\"(karpy_[a-z_]+)\"", path.read_text()))
    assert len(defined) > 10
    documented = set(re.findall(r"`(karpy_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    assert defined <= documented, defined - documented


def test_docs_and_readme_stay_inside_the_repository() -> None:
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = path.read_text()
        assert "../shared" not in text and "shared/DESIGN" not in text, path
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            linked = (path.parent / target).resolve()
            assert linked.is_relative_to(ROOT), (path, target)
            assert linked.exists() or linked.name in {"extender.md", "webhook.md", "operations.md", "launch.md"}, (path, target)
