"""Write manifests/crds/*.yaml from the pydantic models in apis/ (see apis/crds.py).

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
    out = ROOT / "manifests" / "crds"
    out.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (out / name).write_text(text)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
