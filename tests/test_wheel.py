"""The image's install, done here without a container engine: the Dockerfile's build context (minus what
.dockerignore drops) is built into a wheel with `pip wheel --no-deps`, installed into a fresh virtualenv,
and `karpy` runs from outside the checkout. The virtualenv sees the test runner's site-packages for the
dependencies (so no network is needed), never the checkout."""

from __future__ import annotations

import fnmatch
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow      # builds the wheel and installs it into a virtualenv

ROOT = Path(__file__).resolve().parent.parent
PROVISIONER = """apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec: {}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: "1"}}}]
"""
LENT = "lent-site-packages.pth"     # the test's own path file in the virtualenv (see `installed`)


def build_context(dest: Path) -> Path:
    """Copy the repository as `docker build .` sends it: its files (git-ignored ones aside) not matched by
    .dockerignore."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        parts = Path(name).parts
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatch(p, pat.removeprefix("**/")) or fnmatch.fnmatch(p, pat) for p in prefixes for pat in patterns):
            continue
        if not (ROOT / name).exists():       # deleted in the work tree, not yet committed
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the virtualenv, the wheel) after the Dockerfile's two stages (the dependencies come from the
    system's site-packages, where the Dockerfile lets pip fetch them)."""
    tmp = tmp_path_factory.mktemp("image")
    context = build_context(tmp / "src")
    assert not (context / "tests").exists() and (context / "setup.py").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the Dockerfile's first stage, to the letter (pip fetches setuptools and wheel for the isolated build)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", "--wheel-dir",
                            str(tmp / "wheels"), "."], cwd=context, env=env, capture_output=True, text=True)
    if built.returncode != 0:
        unreachable = ("No matching distribution", "Could not find a version", "NewConnectionError", "Temporary failure")
        if any(s in built.stdout + built.stderr for s in unreachable):
            pytest.skip("the isolated build needs setuptools and wheel from a package index, and none answers")
        raise AssertionError(built.stdout + built.stderr)
    (wheel,) = (tmp / "wheels").glob("karpy-*.whl")
    venv = tmp / "venv"
    # no pip inside (the runner's pip installs into it), so site-packages starts empty but for one path file
    # that lends it the runner's site-packages: `--system-site-packages` would lend the base interpreter's,
    # which holds nothing when the tests run in a virtualenv
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env)
    (site_dir,) = venv.glob("lib/python*/site-packages")
    (site_dir / LENT).write_text("\n".join(site.getsitepackages()) + "\n")
    # the second stage's install, extras and all; --no-index: every dependency (within its bounds) must
    # already be satisfied by the runner's site-packages, so nothing is fetched
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                                "--quiet", "--no-index", f"karpy[aws] @ {wheel.as_uri()}"], env=env, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv, wheel


def test_the_wheel_holds_the_karpy_package_alone(installed: tuple[Path, Path]) -> None:
    _, wheel = installed
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert top == {"karpy", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    names = set(zipfile.ZipFile(wheel).namelist())
    for part in ("apis", "certs", "controller", "webhook", "extender", "simulator", "serving", "kubeclient"):
        assert f"karpy/{part}/__init__.py" in names, part
    for crd in ("karpenter.sh_nodepools.yaml", "karpenter.sh_nodeclaims.yaml", "karpenter.k8s.aws_ec2nodeclasses.yaml"):
        assert f"karpy/apis/v1/{crd}" in names, crd         # Karpenter v1's published CRDs, read by karpy.apis.crds


def test_site_packages_gains_karpy_alone(installed: tuple[Path, Path]) -> None:
    venv, _ = installed
    (site_dir,) = venv.glob("lib/python*/site-packages")
    assert {p.name for p in site_dir.iterdir()} - {LENT} == {"karpy", "karpy-0.1.0.dist-info"}


def test_the_entrypoint_runs_from_the_installed_package_outside_the_checkout(installed: tuple[Path, Path], tmp_path: Path) -> None:
    venv, _ = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    karpy = str(venv / "bin" / "karpy")
    help_text = subprocess.run([karpy, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert "controller" in help_text and "webhook" in help_text
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import karpy.controller, karpy.webhook.app; "
                            "print(karpy.controller.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           check=True).stdout
    assert where.startswith(str(venv)), where
    (tmp_path / "in.yaml").write_text(PROVISIONER)          # package data (the catalogs) came along
    plan = subprocess.run([karpy, "plan", "-f", "in.yaml", "--catalog", "fake-400", "-o", "json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert plan.returncode == 0 and '"nodes"' in plan.stdout, plan.stderr


def test_a_command_missing_its_extra_names_the_extra() -> None:
    hide = "import sys; sys.modules['boto3'] = None; from karpy.main import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", hide, "controller", "--cloud-provider", "aws",
                             "--cluster-endpoint", "https://example.invalid"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--cloud-provider aws needs boto3: pip install 'karpy[aws]'" in result.stderr
