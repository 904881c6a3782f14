"""`karpy plan` output: the JSON contract of DESIGN.md, and a table for people. Pure."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis.v1.disruption.drift import HASH_ANNOTATIONS
from karpy.controller.consolidation.decisions import Action, ConsolidationPlan, Replacement
from karpy.controller.provisioning.scheduling.node_reasons import node_reasons
from karpy.controller.provisioning.scheduling.nodes import NodeTemplate
from karpy.controller.provisioning.scheduling.scheduler import Results


def template_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    """The annotations a new node gets from its NodePool's template: the drift hashes every launch is stamped
    with are the launch's bookkeeping, not part of the plan."""
    return {k: v for k, v in annotations.items() if k not in HASH_ANNOTATIONS}


def plan_json(results: Results, templates: Sequence[NodeTemplate] = ()) -> dict[str, Any]:
    """The plan as DESIGN.md's JSON; `templates` (the scheduler's, after solving) let `reasons` name limits."""
    nodes: list[dict[str, Any]] = [
        {
            "name": n.name,
            "provisioner": n.provisioner,                  # a Provisioner's or a NodePool's name
            **({"nodePool": n.provisioner} if n.labels.get(wk.NODEPOOL) == n.provisioner else {}),
            **({"annotations": shown} if (shown := template_annotations(n.annotations)) else {}),
            "instanceType": n.instance_type.name,
            "instanceTypeOptions": [t.name for t in n.options],
            "zone": n.offering.zone,
            "capacityType": n.offering.capacity_type,
            "pricePerHour": n.offering.price_per_hour,
            "costPerHour": n.cost_per_hour,
            "labels": dict(n.labels),
            "taints": [t.to_manifest() for t in n.taints],
            "pods": [p.key for p in n.pods],
            "reasons": node_reasons(n, templates),
        }
        for n in results.new_nodes
    ]
    scheduled = sum(len(n.pods) for n in results.new_nodes) + sum(len(n.pods) for n in results.existing_nodes)
    return {
        "nodes": nodes,
        "existingNodes": [{"name": n.name, "pods": [p.key for p in n.pods]} for n in results.existing_nodes],
        "unschedulable": [{"pod": key, "reason": str(reason)} for key, reason in results.unschedulable.items()],
        "summary": {
            "pods": len(results.pending),
            "scheduled": scheduled,
            "newNodes": len(nodes),
            "pricePerHour": round(sum(n["pricePerHour"] for n in nodes), 6),
            "costPerHour": round(sum(n["costPerHour"] for n in nodes), 6),
        },
    }


def plan_table(results: Results, templates: Sequence[NodeTemplate] = (), *, wide: bool = False) -> str:
    """The plan for people: a row per new node with why it exists; `wide` adds its pods."""
    doc = plan_json(results, templates)
    lines = []
    if doc["nodes"]:
        rows = [("NODE", "PROVISIONER", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/HOUR", "COST $/HOUR", "PODS", "REASONS")
                + (("POD NAMES",) if wide else ())]
        rows += [(n["name"], n["provisioner"], n["instanceType"], n["zone"], n["capacityType"],
                  f"{n['pricePerHour']:.4f}", f"{n['costPerHour']:.4f}", str(len(n["pods"])), "; ".join(n["reasons"]))
                 + ((",".join(n["pods"]),) if wide else ()) for n in doc["nodes"]]
        lines += _columns(rows)
    else:
        lines.append("No new nodes.")
    if doc["existingNodes"]:
        lines += ["", "Existing nodes receiving pending pods:"]
        lines += _columns([("NODE", "PODS") + (("POD NAMES",) if wide else ())]
                          + [(n["name"], str(len(n["pods"]))) + ((",".join(n["pods"]),) if wide else ())
                             for n in doc["existingNodes"]])
    if doc["unschedulable"]:
        lines += ["", "Unschedulable pods:"]
        lines += _columns([("POD", "REASON")] + [(u["pod"], u["reason"]) for u in doc["unschedulable"]])
    s = doc["summary"]
    lines += ["", f"{s['scheduled']}/{s['pods']} pod(s) scheduled, {s['newNodes']} new node(s), ${s['pricePerHour']:.4f}/hour"
                  f" list, ${s['costPerHour']:.4f}/hour true cost"]
    return "\n".join(lines)


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def consolidation_json(plan: ConsolidationPlan) -> dict[str, Any]:
    actions = []
    for a in plan.actions:
        doc: dict[str, Any] = {"type": a.kind, "nodes": list(a.nodes), "savingsPerHour": a.savings_per_hour,
                               "costSavingsPerHour": a.cost_savings_per_hour, **_replacements_json(a)}
        doc["pods"] = list(a.pods)
        doc["podsMoved"] = a.pods_moved
        doc["disruptionCost"] = a.disruption_cost
        doc["moves"] = [{"pod": pod, "to": _destination(a, to)} for pod, to in a.moves]
        actions.append(doc)
    by_kind = {kind: sum(1 for a in plan.actions if _kind_of(a) == kind)
               for kind in ("delete", "replace", "split", "repack")}
    return {
        "actions": actions,
        "kept": [{"node": k.node, "reason": k.reason} for k in plan.kept],
        "summary": {"actions": len(actions), "savingsPerHour": round(sum(a.savings_per_hour for a in plan.actions), 6),
                    "pricePerHourBefore": plan.price_before, "pricePerHourAfter": plan.price_after,
                    "costSavingsPerHour": round(sum(a.cost_savings_per_hour for a in plan.actions), 6),
                    "costPerHourBefore": plan.cost_before, "costPerHourAfter": plan.cost_after,
                    "nodesRemoved": sum(len(a.nodes) for a in plan.actions),
                    "podsMoved": sum(a.pods_moved for a in plan.actions),
                    "disruptionCost": round(sum(a.disruption_cost for a in plan.actions), 6),
                    "nodesLaunched": sum(len(a.replacements) + len(a.provisioned) for a in plan.actions),
                    "actionsByKind": by_kind, "complete": plan.complete},
    }


def _kind_of(a: Action) -> str:
    """delete, replace (one or more nodes by one), split (one node by several) or repack (several by several)."""
    if len(a.replacements) > 1:
        return "split" if len(a.nodes) == 1 else "repack"
    return a.kind


def _destination(a: Action, to: str) -> str:
    """`to` as the docs name it: an existing node, `replacement`, or `replacement-N` when several launch;
    `provisioned-N`: the N-th node provisioning launches for pods kube-scheduler leaves without room."""
    names = [r.planned.name for r in a.replacements]
    provisioned = [r.planned.name for r in a.provisioned]
    if to in provisioned:
        return f"provisioned-{provisioned.index(to) + 1}"
    if to not in names:
        return to
    return "replacement" if len(names) == 1 else f"replacement-{names.index(to) + 1}"


def consolidation_table(plan: ConsolidationPlan) -> str:
    lines = []
    if plan.actions:
        lines += _columns([("#", "ACTION", "NODES", "REPLACEMENT", "LIST SAVING $/H", "COST SAVING $/H", "PODS MOVED",
                            "DISRUPTION COST")] + [
            (str(i), _kind_of(a), _nodes_cell(a.nodes),
             ", ".join(f"{r.instance_type} {r.capacity_type} {r.zone}" for r in a.replacements) or "-",
             f"{a.savings_per_hour:.4f}", f"{a.cost_savings_per_hour:.4f}", str(a.pods_moved), f"{a.disruption_cost:g}")
            for i, a in enumerate(plan.actions, 1)])
        moves = [(str(i), pod, _destination(a, to)) for i, a in enumerate(plan.actions, 1) for pod, to in a.moves]
        if moves:
            lines += ["", "Pods moved:"]
            lines += _columns([("#", "POD", "TO")] + moves)
    else:
        lines.append("No consolidation action.")
    if plan.kept:
        lines += ["", "Nodes kept:"]
        lines += _columns([("NODE", "REASON")] + [(k.node, k.reason) for k in plan.kept])
    total = sum(a.savings_per_hour for a in plan.actions)
    moved = sum(a.pods_moved for a in plan.actions)
    lines += ["", f"{len(plan.actions)} action(s), {moved} pod(s) moved, saving ${total:.4f}/hour: "
                  f"${plan.price_before:.4f}/hour before, ${plan.price_after:.4f}/hour after (list prices); "
                  f"true cost ${plan.cost_before:.4f}/hour before, ${plan.cost_after:.4f}/hour after"]
    if not plan.complete:
        lines.append("The decision time budget ran out: the actions above are those found in time.")
    return "\n".join(lines)


def _nodes_cell(nodes: tuple[str, ...]) -> str:
    return ",".join(nodes) if len(nodes) <= 4 else f"{','.join(nodes[:3])},... ({len(nodes)} nodes)"


def _replacements_json(action: Action) -> dict[str, Any]:
    """An action's `replacement` (the first or only new node) and, when it launches several, `replacements`;
    `provisioned` when it leaves pods that provisioning launches nodes for."""
    out: dict[str, Any] = {}
    if action.replacement is not None:
        out["replacement"] = _replacement_json(action.replacement)
    if len(action.replacements) > 1:
        out["replacements"] = [_replacement_json(r) for r in action.replacements]
    if action.provisioned:
        out["provisioned"] = [_replacement_json(r) for r in action.provisioned]
    return out


def _replacement_json(r: Replacement) -> dict[str, Any]:
    return {"instanceType": r.instance_type, "zone": r.zone, "capacityType": r.capacity_type, "pricePerHour": r.price_per_hour,
            "costPerHour": r.cost_per_hour}


def explain_node_json(plan: ConsolidationPlan, name: str) -> dict[str, Any]:
    """What consolidation does with node `name` now (`karpy explain node`)."""
    verdict = plan.verdict(name)
    if verdict is None:
        return {"node": name, "verdict": "unknown", "reason": "no such node"}
    if isinstance(verdict, Action):
        doc: dict[str, Any] = {"node": name, "verdict": _kind_of(verdict), "reason": verdict.describe(),
                               "savingsPerHour": verdict.savings_per_hour,
                               "costSavingsPerHour": verdict.cost_savings_per_hour, "podsMoved": verdict.pods_moved,
                               "disruptionCost": verdict.disruption_cost, **_replacements_json(verdict)}
        doc["nodes"] = list(verdict.nodes)
        doc["moves"] = [{"pod": pod, "to": _destination(verdict, to)} for pod, to in verdict.moves]
        if verdict.drifted:
            doc["drifted"] = verdict.drifted          # the Drift method's: its NodeClaim's Drifted reason
        return doc
    return {"node": name, "verdict": "keep", "reason": verdict.reason}
