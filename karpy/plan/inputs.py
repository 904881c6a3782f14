"""`karpy plan` input: multi-document YAML/JSON files turned into a ClusterSnapshot.

Reads Provisioners (validated, and defaulted for the `aws` catalog as the
webhook would), v1 NodePools (defaulted as their CRD defaults them, with the
kubelet settings of the EC2NodeClass they name, when given), Pods, Nodes, workloads (expanded into pods), DaemonSets
(overhead), Namespaces, PodDisruptionBudgets and InstanceTypeCatalogs, refusing
unknown fields as kubectl's strict validation does (`plan/fields.py`). Every
problem is reported as one line naming the file, the document and the field;
nothing is raised past `load()` but PlanInputError.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pydantic

from karpy.apis.awsnodetemplate_validation import decode_awsnodetemplate
from karpy.apis.errors import FieldError, from_validation_error
from karpy.apis.provisioner_defaults import default_provisioner
from karpy.apis.provisioner_validation import read_provisioner
from karpy.apis.quantity import QuantityError
from karpy.apis.resources import Resources
from karpy.apis.v1.ec2nodeclass import EC2NodeClass
from karpy.apis.v1.pool import read_nodepool
from karpy.apis.v1alpha1 import AWSSettings
from karpy.apis.v1alpha5 import Provisioner
from karpy.controller.cloudprovider.catalog import (
    BUILT_IN,
    CATALOG_API_VERSION,
    CATALOG_KIND,
    Catalog,
    CatalogError,
    built_in,
    catalog_from_document,
)
from karpy.controller.provisioning.scheduling import forked
from karpy.controller.provisioning.scheduling.pods import PodError, PodInfo
from karpy.controller.provisioning.scheduling.scheduler import ClusterSnapshot
from karpy.plan.documents import Document, PlanInputError, Reading, read_documents, start_reading
from karpy.plan.fields import model_of, unknown_fields

WORKLOADS = {("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet"), ("batch/v1", "Job")}
PROVISIONER = ("karpenter.sh/v1alpha5", "Provisioner")
POD = ("v1", "Pod")
NODEPOOL = ("karpenter.sh/v1", "NodePool")
EC2NODECLASS = ("karpenter.k8s.aws/v1", "EC2NodeClass")
# every kind plan reads (an InstanceTypeCatalog too): each is checked for unknown fields
READ_KINDS = WORKLOADS | {PROVISIONER, NODEPOOL, EC2NODECLASS, POD, ("v1", "Node"), ("v1", "Namespace"), ("apps/v1", "DaemonSet"),
                          ("policy/v1", "PodDisruptionBudget"), (CATALOG_API_VERSION, CATALOG_KIND)}
IGNORED_KINDS = {"Service", "ConfigMap", "Secret", "ServiceAccount", "Ingress", "Role", "RoleBinding", "ClusterRole",
                 "ClusterRoleBinding", "HorizontalPodAutoscaler", "PersistentVolumeClaim", "NetworkPolicy",
                 "CustomResourceDefinition", "Event", "Lease", "NodeClaim"}
# this many pods or more are checked for unknown fields in a process of their own while the rest is read: fewer
# take less time than starting it
FORKED_CHECK_PODS = 2000


@dataclasses.dataclass
class PlanInput:
    snapshot: ClusterSnapshot
    pdbs: list[dict[str, Any]]
    warnings: list[str]


def load(paths: Sequence[str] | Reading, *, catalog: str = "aws") -> PlanInput:
    """Read `paths` (or the files being read) into a PlanInput; raises PlanInputError listing every problem, or
    saying that the files hold no documents at all (as kubectl says "no objects passed to apply")."""
    reading = paths if isinstance(paths, Reading) else start_reading(paths)
    docs = reading.documents()
    if not docs:
        named = ", ".join("standard input" if p == "-" else p for p in reading.paths)
        raise PlanInputError([f"no objects passed to plan: {named} {'holds' if len(reading.paths) == 1 else 'hold'} no documents"])
    return from_documents(docs, catalog=catalog)


def from_documents(docs: Sequence[Document], *, catalog: str = "aws") -> PlanInput:
    """Documents already read (from files, or built in memory) into a PlanInput; raises PlanInputError."""
    problems: list[str] = []
    warnings: list[str] = []
    chosen = _catalog(docs, catalog, problems)
    aws = chosen is not None and chosen.name == "aws"
    namespaces = {d.body["metadata"]["name"]: dict(d.body["metadata"].get("labels") or {})
                  for d in docs if d.body.get("kind") == "Namespace" and _has_name(d.body)}
    provisioners: list[Provisioner] = []
    nodes: list[dict[str, Any]] = []
    pods: list[PodInfo] = []
    daemonsets: list[PodInfo] = []
    pdbs: list[dict[str, Any]] = []
    node_templates: dict[str, AWSSettings] = {}
    owners = functools.cache(functools.partial(_owners_named, docs))     # looked for only when a workload expands
    node_classes = _node_classes(docs, problems)
    first_seen: dict[str, Document] = {}
    # pods are checked for unknown fields while the others are read (in a process of its own when they are many);
    # a pod with unknown fields reports them, not what reading it found
    pod_places = [at for at, d in enumerate(docs) if (d.body.get("apiVersion"), d.body.get("kind")) == POD]
    checking = forked.start(functools.partial(_unknown_fields_of, [docs[at] for at in pod_places]),
                            fork=len(pod_places) >= FORKED_CHECK_PODS)
    found: dict[int, str] = {}                      # per document (by place), its problem
    for at, d in enumerate(docs):
        kind, api_version = d.body.get("kind"), d.body.get("apiVersion")
        try:
            if (api_version, kind) in READ_KINDS and (api_version, kind) != POD:
                _strict(d)
            if (api_version, kind) in (PROVISIONER, NODEPOOL):
                # one namespace of names: a node's owner label and the plan's `provisioner` field name either
                parsed = _provisioner(d, aws=aws) if kind == PROVISIONER[1] else _node_pool(d, node_classes)
                if parsed.name in first_seen:
                    found[at] = (f"{d.where()}: {kind} {parsed.name!r} is given more than once, as Provisioner or"
                                 f" NodePool (first in {first_seen[parsed.name].where()})")
                first_seen.setdefault(parsed.name, d)
                provisioners.append(parsed)
            elif (api_version, kind) == POD:
                pods.append(PodInfo.parse(d.body, namespace_labels=namespaces))
            elif (api_version, kind) == ("v1", "Node"):
                nodes.append(_node(d))
            elif (api_version, kind) in WORKLOADS:
                pods += _expand(d, owners(), namespaces)
            elif (api_version, kind) == ("apps/v1", "DaemonSet"):
                daemonsets.append(_daemon(d, namespaces))
            elif (api_version, kind) == ("policy/v1", "PodDisruptionBudget"):
                pdbs.append(dict(d.body))
            elif (api_version, kind) == ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"):
                template, errors = decode_awsnodetemplate(d.body)   # its volumes are part of what a node costs
                if template is None:
                    raise FieldProblem("; ".join(map(str, errors)))
                node_templates[str(template.metadata.name)] = template.spec
            elif kind in ("Namespace", CATALOG_KIND) or (api_version, kind) == EC2NODECLASS:
                continue
            elif kind in IGNORED_KINDS:
                warnings.append(f"{d.where()}: ignored (does not affect scheduling)")
            else:
                found[at] = f"{d.where()}: unsupported document {api_version}/{kind}"
        except (PodError, FieldProblem) as e:
            found[at] = f"{d.where()}: {e}"
    for k, paths in checking.result().items():
        found[pod_places[k]] = f"{docs[pod_places[k]].where()}: {paths}"
    problems += [found[at] for at in sorted(found)]
    if problems:
        raise PlanInputError(problems)
    assert chosen is not None
    return PlanInput(ClusterSnapshot(provisioners, chosen, nodes, pods, daemonsets, node_templates), pdbs, warnings)


class FieldProblem(ValueError):
    """One document's problems, already rendered with their paths."""


def _unknown_fields_of(docs: Sequence[Document]) -> dict[int, str]:
    """Per document of `docs` (by place) that has fields its kind lacks, what _strict says of them."""
    out = {}
    for k, d in enumerate(docs):
        try:
            _strict(d)
        except FieldProblem as e:
            out[k] = str(e)
    return out


def _strict(d: Document) -> None:
    """kubectl's strict field validation: raises FieldProblem naming every field the object's type lacks.
    Built-in kinds are checked whole; a Provisioner or a catalog here only in its metadata, its reader
    (pydantic, catalog_from_document) refusing unknown fields in the rest."""
    model = model_of(d.body.get("apiVersion"), d.body.get("kind"))
    if model is not None:
        unknown = unknown_fields(d.body, model)
    elif isinstance(d.body.get("metadata"), Mapping):
        unknown = unknown_fields(d.body["metadata"], "V1ObjectMeta", "metadata")
    else:
        return
    if unknown:
        raise FieldProblem("; ".join(f"{path}: unknown field" for path in unknown))


def _has_name(body: Mapping[str, Any]) -> bool:
    return isinstance(body.get("metadata"), Mapping) and bool(body["metadata"].get("name"))


def _catalog(docs: Sequence[Document], name: str, problems: list[str]) -> Catalog | None:
    inline = [d for d in docs if d.body.get("kind") == CATALOG_KIND]
    if len(inline) > 1:
        problems.append(f"{inline[1].where()}: only one InstanceTypeCatalog may be given")
    if inline:
        return _catalog_document(inline[0], problems)
    if name in BUILT_IN:
        return built_in(name)
    path = Path(name)
    if not path.is_file():
        problems.append(f"--catalog {name}: not a built-in catalog ({', '.join(BUILT_IN)}) nor a file")
        return None
    try:
        file_docs = read_documents([str(path)])
    except PlanInputError as e:
        problems += e.problems
        return None
    catalogs = [d for d in file_docs if d.body.get("kind") == CATALOG_KIND]
    if len(catalogs) != 1:
        problems.append(f"--catalog {name}: expected one InstanceTypeCatalog document, found {len(catalogs)}")
        return None
    return _catalog_document(catalogs[0], problems)


def _catalog_document(d: Document, problems: list[str]) -> Catalog | None:
    if d.body.get("apiVersion") != CATALOG_API_VERSION:
        problems.append(f"{d.where()}: apiVersion: expected {CATALOG_API_VERSION}")
        return None
    try:
        return catalog_from_document(d.body, name=str((d.body.get("metadata") or {}).get("name") or d.source))
    except CatalogError as e:
        problems += [f"{d.where()}: {err}" for err in e.errors]
        return None


def _provisioner(d: Document, *, aws: bool) -> Provisioner:
    raw = default_provisioner(d.body, aws=aws) if isinstance(d.body.get("spec", {}), Mapping) else d.body
    provisioner, errors = read_provisioner(raw, aws=aws)
    if provisioner is None:
        raise FieldProblem("; ".join(str(e) for e in errors))
    return provisioner


def _node_classes(docs: Sequence[Document], problems: list[str]) -> dict[str, EC2NodeClass]:
    """Every EC2NodeClass given, by name (NodePools read their kubelet settings)."""
    out: dict[str, EC2NodeClass] = {}
    for d in docs:
        if (d.body.get("apiVersion"), d.body.get("kind")) == EC2NODECLASS:
            try:
                parsed = EC2NodeClass.model_validate(d.body)
            except pydantic.ValidationError as e:
                problems.append(f"{d.where()}: " + "; ".join(str(err) for err in from_validation_error(e)))
                continue
            out[parsed.metadata.name or ""] = parsed
    return out


def _node_pool(d: Document, node_classes: Mapping[str, EC2NodeClass]) -> Provisioner:
    pool, errors = read_nodepool(d.body, node_classes)
    if pool is None:
        raise FieldProblem("; ".join(str(e) for e in errors))
    return pool


def _node(d: Document) -> dict[str, Any]:
    if not _has_name(d.body):
        raise FieldProblem(str(FieldError("metadata.name", "missing required field")))
    for field in ("allocatable", "capacity"):
        try:
            Resources.parse((d.body.get("status") or {}).get(field))
        except QuantityError as e:
            raise FieldProblem(f"status.{field}.{e}") from None
    return dict(d.body)


def _owners_named(docs: Sequence[Document]) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of every owner some input object names, so owners are not expanded twice."""
    named = set()
    for d in docs:
        meta = d.body.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, Mapping):
                named.add((str(meta.get("namespace") or "default"), str(ref.get("kind")), str(ref.get("name"))))
    return named


def _template_pods(d: Document, count: int, namespaces: Mapping[str, Mapping[str, str]]) -> Iterator[PodInfo]:
    meta, spec = d.body.get("metadata") or {}, d.body.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        raise FieldProblem("spec.template.spec: missing required field")
    name = str(meta.get("name") or "")
    if not name:
        raise FieldProblem("metadata.name: missing required field")
    namespace = str(meta.get("namespace") or "default")
    tmeta = template.get("metadata") or {}
    for i in range(count):
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{i}", "namespace": namespace, "labels": dict(tmeta.get("labels") or {}),
                         "annotations": dict(tmeta.get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": d.body.get("apiVersion"), "kind": d.body.get("kind"),
                                              "name": name, "controller": True}]},
            "spec": template["spec"],
        }
        try:
            yield PodInfo.parse(pod, namespace_labels=namespaces)
        except PodError as e:
            raise FieldProblem(f"spec.template.{e}") from None


def _expand(d: Document, owners: set[tuple[str, str, str]], namespaces: Mapping[str, Mapping[str, str]]) -> list[PodInfo]:
    meta, spec = d.body.get("metadata") or {}, d.body.get("spec") or {}
    ident = (str(meta.get("namespace") or "default"), str(d.body.get("kind")), str(meta.get("name")))
    if ident in owners:
        return []                    # its pods (or its ReplicaSet) are in the input already
    field = "parallelism" if d.body.get("kind") == "Job" else "replicas"
    count = spec.get(field, 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise FieldProblem(f"spec.{field}: must be a non-negative integer (got {count!r})")
    return list(_template_pods(d, count, namespaces))


def _daemon(d: Document, namespaces: Mapping[str, Mapping[str, str]]) -> PodInfo:
    pods = list(_template_pods(d, 1, namespaces))
    return pods[0]
