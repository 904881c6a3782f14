"""`karpy demo` as a new user runs it: the whole system, start to finish."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow      # starts karpy server processes


def test_karpy_demo_scales_up_binds_and_scales_down(tmp_path: Path) -> None:
    chart = tmp_path / "demo.png"
    result = subprocess.run([sys.executable, "-m", "karpy.main", "demo", "--replicas", "10", "--plot", str(chart)],
                            capture_output=True, text=True, timeout=170)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    for line in ("The webhook defaulted: kubernetes.io/arch In ['amd64']", "Found ", "provisionable pod(s)",
                 "Computed packing of ", "Launched instance: fake://", "Bound ", "Added TTL to empty node",
                 "Triggering termination after 30s for empty node", "Cordoned node", "Deleted node", "All 10 pods run"):
        assert line in out, line
    # at most two nodes: on defaults a node's true cost (its volume, address and credits) packs the pods densely
    assert re.search(r"10 pod\(s\): 2 on the system node, 8 on [12] node\(s\) karpy launched", out), out[-3000:]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
