"""A kubeconfig for the local cluster: one cluster, one user, one context, no TLS."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

CONTEXT = "karpy-local"


def write_kubeconfig(path: str | os.PathLike[str], server_url: str) -> Path:
    """Write a kubeconfig pointing at `server_url` (created 0600: it is credentials, even if empty).
    Written beside and renamed into place, so whoever waits for the file never reads half of it."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": CONTEXT, "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT, "user": {"token": "karpy-local"}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}],
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(partial, out)
    return out
