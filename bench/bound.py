"""A lower bound on what new nodes for a set of pods can cost per hour, to judge a packing by.

The bound is the LP relaxation over one provisioner's instance types: fractional numbers of
nodes of each type whose allocatable cpu, memory and pods (kube-reserved and daemonset
overhead already taken off) cover what the pods request, each type priced at the cheapest
offering the provisioner allows; pods that a required hostname anti-affinity keeps apart
(the largest set whose term selects them all) each get a node of their own that holds them.
No packing can pay less: any plan is a feasible point of this program. Pure.

`pattern_bound` is a tighter bound for pods with no constraint but their requests: the LP over packing
patterns (how many pods of each shape one node of one type holds), solved by column generation with
every type priced exactly. The resource LP lets one node lend its cpu and another its memory to the same
pods; a pattern must hold its pods on one node.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from karpy.apis import labels as wk
from karpy.apis.resources import CPU, MEMORY, PODS
from karpy.controller.provisioning.scheduling.nodes import NodeTemplate, dot
from karpy.controller.provisioning.scheduling.packers.patterns import fill, knapsack
from karpy.controller.provisioning.scheduling.pods import PodInfo

BOUND_RESOURCES = (CPU, MEMORY, PODS)


def apart(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """The largest set of pods a required hostname anti-affinity term keeps each on its own node:
    pods sharing a term (selector and namespaces) that selects each of them."""
    sets: dict[tuple[object, ...], list[PodInfo]] = {}
    for pod in pods:
        for term in pod.affinities:
            if term.anti and not term.weight and term.key == wk.HOSTNAME and term.selector.matches(pod.labels):
                sets.setdefault((term.selector, term.namespaces), []).append(pod)
    return max(sets.values(), key=len, default=[])


def _priced_types(template: NodeTemplate) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The columns of BOUND_RESOURCES, and the allocatable of those (types x columns) and price of each type
    the template's requirements allow, at the least it can cost (cost.py): its cheapest allowed offering and the
    per-node costs (a burstable type's credits, which only add, left out)."""
    _, order, _ = template.compatible(template.requirements)
    types = order.tolist()
    columns = [template.rows.index[r] for r in BOUND_RESOURCES if r in template.rows.index]
    alloc = np.array([[float(template.allocatable[i][c]) for c in columns] for i in types]).reshape(len(types), len(columns))
    return columns, alloc, template.list_prices(template.requirements)[order] + template.costs.fixed


def lower_bound(template: NodeTemplate, pods: Sequence[PodInfo]) -> float:
    """The LP bound (see the module) for `pods` on new nodes of `template`; inf when none holds them."""
    if not pods:
        return 0.0
    columns, alloc, price = _priced_types(template)
    if not len(price):
        return float("inf")
    types = range(len(price))
    demand = np.zeros(len(columns))
    for pod in pods:
        demand += [float(pod.requests.get(r, 0)) for r in BOUND_RESOURCES if r in template.rows.index]
    keep = demand > 0                                # scaled to the demand: the solver sees numbers near 1
    alloc, scale = alloc[:, keep] / demand[keep], demand[keep]
    demand, columns = np.ones(int(keep.sum())), [c for c, k in zip(columns, keep) if k]
    alone: dict[tuple[float, ...], int] = {}
    for pod in apart(pods):
        key = tuple(float(pod.requests.get(r, 0)) for r in BOUND_RESOURCES if r in template.rows.index)
        alone[key] = alone.get(key, 0) + 1
    shapes = sorted(alone)
    # variables: y[t] free nodes of each type, then z[k, t] nodes of type t holding an apart pod of shape k
    fits = [[j for j in range(len(types)) if (alloc[j] >= np.array(k)[keep] / scale).all()] for k in shapes]
    if any(not f for f in fits):
        return float("inf")
    n_vars = len(types) + sum(len(f) for f in fits)
    cost = np.concatenate([price] + [price[f] for f in fits])
    rows, cols, vals = [], [], []
    for r in range(len(columns)):                    # capacity covers the demand: -sum(alloc * nodes) <= -demand
        for j in range(len(types)):
            rows.append(r), cols.append(j), vals.append(-alloc[j][r])
        start = len(types)
        for f in fits:
            for offset, j in enumerate(f):
                rows.append(r), cols.append(start + offset), vals.append(-alloc[j][r])
            start += len(f)
    a_ub = coo_matrix((vals, (rows, cols)), shape=(len(columns), n_vars)).tocsr()
    rows, cols, vals = [], [], []
    start = len(types)
    for k, f in enumerate(fits):                     # every apart pod has its own node
        for offset in range(len(f)):
            rows.append(k), cols.append(start + offset), vals.append(1.0)
        start += len(f)
    a_eq = coo_matrix((vals, (rows, cols)), shape=(len(shapes), n_vars)).tocsr() if shapes else None
    b_eq = np.array([alone[k] for k in shapes], dtype=float) if shapes else None
    result = linprog(cost, A_ub=a_ub, b_ub=-demand, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    return float(result.fun) if result.status == 0 else float("inf")


PATTERN_ROUNDS = 200             # pricing rounds at most; the bound is valid (if looser) when they run out


def pattern_bound(template: NodeTemplate, pods: Sequence[PodInfo], *, rounds: int = PATTERN_ROUNDS) -> float:
    """The pattern LP bound (see the module) for `pods` on new nodes of `template`; inf when some pod fits no
    type. Of the pods' constraints it keeps only the largest set a hostname anti-affinity keeps apart (at most
    one of them per node): dropping the others can only make the optimum cheaper, so the bound holds for any
    pods. Each round prices every type exactly (a small integer knapsack over the shapes); the value returned
    is the LP's at convergence, or Farley's bound (the LP's value over the best ratio of a column's worth to
    its price) when the rounds run out."""
    if not pods:
        return 0.0
    columns, alloc, price = _priced_types(template)
    alone = {id(pod) for pod in apart(pods)}
    shapes = Counter((id(pod) in alone, tuple(float(pod.requests.get(r, 0)) for r in BOUND_RESOURCES
                                              if r in template.rows.index)) for pod in pods)
    keys = sorted(shapes)
    need = np.array([row for _, row in keys])                         # shapes x resources
    count = np.array([shapes[k] for k in keys], dtype=float)
    # a type another beats on every resource at no more cost never helps
    useful = [j for j in range(len(price)) if not any(
        k != j and (alloc[k] >= alloc[j]).all() and price[k] <= price[j] and
        ((alloc[k] > alloc[j]).any() or price[k] < price[j] or k < j) for k in range(len(price)))]
    alloc, price = alloc[useful], price[useful]
    # one more resource, of which every node has one and each pod kept apart takes it: one of them a node
    need = np.column_stack([need, [1.0 if apart_ else 0.0 for apart_, _ in keys]])
    alloc = np.column_stack([alloc, np.ones(len(alloc))])
    if not all((alloc >= row).all(axis=1).any() for row in need):
        return float("inf")
    patterns = [(j, pattern) for j in range(len(alloc)) for c in range(len(need))       # one shape alone, as many as fit
                if (pattern := fill([c], alloc[j], need, count)).any()]
    best = 0.0
    for _ in range(rounds):
        a = np.array([p for _, p in patterns], dtype=float).T
        cost = np.array([price[j] for j, _ in patterns])
        result = linprog(cost, A_ub=-a, b_ub=-count, bounds=(0, None), method="highs")
        if result.status != 0:
            return float("inf")
        duals = -result.ineqlin.marginals
        worth, added = 0.0, 0
        for j in range(len(alloc)):
            column = knapsack(duals, alloc[j], need, count, exact=True)
            if column is None:
                if (duals > 1e-12).any():
                    return best                 # a type not priced: only the rounds before are sure
                continue
            value = dot(duals, column)
            worth = max(worth, value / price[j])
            if value > price[j] * (1 + 1e-9) + 1e-12:
                patterns.append((j, column))
                added += 1
        best = max(best, float(result.fun) / max(worth, 1.0))   # at convergence worth is 1: the LP's value
        if not added:
            break
    return best
