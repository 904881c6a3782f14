"""Admission webhooks: the mutating, then the validating, webhook configurations, called over HTTPS.

For each write the API server sends an AdmissionReview to every webhook whose
rules match (group, version, resource, operation), verifying the server's
certificate with the configuration's caBundle, within its timeoutSeconds.
A mutating webhook's JSONPatch is applied; a denial stops the write with the
webhook's status; an unreachable webhook fails the write only under
failurePolicy Fail.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable

import jsonpatch

from karpy.simulator.resources import ResourceType
from karpy.simulator.store import StoreError

WebhookConfigs = Callable[[str], list[dict[str, Any]]]   # resource key -> configuration objects


class Denied(StoreError):
    status, reason = 400, "BadRequest"

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.reason = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}.get(status, "BadRequest")


class WebhookFailed(StoreError):
    status, reason = 500, "InternalError"


def _matches(rule: dict[str, Any], t: ResourceType, operation: str, subresource: str | None) -> bool:
    def has(values: list[str] | None, value: str) -> bool:
        return bool(values and ("*" in values or value in values))

    resource = f"{t.plural}/{subresource}" if subresource else t.plural
    return (has(rule.get("apiGroups"), t.group) and has(rule.get("apiVersions"), t.version)
            and has(rule.get("operations"), operation) and has(rule.get("resources"), resource))


def _call(webhook: dict[str, Any], review: dict[str, Any]) -> dict[str, Any]:
    client = webhook.get("clientConfig") or {}
    url = client.get("url")
    if not url:
        service = client.get("service") or {}
        raise WebhookFailed(f"webhook {webhook.get('name')}: service {service.get('namespace')}/{service.get('name')} "
                            "cannot be reached from the local cluster; use clientConfig.url")
    context = ssl.create_default_context()
    if client.get("caBundle"):
        context = ssl.create_default_context(cadata=base64.b64decode(client["caBundle"]).decode())
    request = urllib.request.Request(url, data=json.dumps(review).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    timeout = float(webhook.get("timeoutSeconds") or 10)
    try:
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:  # https only
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise WebhookFailed(f'Internal error occurred: failed calling webhook "{webhook.get("name")}": '
                            f"failed to call webhook: Post \"{url}\": {getattr(e, 'reason', e)}") from None


def admit(*, configs: WebhookConfigs, t: ResourceType, operation: str, obj: dict[str, Any] | None,
          old: dict[str, Any] | None, namespace: str, name: str, subresource: str | None = None,
          dry_run: bool = False) -> dict[str, Any] | None:
    """Run mutating then validating webhooks for a write; returns the object to store.
    Raises Denied or WebhookFailed."""
    called = [(kind.startswith("mutating"), webhook)
              for kind in ("mutatingwebhookconfigurations.admissionregistration.k8s.io",
                           "validatingwebhookconfigurations.admissionregistration.k8s.io")
              for config in configs(kind) for webhook in config.get("webhooks") or []
              if any(_matches(rule, t, operation, subresource) for rule in webhook.get("rules") or [])]
    if not called:
        return obj                  # no webhook is asked: the object as sent (most writes; no copy of it)
    current = copy.deepcopy(obj)
    for mutating, webhook in called:
        review = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": t.group, "version": t.version, "kind": t.kind},
                "resource": {"group": t.group, "version": t.version, "resource": t.plural},
                "requestKind": {"group": t.group, "version": t.version, "kind": t.kind},
                "requestResource": {"group": t.group, "version": t.version, "resource": t.plural},
                **({"subResource": subresource} if subresource else {}),
                "name": name, "namespace": namespace, "operation": operation,
                "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
                "object": current, "oldObject": old, "dryRun": dry_run,
                "options": {"kind": f"{operation.capitalize()}Options", "apiVersion": "meta.k8s.io/v1"},
            },
        }
        try:
            answer = _call(webhook, review)
        except WebhookFailed:
            if webhook.get("failurePolicy", "Fail") == "Ignore":
                continue
            raise
        response = answer.get("response") or {}
        if not response.get("allowed"):
            status = response.get("status") or {}
            raise Denied(f'admission webhook "{webhook.get("name")}" denied the request: {status.get("message", "")}',
                         int(status.get("code") or 400))
        if mutating and response.get("patch") and current is not None:
            try:
                ops = json.loads(base64.b64decode(response["patch"]))
                current = jsonpatch.apply_patch(current, ops)
            except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise WebhookFailed(f'webhook "{webhook.get("name")}" returned a patch that does not apply: {e}') from None
    return current
