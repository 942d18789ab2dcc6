"""One decision per tick: how a view's correction is computed, as a value.

A tick's correction can come from several places: the kept aggregate state
(``in place``), the rebuild of that state, the incremental correction of
the plan's strategy (``linear``, ``group``, ``partition``), or the full
correction. Which one depends on facts gathered before any data is read
(the query's plan, the target's history, sizes from snapshot summaries,
the refresh settings) and on what computing discovers (a type the driver
cannot hold exactly, a kept state that does not fit the change, restricted
reads that cost what the full scan costs, a retraction not found). This
module is the one place that turns those into a decision:

1. A plan whose aggregates are kept in place (``aggregate``) runs in place
   when the target's history allows an incremental tick, this is not a
   ``verify_every`` tick and the refresh rules do not send it full.
   Without history, or sent full by the rules, it *rebuilds*: the state of
   every group and the full correction from it. A kept state that does not
   fit the change is rebuilt too. A ``verify_every`` tick, or a discovery
   that the aggregates cannot be kept in place, leaves the plan to its
   fallback (``group``, ``partition`` or ``full``), decided by rules 2-5.
2. A ``full`` plan (the shape has no strategy, or ``refresh="full"``) runs
   the full correction.
3. Without rows in the target, or without a history that allows an
   incremental tick (drift, rollback, expired snapshots, another query),
   the full correction runs, with the history's reason; so does a tick
   that changes a table the query reads in a subquery when computing found
   neither the keyed rule (:mod:`.keyed`) nor the subqueries' own rules
   (:mod:`.subquery_changes`) able to bound the rows it moves (``not
   keyed``); an in-place plan then keeps no state (no rebuild).
4. The refresh rules (``refresh="auto"`` only, :mod:`.refresh`) may send
   the tick full; so may what computing found (reads not cheaper, the
   correction not possible).
5. Otherwise the plan's incremental correction runs; every
   ``verify_every``-th incremental tick is verified against the full one.

The job (``spark/write_job.py``) gathers :class:`TickFacts`, asks
:func:`decide`, carries the :class:`TickDecision` out, and when carrying
it out discovers a :class:`Fallback`, asks again with it added to the
facts. Every fallback considered is in the decision's ``considered``, for
the report. No rule reads data or raises: each is tested in milliseconds
(``tests/test_decision.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from airflow_provider_ct.core.settings import (
    full_read_share,
    large_change_share,
    retry_incremental_after,
    small_input_rows,
)
from airflow_provider_ct.ivm.plan.history import IncrementalBase
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, Plan


@dataclass(frozen=True)
class RefreshSettings:
    """The thresholds of the refresh rules a tick runs under; each 0 when its rule is off."""

    #: Inputs of at most this many rows run in full (``core/settings.SMALL_INPUT_ROWS``).
    small_rows: int = 0
    #: A ``group`` tick whose change is a larger share of its inputs runs in full.
    large_change: float = 0.0
    #: A grouped tick whose restricted reads cover this share of the inputs runs in full.
    read_share: float = 0.0
    #: Batches in full after which a view that lost incrementally tries again.
    retry_after: int = 0
    #: Every N-th incremental tick is verified against the full correction (0: never).
    verify_every: int = 0

    @classmethod
    def of(cls, mode: RefreshMode, verify_every: int = 0) -> RefreshSettings:
        """The settings of ``mode``: only ``auto`` chooses by size and by the view's history.

        The environment's values are read now (``core/settings``), so a job's
        environment, or a test's ``monkeypatch``, wins; a bad value fails here.
        """
        if mode is not RefreshMode.AUTO:
            return cls(verify_every=verify_every)
        return cls(
            small_rows=small_input_rows(),
            large_change=large_change_share(),
            read_share=full_read_share(),
            retry_after=retry_incremental_after(),
            verify_every=verify_every,
        )


class Action(StrEnum):
    """What the job computes."""

    #: The kept aggregate state plus the change's (``aggregate``).
    IN_PLACE = "in place"
    #: The state of every group from the pinned inputs, and the full correction from it.
    REBUILD = "rebuild"
    #: The plan's incremental correction (``linear``, ``group``, ``partition``).
    INCREMENTAL = "incremental"
    #: ``desired - persisted`` over the whole query and the whole head.
    FULL = "full"


class Discovery(StrEnum):
    """What computing a decision found that sends the tick elsewhere."""

    #: The aggregates cannot be kept in place this tick (inexact types, too many
    #: groups, a sum past its type, joins that read what full reads).
    NOT_IN_PLACE = "not in place"
    #: The kept state does not fit the change (none yet, another definition,
    #: other snapshots, a retraction not found): rebuild it.
    STATE_UNUSABLE = "state unusable"
    #: The restricted reads cover about what the full correction reads.
    NOT_CHEAPER = "not cheaper"
    #: The incremental correction cannot be computed exactly (changes
    #: unavailable, a retraction not found in the head).
    NOT_POSSIBLE = "not possible"
    #: A keyed subquery's table changed and the keyed rule does not serve this
    #: tick (the tie not confirmed, a changed table without the key, reads that
    #: reach every file): its tables are read in a subquery like any other's.
    NOT_KEYED = "not keyed"


@dataclass(frozen=True)
class Fallback:
    """A discovery made while carrying a decision out, with why, and numbers for the report."""

    discovery: Discovery
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.discovery.value}: {self.reason}"


#: Why the refresh rules send a tick of ``plan`` full, with numbers for the
#: report, or ``("", {})``. Called at most once per plan, and only when the
#: target's history allows an incremental tick (it reads summaries and history).
SizeRules = Callable[[Plan], "tuple[str, Mapping[str, Any]]"]


@dataclass(frozen=True)
class TickFacts:
    """What a tick's decision is made from, gathered without reading data."""

    #: The query's plan under the tick's refresh mode.
    plan: Plan
    #: Whether the target's head holds a snapshot to compare with.
    has_rows: bool
    #: What an incremental tick starts from (None: the history does not allow one).
    base: IncrementalBase | None
    #: Why there is no base (the history's reason), when ``base`` is None.
    no_base_reason: str
    settings: RefreshSettings
    size_rules: SizeRules
    #: What carrying out earlier decisions of this tick found, in order.
    found: tuple[Fallback, ...] = ()

    def with_found(self, fallback: Fallback) -> TickFacts:
        return replace(self, found=(*self.found, fallback))


@dataclass(frozen=True)
class TickDecision:
    """How this tick computes its correction, and why."""

    action: Action
    #: The plan the action runs (a fallback's, when the in-place one gave way).
    plan: Plan
    #: What the batch records as its strategy (``ct.refresh``): the plan's, or ``full``.
    strategy: str
    reason: str
    #: The incremental tick's base (``IN_PLACE``, ``INCREMENTAL``).
    base: IncrementalBase | None = None
    #: ``INCREMENTAL``: this tick is verified against the full correction.
    verify: bool = False
    #: Every fallback considered on the way here, in order, for the report.
    considered: tuple[str, ...] = ()
    #: Numbers for the report (the read estimate that sent it full...).
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def incremental_ticks(self) -> int:
        """Incremental ticks since the last full correction, this one included (0: full)."""
        if self.action in (Action.IN_PLACE, Action.INCREMENTAL) and self.base is not None:
            return self.base.incremental_ticks + 1
        return 0


def decide(facts: TickFacts) -> TickDecision:
    """The tick's decision from ``facts`` (see the module docstring for the rules, in order)."""
    plan, considered = facts.plan, tuple(f.describe() for f in facts.found)
    for found in facts.found:
        if found.discovery in (Discovery.NOT_IN_PLACE, Discovery.NOT_KEYED):
            plan = plan.fallback(found.reason)  # an in-place plan keeps no state (rule 3)
    if plan.strategy == AGGREGATE:
        verify = _verify_reason(facts)
        if verify is None:
            return replace(_in_place(facts, plan), considered=considered)
        plan = plan.fallback(verify)
        considered = (*considered, f"{Discovery.NOT_IN_PLACE.value}: {verify}")
    return replace(_incremental_or_full(facts, plan), considered=considered)


def _subquery_moved(facts: TickFacts, plan: Plan) -> str | None:
    """Why a tick that changed a table read in a subquery runs in full (rule 3), or None.

    Only once computing found no rule that bounds it (``not keyed``), which has already
    sent an in-place plan to its fallback (:func:`decide`)."""
    if facts.base is None:
        return None
    not_keyed = [f for f in facts.found if f.discovery is Discovery.NOT_KEYED]
    if not not_keyed:  # keyed, else each subquery's rule bounds the rows it moves
        return None
    moved = sorted(plan.fixed_inputs & facts.base.changed)
    if not moved:
        return None
    return f"{', '.join(moved)} changed and is read in a subquery: {not_keyed[-1].reason}"


def _verify_reason(facts: TickFacts) -> str | None:
    """Why an in-place tick gives way to its fallback's verified tick (rule 1), or None."""
    every, base = facts.settings.verify_every, facts.base
    if facts.has_rows and base is not None and 0 < every <= base.incremental_ticks + 1:
        return f"verify_every={every}: the fallback's tick is verified"
    return None


def _sent_full(facts: TickFacts, plan: Plan) -> tuple[str, Mapping[str, Any]] | None:
    """Why ``plan`` cannot tick incrementally before anything is computed (rules 3 and 4's
    size rules), with numbers for the report; None when it can."""
    if not facts.has_rows:
        return "the target has no rows yet", {}
    if facts.base is None:
        return facts.no_base_reason, {}
    moved = _subquery_moved(facts, plan)
    if moved:  # with the read estimate that found the keyed rule unfit, if that was why
        return moved, _not_keyed_details(facts)
    why, details = facts.size_rules(plan)
    return (why, details) if why else None


def _not_keyed_details(facts: TickFacts) -> dict[str, Any]:
    """The numbers of the last ``not keyed`` discovery (the read estimate the batch then
    records, so the next tick goes full without pricing again), or none."""
    found = [f for f in facts.found if f.discovery is Discovery.NOT_KEYED]
    return dict(found[-1].details) if found else {}


def _in_place(facts: TickFacts, plan: Plan) -> TickDecision:
    """Rule 1: in place, or a rebuild of the state."""
    sent = _sent_full(facts, plan)
    if sent is not None:
        return _rebuild(plan, *sent)
    last = facts.found[-1] if facts.found else None
    if last is not None and last.discovery is Discovery.STATE_UNUSABLE:
        return _rebuild(plan, f"the kept aggregate state is rebuilt: {last.reason}")
    return TickDecision(Action.IN_PLACE, plan, AGGREGATE, plan.reason, facts.base)


def _rebuild(plan: Plan, reason: str, details: Mapping[str, Any] | None = None) -> TickDecision:
    return TickDecision(Action.REBUILD, plan, FULL, reason, details=dict(details or {}))


def _incremental_or_full(facts: TickFacts, plan: Plan) -> TickDecision:
    """Rules 2-5 for a plan without in-place aggregates."""
    if not plan.incremental:  # an in-place plan's full fallback keeps what priced it out
        return _full(plan, plan.reason, _not_keyed_details(facts))
    sent = _sent_full(facts, plan)
    if sent is not None:
        return _full(plan, *sent)
    for found in reversed(facts.found):
        if found.discovery is Discovery.NOT_CHEAPER:
            return _full(plan, found.reason, found.details)
        if found.discovery is Discovery.NOT_POSSIBLE:
            return _full(plan, f"the incremental correction is not possible: {found.reason}")
    assert facts.base is not None  # _sent_full checked it
    every = facts.settings.verify_every
    verify = every > 0 and facts.base.incremental_ticks + 1 >= every
    return TickDecision(
        Action.INCREMENTAL, plan, plan.strategy, plan.reason, facts.base, verify=verify
    )


def _full(plan: Plan, reason: str, details: Mapping[str, Any] | None = None) -> TickDecision:
    return TickDecision(Action.FULL, plan, FULL, reason, details=dict(details or {}))
