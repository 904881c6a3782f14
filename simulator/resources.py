"""The resource types the local cluster serves: built-in ones and those CRDs add.

A ResourceType names a resource the way discovery does (group, version,
kind, plural, scope, short names, subresources). The registry answers
"which type is served at this group/version/plural" and builds the
discovery documents kubectl reads.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Iterable

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclasses.dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()            # "status", "binding", "eviction", "scale"
    categories: tuple[str, ...] = ()
    schema: dict[str, Any] | None = None          # a CRD's openAPIV3Schema
    printer_columns: tuple[dict[str, Any], ...] = ()
    scale: dict[str, Any] | None = None           # a CRD's scale subresource: specReplicasPath, statusReplicasPath, ...

    @property
    def key(self) -> str:
        """The store's name for this resource (`pods`, `deployments.apps`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def discovery(self) -> list[dict[str, Any]]:
        out = [{
            "name": self.plural, "singularName": self.singular, "namespaced": self.namespaced, "kind": self.kind,
            "verbs": VERBS, **({"shortNames": list(self.short_names)} if self.short_names else {}),
            **({"categories": list(self.categories)} if self.categories else {}),
        }]
        for sub in self.subresources:
            kind = {"binding": "Binding", "eviction": "Eviction", "scale": "Scale"}.get(sub, self.kind)
            group = "policy" if sub == "eviction" else ("autoscaling" if sub == "scale" else None)
            verbs = ["create"] if sub in ("binding", "eviction") else ["get", "patch", "update"]
            entry = {"name": f"{self.plural}/{sub}", "singularName": "", "namespaced": self.namespaced, "kind": kind, "verbs": verbs}
            if group:
                entry.update(group=group, version="v1")
            out.append(entry)
        return out


def _t(group: str, version: str, kind: str, plural: str, namespaced: bool = True, short: Iterable[str] = (),
       subresources: Iterable[str] = (), categories: Iterable[str] = ()) -> ResourceType:
    return ResourceType(group, version, kind, plural, namespaced, tuple(short), tuple(subresources), tuple(categories))


BUILT_IN: tuple[ResourceType, ...] = (
    _t("", "v1", "Namespace", "namespaces", False, ["ns"], ["status"]),
    _t("", "v1", "Pod", "pods", True, ["po"], ["status", "binding", "eviction"], ["all"]),
    _t("", "v1", "Node", "nodes", False, ["no"], ["status"]),
    _t("", "v1", "Event", "events", True, ["ev"]),
    _t("", "v1", "ConfigMap", "configmaps", True, ["cm"]),
    _t("", "v1", "Secret", "secrets", True),
    _t("", "v1", "Service", "services", True, ["svc"], ["status"], ["all"]),
    _t("", "v1", "ServiceAccount", "serviceaccounts", True, ["sa"]),
    _t("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ["pvc"], ["status"]),
    _t("", "v1", "PersistentVolume", "persistentvolumes", False, ["pv"], ["status"]),
    _t("", "v1", "Endpoints", "endpoints", True, ["ep"]),
    _t("coordination.k8s.io", "v1", "Lease", "leases", True),
    _t("apps", "v1", "Deployment", "deployments", True, ["deploy"], ["status", "scale"], ["all"]),
    _t("apps", "v1", "ReplicaSet", "replicasets", True, ["rs"], ["status", "scale"], ["all"]),
    _t("apps", "v1", "DaemonSet", "daemonsets", True, ["ds"], ["status"], ["all"]),
    _t("apps", "v1", "StatefulSet", "statefulsets", True, ["sts"], ["status", "scale"], ["all"]),
    _t("batch", "v1", "Job", "jobs", True, [], ["status"], ["all"]),
    _t("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ["pdb"], ["status"]),
    _t("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False, ["crd", "crds"], ["status"]),
    _t("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False),
    _t("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _t("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    _t("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    _t("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ["pc"]),
)


class Registry:
    """Which resource types are served, by group/version/plural; CRDs come and go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for t in BUILT_IN:
            self._types[(t.group, t.version, t.plural)] = t

    def add(self, t: ResourceType) -> None:
        with self._lock:
            self._types[(t.group, t.version, t.plural)] = t

    def remove_group_resource(self, group: str, plural: str) -> None:
        with self._lock:
            for key in [k for k in self._types if k[0] == group and k[2] == plural]:
                del self._types[key]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            return self._types.get((group, version, plural))

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        with self._lock:
            return next((t for t in self._types.values() if t.group == group and t.kind == kind), None)

    def all(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def group_versions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in self.all():
            versions = out.setdefault(t.group, [])
            if t.version not in versions:
                versions.append(t.version)
        return out

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        types = [t for t in self.all() if t.group == group and t.version == version]
        if not types:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": types[0].group_version,
                "resources": [entry for t in sorted(types, key=lambda t: t.plural) for entry in t.discovery()]}

    def api_groups(self) -> dict[str, Any]:
        groups = []
        for group, versions in sorted(self.group_versions().items()):
            if not group:
                continue
            entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
