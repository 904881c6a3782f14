"""NodePool disruption budgets: how many of a NodePool's nodes may be disrupted now, for one reason.

As Karpenter v1 computes them (`Budget.GetAllowedDisruptions`,
`NodePool.GetAllowedDisruptionsByReason`, the disruption controller's budget
mapping): a budget without `schedule` is always active; one with a schedule
(cron, in UTC) is active while `now` is within `duration` after a hit. An
active budget allows `nodes` (a count, or a percentage of the NodePool's
nodes rounded up); an inactive one does not bound anything (MAX_ALLOWED).
For one reason, the smallest of the budgets that name it or name no reason
wins. Nodes already not Ready or being deleted use up the allowance. A
misconfigured budget fails closed: it allows 0 and says why. Pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from typing import Any, Collection, Final, Iterable, Mapping, Sequence

from croniter import croniter

from karpy.apis.conditions import initialized, ready
from karpy.apis.labels import NODEPOOL
from karpy.apis.v1.disruption.hold import Hold
from karpy.apis.v1.duration import DurationError, parse_duration
from karpy.apis.v1.nodepool import Budget, DisruptionReason, NodePool

MAX_ALLOWED: Final = 2**31 - 1          # Go's math.MaxInt32: no active budget bounds this reason
REASONS: Final[tuple[DisruptionReason, ...]] = ("Empty", "Drifted", "Underutilized")

# robfig/cron's standard parser: the five fields' bounds and names (its `ParseStandard`)
_MONTHS: Final = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS: Final[tuple[tuple[str, int, int, dict[str, int]], ...]] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {month: i + 1 for i, month in enumerate(_MONTHS)}),
    ("day of week", 0, 6, {day: i for i, day in enumerate(_WEEKDAYS)}),
)
_MACROS: Final = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                  "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_RANGE: Final = re.compile(r"^(?P<start>[^-/]+)(-(?P<end>[^-/]+))?(/(?P<step>\d+))?$")


class BudgetError(ValueError):
    """A budget whose schedule, duration or nodes Karpenter could not read."""


def _field_value(text: str, *, name: str, names: Mapping[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise BudgetError(f'failed to parse int from {text} in the {name} field')
    return int(text)


def cron_expression(schedule: str) -> str:
    """`schedule` as five cron fields (macros expanded), checked as robfig/cron's standard parser checks it.

    Raises BudgetError naming the field and the problem, in robfig/cron's words
    ("beginning of range (2) beyond end of range (1)")."""
    expression = _MACROS.get(schedule.strip(), schedule.strip())
    if expression.startswith("@"):
        raise BudgetError(f"unrecognized descriptor: {schedule}")
    fields = expression.split()
    if len(fields) != 5:
        raise BudgetError(f"expected exactly 5 fields, found {len(fields)}: {schedule}")
    for text, (name, low, high, names) in zip(fields, _FIELDS):
        for part in text.split(","):
            match = _RANGE.match(part)
            if match is None:
                raise BudgetError(f"invalid {name} field: {part}")
            if match["step"] is not None and int(match["step"]) == 0:
                raise BudgetError(f"step of range should be a positive number: {part}")
            if match["start"] in ("*", "?"):
                if match["end"] is not None:
                    raise BudgetError(f"invalid {name} field: {part}")
                continue
            start = _field_value(match["start"], name=name, names=names)
            end = start if match["end"] is None else _field_value(match["end"], name=name, names=names)
            if start < low:
                raise BudgetError(f"beginning of range ({start}) below minimum ({low}): {part}")
            if end > high:
                raise BudgetError(f"end of range ({end}) above maximum ({high}): {part}")
            if start > end:
                raise BudgetError(f"beginning of range ({start}) beyond end of range ({end}): {part}")
    return " ".join(fields)


def _utc(moment: dt.datetime) -> dt.datetime:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no time zone; budgets compare times in UTC")
    return moment.astimezone(dt.timezone.utc)


def next_hit(schedule: str, after: dt.datetime) -> dt.datetime:
    """The first time `schedule` fires strictly after `after`, in UTC (robfig/cron's `Schedule.Next`)."""
    return croniter(cron_expression(schedule), _utc(after)).get_next(dt.datetime)


def _duration(budget: Budget) -> dt.timedelta:
    try:
        return parse_duration(budget.duration) if budget.duration is not None else dt.timedelta(0)
    except DurationError as e:
        raise BudgetError(f"duration: {e}") from None


def is_active(budget: Budget, now: dt.datetime) -> bool:
    """True when `budget` applies at `now`: it has no schedule, or a hit lies within `duration` before `now`.

    As v1 does it: walk back `duration` from now and ask whether the next hit
    from there is not after now, so overlapping windows all count; a hit
    opens a window [hit, hit + duration), the end excluded. Raises
    BudgetError for a schedule or duration that does not parse (or a duration without a schedule)."""
    if budget.schedule is None and budget.duration is None:
        return True
    if budget.schedule is None:
        raise BudgetError("duration is set without a schedule")
    now = _utc(now)
    return next_hit(budget.schedule, now - _duration(budget)) <= now


def scaled_nodes(nodes: str, node_count: int) -> int:
    """A budget's `nodes` as a number of nodes: a count as is, a percentage of `node_count` rounded up
    (Kubernetes' GetScaledValueFromIntOrPercent with roundUp, as PDBs' maxUnavailable rounds)."""
    if re.fullmatch(r"[+-]?\d+", nodes):
        return int(nodes)
    if not nodes.endswith("%") or not re.fullmatch(r"[+-]?\d+", nodes[:-1]):
        raise BudgetError(f'invalid value for IntOrString: invalid value "{nodes}"')
    return math.ceil(int(nodes[:-1]) * node_count / 100)


def allowed_disruptions(budget: Budget, *, now: dt.datetime, node_count: int) -> int:
    """How many nodes `budget` lets go at `now` out of `node_count`: MAX_ALLOWED while inactive.
    Raises BudgetError when the budget cannot be read (callers fail closed: 0)."""
    if not is_active(budget, now):
        return MAX_ALLOWED
    return scaled_nodes(budget.nodes, node_count)


@dataclasses.dataclass(frozen=True)
class Allowance:
    """What a NodePool's budgets allow for one reason; `errors` names each budget that failed closed."""

    allowed: int
    errors: tuple[str, ...] = ()


def allowed_by_reason(budgets: Sequence[Budget], *, now: dt.datetime, node_count: int,
                      reason: DisruptionReason) -> Allowance:
    """The most restrictive active budget that covers `reason` (names it, or names no reason)."""
    allowed = MAX_ALLOWED
    errors: list[str] = []
    for index, budget in enumerate(budgets):
        try:
            value = allowed_disruptions(budget, now=now, node_count=node_count)
        except BudgetError as e:
            errors.append(f"spec.disruption.budgets[{index}]: {e}")
            value = 0
        if budget.reasons is None or reason in budget.reasons:
            allowed = min(allowed, value)
    return Allowance(allowed, tuple(errors))


@dataclasses.dataclass(frozen=True)
class BudgetNode:
    """What the budget count needs to know of one node (a StateNode in Karpenter)."""

    nodepool: str
    initialized: bool                 # replacements still coming up count toward nothing
    ready: bool
    marked_for_deletion: bool         # being deleted, or chosen by a disruption command
    instance_terminating: bool = False  # drained and its instance deleted: gone for counting


def budget_nodes(nodes: Iterable[Mapping[str, Any]], leaving: Collection[str] = ()) -> list[BudgetNode]:
    """The NodePools' Node objects among `nodes` as the budget count sees them, those named in `leaving` (or with a
    deletionTimestamp) marked for deletion. A node without any conditions (plan input written by hand) counts as
    Ready: only one that says it is not uses up a budget."""
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(NODEPOOL)
        if pool:
            out.append(BudgetNode(nodepool=pool, initialized=initialized(node),
                                  ready=ready(node) or not (node.get("status") or {}).get("conditions"),
                                  marked_for_deletion=bool(meta.get("deletionTimestamp")) or meta.get("name") in leaving))
    return out


@dataclasses.dataclass(frozen=True)
class PoolBudget:
    """One NodePool's budget for one reason: `allowed` is what the budgets allow (the
    karpenter_nodepools_allowed_disruptions metric), `remaining` what is left after `disrupting`."""

    nodepool: str
    reason: DisruptionReason
    node_count: int
    allowed: int
    disrupting: int
    errors: tuple[str, ...] = ()

    @property
    def remaining(self) -> int:
        return max(self.allowed - self.disrupting, 0)


def budget_mapping(budgets_by_nodepool: Mapping[str, Sequence[Budget]], nodes: Iterable[BudgetNode], *,
                   now: dt.datetime, reason: DisruptionReason) -> dict[str, PoolBudget]:
    """Per NodePool, how many more of its nodes may be disrupted for `reason` now (Karpenter's
    BuildDisruptionBudgetMapping): only initialized nodes whose instance is not terminating count toward
    the total; those not Ready or marked for deletion use up the allowance. Computed once per pass."""
    counts: dict[str, int] = {}
    disrupting: dict[str, int] = {}
    for node in nodes:
        if not node.initialized or node.instance_terminating:
            continue
        counts[node.nodepool] = counts.get(node.nodepool, 0) + 1
        if not node.ready or node.marked_for_deletion:
            disrupting[node.nodepool] = disrupting.get(node.nodepool, 0) + 1
    out: dict[str, PoolBudget] = {}
    for name, budgets in budgets_by_nodepool.items():
        allowance = allowed_by_reason(budgets, now=now, node_count=counts.get(name, 0), reason=reason)
        out[name] = PoolBudget(name, reason, counts.get(name, 0), allowance.allowed, disrupting.get(name, 0),
                               allowance.errors)
    return out


_MAX_WINDOWS: Final = 400           # overlapping windows joined before calling the window endless (daily: a year)


def active_until(budget: Budget, now: dt.datetime) -> dt.datetime | None:
    """When an active scheduled budget stops applying, windows that overlap joined (the end is
    excluded: at that moment it no longer applies). None when it does not apply now, has no schedule,
    or its windows keep joining up (`* * * * *` for `1h` never lets go). Raises BudgetError as is_active() does."""
    if budget.schedule is None or not is_active(budget, now):
        return None
    duration = _duration(budget)
    now = _utc(now)
    expression = cron_expression(budget.schedule)
    # the latest hit at or before now opens the window that holds now
    hit: dt.datetime = croniter(expression, now + dt.timedelta(seconds=1)).get_prev(dt.datetime)
    for _ in range(_MAX_WINDOWS):
        following = next_hit(budget.schedule, hit)
        if following > hit + duration:
            return hit + duration
        hit = following
    return None


def budget_hold(budgets: Sequence[Budget], *, nodepool: str, reason: DisruptionReason, node_count: int,
                disrupting: int, now: dt.datetime) -> Hold | None:
    """What in `nodepool`'s budgets keeps another node from being disrupted for `reason` now, or None.

    `until` is when the last budget closing the way stops applying (None while a budget without a
    schedule, or one that cannot be read, keeps it closed); a window opening later is not foreseen."""
    allowance = allowed_by_reason(budgets, now=now, node_count=node_count, reason=reason)
    if allowance.allowed - disrupting > 0:
        return None
    why = (f'NodePool "{nodepool}" allows {allowance.allowed} {reason} disruption(s) of {node_count} node(s) '
           f"and {disrupting} are already disrupting")
    if allowance.errors:
        return Hold(f"{why}; {'; '.join(allowance.errors)}")
    ends: list[dt.datetime] = []
    for budget in budgets:
        if budget.reasons is not None and reason not in budget.reasons:
            continue
        if allowed_disruptions(budget, now=now, node_count=node_count) - disrupting > 0:
            continue                      # this one leaves room; another closes the way
        end = active_until(budget, now)
        if end is None:
            return Hold(why)              # closed for as long as the spec stays
        ends.append(end)
    return Hold(why, max(ends) if ends else None)


class PassBudgets:
    """What each NodePool's budgets leave for one disruption pass, per reason: nodes already not Ready or being
    deleted use up the allowance (budget_mapping), and so does each node the pass itself takes (`take`)."""

    def __init__(self, nodepools: Mapping[str, NodePool], nodes: Iterable[Mapping[str, Any]], now: dt.datetime,
                 reasons: Sequence[DisruptionReason] = REASONS, *, leaving: Collection[str] = ()) -> None:
        self.nodepools, self.now = nodepools, now
        counted = budget_nodes(nodes, leaving)
        budgets = {name: pool.spec.disruption.budgets for name, pool in nodepools.items()}
        self.mapping = {reason: budget_mapping(budgets, counted, now=now, reason=reason) for reason in reasons}
        self.taken: dict[str, int] = {}            # nodes of each NodePool the pass takes, whatever the reason

    def take(self, nodepool: str, reason: DisruptionReason) -> Hold | None:
        """Count one more of `nodepool`'s nodes as disrupted for `reason` when its budgets leave room and return
        None; else what holds it (budget_hold). A name that is not a NodePool's is not bounded."""
        if nodepool not in self.nodepools:
            return None
        counted = self.mapping[reason][nodepool]
        hold = budget_hold(self.nodepools[nodepool].spec.disruption.budgets, nodepool=nodepool, reason=reason,
                           node_count=counted.node_count, disrupting=counted.disrupting + self.taken.get(nodepool, 0),
                           now=self.now)
        if hold is None:
            self.taken[nodepool] = self.taken.get(nodepool, 0) + 1
        return hold
