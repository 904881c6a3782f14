"""The API server's semantics, apart from HTTP: what create, update, patch, delete and the
subresources (status, binding, eviction, scale) do to the store.

Every write passes admission (webhooks), CRD schemas and the type's own
rules; CRDs register and unregister resource types; an owner's dependents
(ownerReferences) are deleted once the owner is really gone, not while its
finalizers hold it (background propagation: a Node held by karpy's
termination finalizer keeps its mirror pods until it goes); with
propagationPolicy Orphan they lose their reference to it instead.
"""

from __future__ import annotations

import builtins
import copy
import threading
from typing import Any

from karpy.kubeclient.raw import now_rfc3339
from karpy.simulator import admission, cel, disruption, podspec, schema, tables
from karpy.simulator.patch import apply_patch
from karpy.simulator.query import Predicate
from karpy.simulator.resources import Registry, ResourceType
from karpy.simulator.store import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Invalid,
    NotFound,
    Obj,
    Store,
    StoreError,
    TooManyRequests,
)

WORKLOAD_KINDS = {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"}
OWNER_KINDS = {"Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "Job", "Namespace", "CustomResourceDefinition",
               "Node", "Pod"}


def _workload_defaults(kind: str, spec: Obj) -> None:
    """The apps/v1 and batch/v1 defaults kubectl reads (`rollout status` needs a RollingUpdate strategy)."""
    if not isinstance(spec, dict):
        return
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        spec.setdefault("replicas", 1)
    if kind == "Deployment":
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            if isinstance(rolling, dict):
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif kind == "StatefulSet":
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {"partition": 0})
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
    elif kind == "DaemonSet":
        strategy = spec.setdefault("updateStrategy", {})
        if isinstance(strategy, dict) and strategy.setdefault("type", "RollingUpdate") == "RollingUpdate":
            strategy.setdefault("rollingUpdate", {"maxUnavailable": 1, "maxSurge": 0})
        spec.setdefault("revisionHistoryLimit", 10)
    elif kind == "Job":
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1                   # neither given: one pod, once; parallelism alone: a work queue
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)


class API:
    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self._evicting = threading.Lock()

    # --- helpers -------------------------------------------------------------------------
    def _webhook_configs(self, key: str) -> list[Obj]:
        return self.store.list(key)[0]

    def _namespace_exists(self, t: ResourceType, namespace: str) -> None:
        if t.namespaced and self.store.peek("namespaces", "", namespace) is None:
            raise NotFound(f'namespaces "{namespace}" not found', details={"name": namespace, "kind": "namespaces"})

    def _check(self, t: ResourceType, obj: Obj, *, strict: bool, old: Obj | None = None) -> Obj:
        """Apply the CRD schema (prune, default, validate, and its CEL rules against `old` on update) or the
        built-in type's minimal rules."""
        name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName", "")
        if t.schema is not None:
            admitted, errors = schema.admit(obj, t.schema)
            if strict:
                unknown = _unknown_fields(obj, admitted)
                if unknown:
                    raise BadRequest(f'{t.kind} in version "{t.version}" cannot be handled as a {t.kind}: strict decoding error: '
                                     + ", ".join(f'unknown field "{u}"' for u in unknown))
            if not errors:
                errors = [v.message for v in cel.violations(admitted, old, t.schema)]
            if errors:
                # as the API server: the status message lists every error; each cause names its field apart
                listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
                causes = [{"reason": _cause_reason(e), "message": e.split(": ", 1)[-1], "field": e.split(":", 1)[0]}
                          for e in errors]
                raise Invalid(f'{t.kind}.{t.group} "{name}" is invalid: ' + listed,
                              details={"name": name, "group": t.group, "kind": t.kind, "causes": causes})
            obj = admitted
        if t.kind == "Pod" and not (obj.get("spec") or {}).get("containers"):
            raise Invalid(f'Pod "{name}" is invalid: spec.containers: Required value', details={"name": name, "kind": "pods"})
        if t.kind == "Pod" and (located := podspec.resource_errors(obj["spec"])):
            raise Invalid(f'Pod "{name}" is invalid: ' + ", ".join(f"{field}: {message}" for field, message in located),
                          details={"name": name, "kind": "pods",
                                   "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in located]})
        template = ((obj.get("spec") or {}).get("template") or {}) if t.kind in WORKLOAD_KINDS else {}
        if isinstance(template, dict) and isinstance(template.get("spec"), dict) and \
                (located := podspec.resource_errors(template["spec"], "spec.template.spec")):
            raise Invalid(f'{t.kind}.{t.group} "{name}" is invalid: ' + ", ".join(f"{field}: {message}" for field, message in located),
                          details={"name": name, "group": t.group, "kind": t.plural,
                                   "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in located]})
        if t.kind == "Pod" and isinstance(obj.get("status"), dict) and "qosClass" not in obj["status"]:
            obj["status"]["qosClass"] = podspec.qos_class(obj["spec"])
        return obj

    def _defaults(self, t: ResourceType, obj: Obj) -> None:
        obj["apiVersion"], obj["kind"] = t.group_version, t.kind
        if t.kind == "Pod":
            spec = obj.setdefault("spec", {})
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("priority", 0)
            if isinstance(spec, dict):
                podspec.default_requests(spec)
            status = obj.setdefault("status", {})
            status.setdefault("phase", "Pending")
        elif t.kind == "Namespace":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif t.kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
            _workload_defaults(t.kind, obj.setdefault("spec", {}))
        elif t.kind == "Node":
            obj.setdefault("status", {})

    # --- verbs ---------------------------------------------------------------------------
    def get(self, t: ResourceType, namespace: str, name: str) -> Obj:
        return self.store.get(t.key, namespace, name)

    def list(self, t: ResourceType, namespace: str | None, predicate: Predicate | None, *,
             shared: bool = False, field: tuple[str, str] | None = None) -> tuple[list[Obj], int]:
        """With `shared`, the stored objects themselves: for reading only. `field`: an equality `predicate`
        requires, which the store may answer from an index."""
        return self.store.list(t.key, namespace, predicate, shared=shared, field=field)

    def create(self, t: ResourceType, namespace: str, obj: Obj, *, dry_run: bool = False, strict: bool = False) -> Obj:
        if not isinstance(obj, dict):
            raise BadRequest("the body of the request was not an object")
        meta = obj.setdefault("metadata", {})
        if t.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
            self._namespace_exists(t, namespace)
        else:
            meta.pop("namespace", None)
        self._defaults(t, obj)
        obj = self._check(t, obj, strict=strict)
        name = meta.get("name") or ""
        if name and self.store.peek(t.key, namespace if t.namespaced else "", name) is not None:
            raise AlreadyExists(f'{t.plural}.{t.group} "{name}" already exists' if t.group else f'{t.plural} "{name}" already exists',
                                details={"name": name, "group": t.group, "kind": t.plural})
        admitted = admission.admit(configs=self._webhook_configs, t=t, operation="CREATE", obj=obj, old=None,
                                   namespace=namespace if t.namespaced else "", name=name, dry_run=dry_run)
        assert admitted is not None
        admitted = self._check(t, admitted, strict=False)
        if dry_run:
            return admitted
        created = self.store.create(t.key, admitted)
        self._after_write(t, created)
        return created

    def update(self, t: ResourceType, namespace: str, name: str, obj: Obj, *, subresource: str | None = None,
               dry_run: bool = False, strict: bool = False) -> Obj:
        if not isinstance(obj, dict):
            raise BadRequest("the body of the request was not an object")
        meta = obj.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise BadRequest("the name of the object does not match the name on the URL")
        meta["name"] = name
        if t.namespaced:
            meta["namespace"] = namespace
        current = self.store.get(t.key, namespace if t.namespaced else "", name)
        obj["apiVersion"], obj["kind"] = t.group_version, t.kind
        if subresource == "status":
            merged = copy.deepcopy(current)
            merged["status"] = obj.get("status")
            merged["metadata"]["resourceVersion"] = meta.get("resourceVersion") or current["metadata"]["resourceVersion"]
            obj = merged
        elif "status" in t.subresources:
            obj["status"] = current.get("status")
        obj = self._check(t, obj, strict=strict, old=current)
        if subresource is None:
            obj = admission.admit(configs=self._webhook_configs, t=t, operation="UPDATE", obj=obj, old=current,
                                  namespace=namespace if t.namespaced else "", name=name, dry_run=dry_run) or obj
            obj = self._check(t, obj, strict=False, old=current)
        if dry_run:
            return obj
        updated = self.store.update(t.key, obj)
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
            self._gone(t, updated)              # its last finalizer went: the deletion completes now
        else:
            self._after_write(t, updated)
        return updated

    def patch(self, t: ResourceType, namespace: str, name: str, patch: Any, content_type: str, *,
              subresource: str | None = None, dry_run: bool = False, strict: bool = False, retries: int = 5) -> Obj:
        for _ in range(retries):
            current = self.store.get(t.key, namespace if t.namespaced else "", name)
            patched = apply_patch(current, patch, content_type)
            if not isinstance(patched, dict):
                raise BadRequest("the patch did not produce an object")
            sent_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
            patched.setdefault("metadata", {})["resourceVersion"] = sent_rv or current["metadata"]["resourceVersion"]
            try:
                return self.update(t, namespace, name, patched, subresource=subresource, dry_run=dry_run, strict=strict)
            except Conflict:
                if sent_rv:
                    raise
        raise Conflict(f'{t.plural} "{name}": too many conflicting writes while patching')

    def delete(self, t: ResourceType, namespace: str, name: str, *, options: dict[str, Any] | None = None,
               dry_run: bool = False) -> tuple[Obj, bool]:
        options = options or {}
        ns = namespace if t.namespaced else ""
        current = self.store.get(t.key, ns, name)
        admission.admit(configs=self._webhook_configs, t=t, operation="DELETE", obj=None, old=current,
                        namespace=ns, name=name, dry_run=dry_run)
        if dry_run:
            return current, False
        preconditions = options.get("preconditions") or {}
        grace = 0
        if t.kind == "Pod" and self._graceful(current, options):
            grace = int(options.get("gracePeriodSeconds") or current["spec"].get("terminationGracePeriodSeconds") or 30)
        obj, gone = self.store.delete(t.key, ns, name, precondition_uid=preconditions.get("uid"),
                                      precondition_rv=preconditions.get("resourceVersion"), grace_period=grace)
        if options.get("propagationPolicy") == "Orphan":
            self._orphan_dependents(t, obj)
        elif options.get("propagationPolicy") == "Foreground":
            self._delete_dependents(t, obj)
        if gone:
            self._gone(t, obj)
        return obj, gone

    def _gone(self, t: ResourceType, obj: Obj) -> None:
        """What follows an object's removal from the store: the garbage collector deletes its dependents."""
        self._delete_dependents(t, obj)
        self._after_delete(t, obj)

    def _graceful(self, pod: Obj, options: dict[str, Any]) -> bool:
        """A pod that runs on a node is stopped by its kubelet before it goes (the kubelet deletes it
        again with grace period 0), unless the grace period asked for is 0."""
        grace = options.get("gracePeriodSeconds")
        return bool((pod.get("spec") or {}).get("nodeName")) and grace not in (0, "0") and \
            (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Pending")

    # --- subresources ----------------------------------------------------------------------
    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise BadRequest("binding target name is required")
        pods = self.registry.get("", "v1", "pods")
        assert pods is not None
        for _ in range(5):
            pod = self.store.get("pods", namespace, name)
            if (pod.get("spec") or {}).get("nodeName"):
                raise Conflict(f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                               details={"name": name, "kind": "pods/binding"})
            if pod["metadata"].get("deletionTimestamp"):
                raise Conflict(f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being deleted')
            pod["spec"]["nodeName"] = target
            conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
            pod.setdefault("status", {})["conditions"] = conditions
            try:
                self.store.update("pods", pod)
                return
            except Conflict:
                continue
        raise Conflict(f'pods/binding "{name}": too many conflicting writes')

    def evict(self, namespace: str, name: str, eviction: Obj) -> None:
        # the API server takes a disruption from the budget's status on condition of its resourceVersion, so
        # evictions sent at once (as kubectl drain sends them) are decided one after another, each seeing the last
        with self._evicting:
            self._evict(namespace, name, eviction)

    def _evict(self, namespace: str, name: str, eviction: Obj) -> None:
        pod = self.store.get("pods", namespace, name)
        pdbs, _ = self.store.list("poddisruptionbudgets.policy", namespace)
        pods, _ = self.store.list("pods", namespace)
        replicas = self.controller_replicas(namespace)
        verdict = disruption.eviction_verdict(pod, pdbs, pods, replicas)
        if verdict.code == 500:
            raise StoreError(verdict.message)
        if not verdict.allowed:
            raise TooManyRequests(
                "Cannot evict pod as it would violate the pod's disruption budget.",
                details={"causes": [{"reason": "DisruptionBudget", "message": verdict.message}]})
        pods_type = self.registry.get("", "v1", "pods")
        assert pods_type is not None
        self.delete(pods_type, namespace, name, options=eviction.get("deleteOptions") or {})

    def controller_replicas(self, namespace: str) -> dict[str, int]:
        """How many pods each workload controller in `namespace` wants, by its uid."""
        out = {}
        for key, field in (("replicasets.apps", "replicas"), ("statefulsets.apps", "replicas"), ("jobs.batch", "parallelism")):
            for obj in self.store.list(key, namespace)[0]:
                out[obj["metadata"]["uid"]] = int((obj.get("spec") or {}).get(field, 1) or 0)
        return out

    def scale(self, t: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(t.key, namespace, name)
        paths = _scale_paths(t)
        selector = _at(obj, paths["labelSelectorPath"]) if paths.get("labelSelectorPath") else None
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: obj["metadata"].get(k) for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
                "spec": {"replicas": _at(obj, paths["specReplicasPath"], 1)},
                "status": {"replicas": _at(obj, paths["statusReplicasPath"], 0),
                           "selector": selector if isinstance(selector, str) else
                           _selector_string((obj.get("spec") or {}).get("selector"))}}

    def set_scale(self, t: ResourceType, namespace: str, name: str, replicas: Any) -> Obj:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise Invalid(f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {replicas!r}: must be greater than or equal to 0')
        patch: Any = replicas
        for part in reversed(_scale_paths(t)["specReplicasPath"].strip(".").split(".")):
            patch = {part: patch}
        self.patch(t, namespace, name, patch, "application/merge-patch+json")
        return self.scale(t, namespace, name)

    # --- side effects ----------------------------------------------------------------------
    def _after_write(self, t: ResourceType, obj: Obj) -> None:
        if t.kind == "CustomResourceDefinition":
            self._register_crd(obj)

    def _after_delete(self, t: ResourceType, obj: Obj) -> None:
        if t.kind == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            plural = (spec.get("names") or {}).get("plural", "")
            key = f"{plural}.{spec.get('group')}"
            for item in self.store.list(key)[0]:
                meta = item["metadata"]
                item["metadata"]["finalizers"] = []
                try:
                    self.store.update(key, item, check_version=False)
                    self.store.delete(key, meta.get("namespace", ""), meta["name"])
                except NotFound:
                    pass
            self.registry.remove_group_resource(spec.get("group", ""), plural)
        elif t.kind == "Namespace":
            name = obj["metadata"]["name"]
            for rt in self.registry.all():
                if rt.namespaced:
                    for item in self.store.list(rt.key, name)[0]:
                        try:
                            self.store.update(rt.key, {**item, "metadata": {**item["metadata"], "finalizers": []}}, check_version=False)
                            self.store.delete(rt.key, name, item["metadata"]["name"])
                        except NotFound:
                            pass

    def _register_crd(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            self.registry.add(ResourceType(
                group=spec.get("group", ""), version=version["name"], kind=names.get("kind", ""), plural=names.get("plural", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced", short_names=tuple(names.get("shortNames") or ()),
                subresources=tuple((version.get("subresources") or {}).keys()), categories=tuple(names.get("categories") or ()),
                schema=((version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object",
                                                                                 "x-kubernetes-preserve-unknown-fields": True}),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                scale=(version.get("subresources") or {}).get("scale"),
            ))
        if not any(c.get("type") == "Established" for c in (crd.get("status") or {}).get("conditions") or []):
            now = now_rfc3339()
            crd["status"] = {"acceptedNames": names, "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
                             "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": now},
                                            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                                             "lastTransitionTime": now}]}
            try:
                self.store.update("customresourcedefinitions.apiextensions.k8s.io", crd, check_version=False)
            except NotFound:
                pass

    def _dependents(self, t: ResourceType, owner: Obj) -> builtins.list[tuple[ResourceType, Obj]]:  # `list` is a method here
        if t.kind not in OWNER_KINDS and t.schema is None:     # any custom resource may own objects (a Provisioner its Nodes)
            return []
        uid = owner["metadata"].get("uid")
        namespace = owner["metadata"].get("namespace")
        out = []
        for rt in self.registry.all():
            if rt.namespaced and namespace is None and t.kind != "Node":
                continue
            items, _ = self.store.list(rt.key, namespace if rt.namespaced and namespace else None,
                                       lambda o: any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []))
            out += [(rt, item) for item in items]
        return out

    def _delete_dependents(self, t: ResourceType, owner: Obj) -> None:
        for rt, item in self._dependents(t, owner):
            try:
                self.delete(rt, item["metadata"].get("namespace", ""), item["metadata"]["name"])
            except NotFound:
                pass

    def _orphan_dependents(self, t: ResourceType, owner: Obj) -> None:
        """What the garbage collector's orphan finalizer does: the dependents stay, without the reference."""
        uid = owner["metadata"].get("uid")
        for rt, item in self._dependents(t, owner):
            refs = [r for r in item["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            try:
                self.store.update(rt.key, {**item, "metadata": {**item["metadata"], "ownerReferences": refs}},
                                  check_version=False)
            except NotFound:
                pass


def _scale_paths(t: ResourceType) -> dict[str, str]:
    """Where a resource keeps its replica counts: a CRD says (a NodePool's status count is `.status.nodes`);
    built-in workloads keep them at `.spec.replicas` and `.status.replicas`."""
    return {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", **(t.scale or {})}


def _at(obj: Obj, path: str, default: Any = None) -> Any:
    value = tables.value_at(obj, path)
    return default if value is None else value


def _cause_reason(error: str) -> str:
    """The StatusCause reason of a field error, from the words that follow its path."""
    words = error.split(": ", 2)[1] if ": " in error else ""
    return {"Required value": "FieldValueRequired", "Forbidden": "FieldValueForbidden", "Too long": "FieldValueTooLong",
            "Too many": "FieldValueTooMany", "Unsupported value": "FieldValueNotSupported",
            "Duplicate value": "FieldValueDuplicate"}.get(words.split(":", 1)[0], "FieldValueInvalid")


def _selector_string(selector: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(((selector or {}).get("matchLabels") or {}).items()))


def _unknown_fields(sent: Any, kept: Any, path: str = "") -> list[str]:
    """Dotted paths present in `sent` but pruned from `kept`."""
    if not isinstance(sent, dict) or not isinstance(kept, dict):
        return []
    out = []
    for key, value in sent.items():
        child = f"{path}.{key}" if path else key
        if key not in kept:
            out.append(child)
        else:
            out += _unknown_fields(value, kept[key], child)
    return out
