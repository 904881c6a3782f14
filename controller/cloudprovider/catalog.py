"""Instance-type catalogs: `fake-400`, InstanceTypeCatalog files, and the built-in ones by name (`aws` is aws/catalog.py).

A catalog turns a Provisioner's kubeletConfiguration into the instance types
its nodes would have: maxPods and podsPerCore cap pods, kubeReserved,
systemReserved and evictionHard set the overhead, as the kubelet would. The
result is cached per kubelet configuration. Pure apart from reading the
shipped data file once.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence, cast

from karpy.apis import labels as wk
from karpy.apis.errors import FieldError, join
from karpy.apis.quantity import Quantity, QuantityError
from karpy.apis.requirements import Requirement, Requirements
from karpy.apis.resources import CPU, MEMORY, PODS, Resources
from karpy.apis.v1alpha5 import KubeletConfiguration
from karpy.controller.cloudprovider.types import Burst, InstanceType, Offering

MI = 1024 * 1024


class CatalogError(ValueError):
    """A catalog that cannot be used; carries every FieldError."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = list(errors)


@dataclasses.dataclass(frozen=True)
class BaseType:
    """An instance type before a kubelet configuration is applied."""

    name: str
    requirements: Requirements
    capacity: Resources
    offerings: tuple[Offering, ...]
    overhead: Callable[[KubeletConfiguration | None, Resources], Resources]
    default_max_pods: int | None = None
    burst: Burst | None = None


class Catalog:
    """A named set of instance types, specialised per kubelet configuration."""

    def __init__(self, name: str, types: Sequence[BaseType]) -> None:
        self.name = name
        self._types = tuple(types)
        self._cache: dict[str, list[InstanceType]] = {}
        self._label_keys: frozenset[str] | None = None

    def known_label_keys(self) -> frozenset[str]:
        """Every label key some instance type defines (pods may select these); read once, the types never change."""
        if self._label_keys is None:
            self._label_keys = frozenset(k for t in self._types for k in t.requirements)
        return self._label_keys

    def instance_types(self, kubelet: KubeletConfiguration | None = None) -> list[InstanceType]:
        key = kubelet.model_dump_json(exclude_none=True) if kubelet is not None else ""
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = [_specialise(t, kubelet) for t in self._types]
        return cached


def _specialise(base: BaseType, kubelet: KubeletConfiguration | None) -> InstanceType:
    capacity = Resources(base.capacity)
    pods = capacity.get(PODS, 0) // 1000 if base.default_max_pods is None else base.default_max_pods
    if kubelet is not None and kubelet.max_pods is not None:
        pods = kubelet.max_pods
    if kubelet is not None and kubelet.pods_per_core:
        pods = min(pods, kubelet.pods_per_core * capacity.get(CPU, 0) // 1000)
    capacity[PODS] = pods * 1000
    requirements = base.requirements
    if wk.AWS_INSTANCE_PODS in requirements:
        requirements = requirements.copy()
        requirements.replace(Requirement.exactly(wk.AWS_INSTANCE_PODS, str(pods)))
    return InstanceType(base.name, requirements, capacity, base.overhead(kubelet, capacity), base.offerings, base.burst)


def eviction_memory(kubelet: KubeletConfiguration | None, capacity: Resources, default_mi: int) -> int:
    """memory.available from evictionHard (absolute or % of memory), in thousandths of bytes."""
    text = ((kubelet.eviction_hard if kubelet else None) or {}).get("memory.available")
    if text is None:
        return default_mi * MI * 1000
    if text.endswith("%"):
        return int(capacity.get(MEMORY, 0) * Fraction(text[:-1]) / 100)   # exact at any size
    return Quantity.parse(text).milli


def reserved(kubelet: KubeletConfiguration | None, field: str) -> Resources | None:
    raw = getattr(kubelet, field, None) if kubelet is not None else None
    return Resources.parse(raw) if raw else None


# --- static catalogs (fake-400, files): overhead as written, unless the kubelet says otherwise ----------

def _static_overhead(written: Resources) -> Callable[[KubeletConfiguration | None, Resources], Resources]:
    def overhead(kubelet: KubeletConfiguration | None, capacity: Resources) -> Resources:
        kube, system = reserved(kubelet, "kube_reserved"), reserved(kubelet, "system_reserved")
        eviction = (kubelet.eviction_hard if kubelet else None) or {}
        if kube is None and system is None and "memory.available" not in eviction:
            return written
        total = (kube or Resources()) + (system or Resources())
        if "memory.available" in eviction:
            total[MEMORY] = total.get(MEMORY, 0) + eviction_memory(kubelet, capacity, 0)
        return total

    return overhead


def fake_catalog(count: int = 400) -> Catalog:
    """Karpenter's scheduling-benchmark types: fake-it-i has i+1 cpu, 2(i+1)Gi, 10(i+1) pods,
    100m/10Mi reserved; spot in test-zone-1/2, on-demand in test-zone-1/2/3; price 0.1/cpu + 0.1/GB."""
    types = []
    for i in range(count):
        cpu, memory_gi, pods = i + 1, 2 * (i + 1), 10 * (i + 1)
        price = round(0.1 * cpu + 0.1 * memory_gi * 2**30 / 1e9, 6)
        offerings = tuple(
            [Offering(z, wk.CAPACITY_TYPE_SPOT, price) for z in ("test-zone-1", "test-zone-2")]
            + [Offering(z, wk.CAPACITY_TYPE_ON_DEMAND, price) for z in ("test-zone-1", "test-zone-2", "test-zone-3")]
        )
        name = f"fake-it-{i}"
        types.append(BaseType(
            name=name,
            requirements=base_requirements(name, {wk.ARCH: wk.ARCH_AMD64, wk.OS: wk.OS_LINUX}, offerings),
            capacity=Resources.of(cpu=str(cpu), memory=f"{memory_gi}Gi", pods=str(pods)),
            offerings=offerings,
            overhead=_static_overhead(Resources.of(cpu="100m", memory="10Mi")),
        ))
    return Catalog(f"fake-{count}", types)


def base_requirements(name: str, labels: Mapping[str, str], offerings: Sequence[Offering],
                      extra: Sequence[Requirement] = ()) -> Requirements:
    reqs = Requirements.from_labels({wk.ARCH: wk.ARCH_AMD64, wk.OS: wk.OS_LINUX, **labels})
    reqs.add(Requirement.exactly(wk.INSTANCE_TYPE, name))
    reqs.add(Requirement.exactly(wk.ZONE, *sorted({o.zone for o in offerings})))
    reqs.add(Requirement.exactly(wk.CAPACITY_TYPE, *sorted({o.capacity_type for o in offerings})))
    for r in extra:
        reqs.replace(r)  # a type's own requirement replaces the default
    return reqs


# --- InstanceTypeCatalog documents ---------------------------------------------------------------------

CATALOG_KIND = "InstanceTypeCatalog"
CATALOG_API_VERSION = "karpy.dev/v1alpha1"


def catalog_from_document(doc: Mapping[str, Any], *, name: str = "file") -> Catalog:
    """A Catalog from an InstanceTypeCatalog document; raises CatalogError naming every bad field."""
    errors: list[FieldError] = [FieldError(str(k), "unknown field") for k in doc
                                if k not in ("apiVersion", "kind", "metadata", "instanceTypes")]
    types: list[BaseType] = []
    items = doc.get("instanceTypes")
    if not isinstance(items, list) or not items:
        raise CatalogError([*errors, FieldError("instanceTypes", "must be a non-empty list")])
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = join("instanceTypes", i)
        parsed = _parse_catalog_entry(item, at, errors)
        if parsed is None:
            continue
        if parsed.name in seen:
            errors.append(FieldError(join(at, "name"), f"duplicate instance type {parsed.name!r}"))
        seen.add(parsed.name)
        types.append(parsed)
    if errors:
        raise CatalogError(errors)
    return Catalog(name, types)


def _parse_catalog_entry(item: Any, at: str, errors: list[FieldError]) -> BaseType | None:
    if not isinstance(item, Mapping):
        errors.append(FieldError(at, "must be a mapping"))
        return None
    count = len(errors)
    unknown = set(item) - {"name", "capacity", "overhead", "labels", "requirements", "offerings", "burstable"}
    errors += [FieldError(join(at, k), "unknown field") for k in sorted(unknown)]
    name = item.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(join(at, "name"), "missing required field"))
    capacity = _resources(item.get("capacity"), join(at, "capacity"), errors, required=True)
    overhead = _resources(item.get("overhead"), join(at, "overhead"), errors, required=False)
    burst = burst_from(item.get("burstable"), join(at, "burstable"), errors)
    labels = item.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        errors.append(FieldError(join(at, "labels"), "must map label keys to string values"))
        labels = {}
    extra: list[Requirement] = []
    for j, r in enumerate(item.get("requirements") or []):
        if isinstance(r, Mapping):
            errors += [FieldError(join(join(join(at, "requirements"), j), str(k)), "unknown field")
                       for k in r if k not in ("key", "operator", "values")]
        try:
            extra.append(Requirement.of(str(r["key"]), str(r["operator"]), [str(v) for v in r.get("values") or []]))
        except (KeyError, TypeError, ValueError) as e:
            errors.append(FieldError(join(join(at, "requirements"), j), f"invalid requirement: {e}"))
    offerings: list[Offering] = []
    raw_offerings = item.get("offerings")
    if not isinstance(raw_offerings, list) or not raw_offerings:
        errors.append(FieldError(join(at, "offerings"), "must be a non-empty list"))
        raw_offerings = []
    for j, o in enumerate(raw_offerings):
        oat = join(join(at, "offerings"), j)
        if isinstance(o, Mapping) and (stray := sorted(set(o) - {"zone", "capacityType", "price", "available"})):
            errors += [FieldError(join(oat, str(k)), "unknown field") for k in stray]
            continue
        try:
            capacity_type = o.get("capacityType", wk.CAPACITY_TYPE_ON_DEMAND)
            if capacity_type not in (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT):
                errors.append(FieldError(join(oat, "capacityType"), f"{capacity_type!r} is not one of on-demand, spot"))
                continue
            price = o["price"]
            if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
                errors.append(FieldError(join(oat, "price"), f"must be a non-negative number (got {price!r})"))
                continue
            if not isinstance(o.get("zone"), str) or not o["zone"]:
                errors.append(FieldError(join(oat, "zone"), "missing required field"))
                continue
            offerings.append(Offering(o["zone"], capacity_type, float(price), bool(o.get("available", True))))
        except (KeyError, AttributeError, TypeError):
            errors.append(FieldError(oat, "must have zone and price"))
    if len(errors) > count or capacity is None:
        return None
    offers = tuple(offerings)
    return BaseType(str(name), base_requirements(str(name), dict(labels), offers, extra), capacity, offers,
                    _static_overhead(overhead or Resources()), burst=burst)


BURST_MODES = ("unlimited", "standard")


def burst_from(raw: Any, at: str, errors: list[FieldError]) -> Burst | None:
    """A `burstable` block ({baseline, mode, creditPricePerVCPUHour}) as a Burst; None when absent or wrong
    (each wrong field appended to `errors`)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        errors.append(FieldError(at, "must be a mapping with baseline, mode and creditPricePerVCPUHour"))
        return None
    count = len(errors)
    errors += [FieldError(join(at, k), "unknown field") for k in sorted(set(raw) - {"baseline", "mode", "creditPricePerVCPUHour"})]
    baseline, mode, price = raw.get("baseline"), raw.get("mode", "unlimited"), raw.get("creditPricePerVCPUHour", 0.0)
    if isinstance(baseline, bool) or not isinstance(baseline, (int, float)) or not 0 <= baseline <= 1:
        errors.append(FieldError(join(at, "baseline"), f"must be a share of each vCPU from 0 to 1 (got {baseline!r})"))
    if mode not in BURST_MODES:
        errors.append(FieldError(join(at, "mode"), f"{mode!r} is not one of {', '.join(BURST_MODES)}"))
    if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
        errors.append(FieldError(join(at, "creditPricePerVCPUHour"), f"must be a non-negative number (got {price!r})"))
    if len(errors) > count:
        return None
    return Burst(float(cast(float, baseline)), mode == "unlimited", float(price))


def _resources(raw: Any, at: str, errors: list[FieldError], *, required: bool) -> Resources | None:
    if raw is None:
        if required:
            errors.append(FieldError(at, "missing required field"))
        return None
    if not isinstance(raw, Mapping):
        errors.append(FieldError(at, "must map resource names to quantities"))
        return None
    out = Resources()
    for name, text in raw.items():
        try:
            out[str(name)] = Quantity.parse(text).milli
        except QuantityError as e:
            errors.append(FieldError(join(at, str(name)), str(e)))
    return out


def _aws() -> Catalog:
    from karpy.controller.cloudprovider.aws.catalog import aws_catalog  # it builds on this module

    return aws_catalog()


BUILT_IN: dict[str, Callable[[], Catalog]] = {"aws": _aws, "fake-400": fake_catalog}
_loaded: dict[str, Catalog] = {}


def built_in(name: str) -> Catalog:
    """A built-in catalog by name (loaded once per process); KeyError when unknown."""
    if name not in _loaded:
        _loaded[name] = BUILT_IN[name]()
    return _loaded[name]
