"""Write manifests/crds/*.yaml (and the chart's copy, manifests/chart/crds/) from apis/ (see apis/crds.py):
generated from the pydantic models for v1alpha5, Karpenter's published CRDs for v1.

Run `python3 hack/generate_crds.py` after changing a model; a test checks the
committed files equal what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from karpy.apis.crds import generate


def main() -> int:
    for out in (ROOT / "manifests" / "crds", ROOT / "manifests" / "chart" / "crds"):
        out.mkdir(parents=True, exist_ok=True)
        for name, text in generate().items():
            (out / name).write_text(text)
            print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
