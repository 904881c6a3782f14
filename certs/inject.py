"""Put a CA certificate into the caBundle of webhook configurations and CRD conversion hooks.

Reads manifests, returns them with every `clientConfig.caBundle` set to the
base64 of the CA's PEM, so `kubectl apply` gives the API server what it needs
to verify karpy's serving certificate. Other documents pass through unchanged.
"""

from __future__ import annotations

import base64
import copy
from typing import Any, Iterable

WEBHOOK_CONFIGURATION_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def inject_ca_bundle(documents: Iterable[dict[str, Any] | None], ca_pem: bytes) -> list[dict[str, Any]]:
    """Copies of `documents` (None entries dropped) with caBundle set wherever a webhook is described."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in documents:
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        kind = doc.get("kind")
        if kind in WEBHOOK_CONFIGURATION_KINDS:
            for webhook in doc.get("webhooks") or []:
                webhook.setdefault("clientConfig", {})["caBundle"] = bundle
        elif kind == "CustomResourceDefinition":
            conversion = (doc.get("spec") or {}).get("conversion") or {}
            client_config = (conversion.get("webhook") or {}).get("clientConfig")
            if client_config is not None:
                client_config["caBundle"] = bundle
        out.append(doc)
    return out
