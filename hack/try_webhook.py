"""Try the admission webhook as `kubectl apply` would reach it.

Generates certificates, starts `karpy webhook` over TLS on a free loopback
port, sends it the Provisioner of DESIGN.md's demo (defaulted, then
validated) and a broken one, prints what the API server would be told, and
stops the server.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests

DEMO = {
    "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"},
    "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
             "limits": {"resources": {"cpu": 1000}}, "ttlSecondsAfterEmpty": 30},
}
BROKEN = {
    "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "broken"},
    "spec": {"requirements": [{"key": "kubernetes.io/custom", "operator": "Within", "values": ["a"]}],
             "ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": True},
             "kubeletConfiguration": {"evictionHard": {"memory.available": "150%"}}},
}


def review(obj: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "object": obj}}


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="karpy-try-"))
    subprocess.run(["karpy", "certs", "generate", "--out-dir", str(work)], check=True, stdout=subprocess.DEVNULL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["karpy", "webhook", "--port", str(port), "--cert-dir", str(work)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base, ca = f"https://127.0.0.1:{port}", str(work / "ca.crt")
    try:
        for _ in range(100):
            try:
                requests.get(base + "/healthz", verify=ca, timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        print(f"karpy webhook is serving on {base} (TLS verified against {ca})\n")
        answer = requests.post(base + "/mutate-karpenter-sh-v1alpha5-provisioner", json=review(DEMO), verify=ca, timeout=5).json()
        patch = json.loads(base64.b64decode(answer["response"].get("patch", "W10=")))
        print("mutate  Provisioner/default:", "allowed" if answer["response"]["allowed"] else "denied")
        for op in patch:
            print("   ", json.dumps(op))
        for obj in (DEMO, BROKEN):
            answer = requests.post(base + "/validate-karpenter-sh-v1alpha5-provisioner", json=review(obj), verify=ca, timeout=5).json()
            response = answer["response"]
            name = obj["metadata"]["name"]
            print(f"validate Provisioner/{name}:", "allowed" if response["allowed"] else "denied")
            for line in response.get("status", {}).get("message", "").splitlines():
                print("   ", line[:160])
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
