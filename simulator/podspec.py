"""What the API server does to a Pod's containers' resources: defaults, validation, QoS class.

Requests default from limits; every quantity must parse and not be negative,
and a request may not exceed its limit (each error names its field, as
`kubectl` shows them); `status.qosClass` is Guaranteed, Burstable or
BestEffort by Kubernetes' rules. Pure.
"""

from __future__ import annotations

from typing import Any

from karpy.apis.quantity import Quantity, QuantityError

Obj = dict[str, Any]
CONTAINER_FIELDS = ("initContainers", "containers")
QOS_RESOURCES = ("cpu", "memory")


def _containers(spec: Obj, at: str = "spec") -> list[tuple[str, Obj]]:
    return [(f"{at}.{field}[{i}]", c) for field in CONTAINER_FIELDS for i, c in enumerate(spec.get(field) or [])
            if isinstance(c, dict)]


def default_requests(spec: Obj) -> None:
    """A limit without a request makes the request equal to the limit."""
    for _, container in _containers(spec):
        resources = container.get("resources")
        if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
            continue
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, value in resources["limits"].items():
                requests.setdefault(name, value)


def resource_errors(spec: Obj, at: str = "spec") -> list[tuple[str, str]]:
    """(field, message) for every quantity that does not parse, is negative, or requests more than its limit;
    `at` is where the pod spec is (`spec.template.spec` in a workload)."""
    errors: list[tuple[str, str]] = []
    for where, container in _containers(spec, at):
        resources = container.get("resources") or {}
        if not isinstance(resources, dict):
            errors.append((f"{where}.resources", "Invalid value: must be an object"))
            continue
        parsed: dict[str, dict[str, Quantity]] = {}
        for kind in ("requests", "limits"):
            values = resources.get(kind) or {}
            if not isinstance(values, dict):
                errors.append((f"{where}.resources.{kind}", "Invalid value: must be a map of resource names to quantities"))
                continue
            for name, value in values.items():
                field = f"{where}.resources.{kind}[{name}]"
                try:
                    quantity = Quantity.parse(value)
                except (QuantityError, TypeError, ValueError):
                    errors.append((field, f"Invalid value: {value!r}: quantities must match the regular expression "
                                          "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
                    continue
                if quantity < 0:
                    errors.append((field, f"Invalid value: {value!r}: must be greater than or equal to 0"))
                    continue
                parsed.setdefault(kind, {})[name] = quantity
        for name, request in (parsed.get("requests") or {}).items():
            limit = (parsed.get("limits") or {}).get(name)
            if limit is not None and request > limit:
                errors.append((f"{where}.resources.requests[{name}]",
                               f"Invalid value: {resources['requests'][name]!r}: must be less than or equal to {name} limit "
                               f"of {resources['limits'][name]}"))
    return errors


def qos_class(spec: Obj) -> str:
    """Guaranteed when every container limits cpu and memory and requests exactly that; BestEffort when none
    requests or limits either; Burstable otherwise."""
    containers = [c for _, c in _containers(spec)]
    any_set, guaranteed = False, bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if any(r in requests or r in limits for r in QOS_RESOURCES):
            any_set = True
        for r in QOS_RESOURCES:
            if r not in limits or Quantity.parse(requests.get(r, limits[r])) != Quantity.parse(limits[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
