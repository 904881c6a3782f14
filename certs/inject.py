"""Put a CA certificate into the caBundle of webhook configurations and CRD conversion hooks.

Reads manifests, returns them with every `clientConfig.caBundle` set to the
base64 of the CA's PEM, so `kubectl apply` gives the API server what it needs
to verify karpy's serving certificate. Other documents pass through unchanged.

With a `url`, each webhook is pointed at that address instead of its
Service (`clientConfig.url` = url + the Service's path): the form a server
running outside the cluster needs, as on the local cluster, where no Service
routes to a pod. The Deployment and Service are then left out, since nothing
in the cluster serves them.
"""

from __future__ import annotations

import base64
import copy
from typing import Any, Iterable

WEBHOOK_CONFIGURATION_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def inject_ca_bundle(documents: Iterable[dict[str, Any] | None], ca_pem: bytes, *,
                     url: str | None = None) -> list[dict[str, Any]]:
    """Copies of `documents` (None entries dropped) with caBundle set wherever a webhook is described;
    with `url` (https://host:port), webhook configurations only, each reaching url + its path."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in documents:
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        kind = doc.get("kind")
        if url is not None and kind not in WEBHOOK_CONFIGURATION_KINDS:
            continue
        if kind in WEBHOOK_CONFIGURATION_KINDS:
            for webhook in doc.get("webhooks") or []:
                client_config = webhook.setdefault("clientConfig", {})
                if url is not None:
                    path = (client_config.pop("service", None) or {}).get("path") or ""
                    client_config.pop("url", None)
                    client_config["url"] = url.rstrip("/") + path
                client_config["caBundle"] = bundle
        elif kind == "CustomResourceDefinition":
            conversion = (doc.get("spec") or {}).get("conversion") or {}
            client_config = (conversion.get("webhook") or {}).get("clientConfig")
            if client_config is not None:
                client_config["caBundle"] = bundle
        out.append(doc)
    return out
