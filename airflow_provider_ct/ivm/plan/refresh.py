"""The refresh rules: when an incremental tick runs in full, and where a full one diffs.

Each rule is a decision over numbers the snapshots' summaries give (rows,
estimated change rows, bytes) and the thresholds of
:mod:`~airflow_provider_ct.core.settings`; the write job
(``spark/write_job.py``) gathers the numbers and asks here. Kept apart
from Spark so that every threshold's boundaries (at, below, above, 0 = off,
an unknown size) are tested in milliseconds (``tests/test_refresh_rules.py``),
and the reason a report gives is written in one place.

A rule returns the reason text for the report, or None when it does not
apply.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from airflow_provider_ct.core.settings import (
    LARGE_CHANGE_SHARE_ENV,
    RETRY_INCREMENTAL_AFTER_ENV,
    SMALL_INPUT_ROWS_ENV,
)
from airflow_provider_ct.core.tables import UNKNOWN_ROWS
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, GROUP


def small_inputs_reason(
    rows: int, limit: int, strategy: str, *, on_driver: bool = False
) -> str | None:
    """Why inputs of ``rows`` rows in all are too small for an incremental tick to pay, or None.

    An incremental tick runs several small Spark jobs (the changes, the
    affected keys, the restricted query, the target's affected rows), each
    with a fixed cost; a full correction runs the query once. Over small
    inputs the full one is cheaper whatever changed (docs/decisions.md).
    Not so for aggregates kept in place (``aggregate``): a small change is
    read, aggregated, added and diffed on the driver without a Spark job,
    and a nested plan's outer query reads a state far smaller than the
    inputs, so such a tick costs less than the full query at any size
    (docs/decisions.md); nor for a keyed block the driver evaluates
    (``on_driver``: its keys' rows fetched from the warm driver's cache,
    no Spark job either, TPC-H q2 at SF 0.1). The view's cost history
    still catches one that does not pay (:func:`history_reason`).

    :param rows: the pinned inputs' live rows by their summaries; at least
        :data:`~airflow_provider_ct.core.tables.UNKNOWN_ROWS` when a summary
        lacks them, which is above any limit of rows a deployment sets.
    :param limit: :func:`~airflow_provider_ct.core.settings.small_input_rows`
        (0: the rule is off).
    :param strategy: the plan's; ``aggregate`` is never concerned.
    :param on_driver: the plan's keyed block is likely evaluated on the driver.
    """
    if limit <= 0 or rows > limit or strategy == AGGREGATE or on_driver:
        return None
    return (
        f"the inputs hold {rows:,} rows, at most {limit:,} ({SMALL_INPUT_ROWS_ENV}): "
        "a full correction costs less than an incremental one at this size"
    )


def keyed_reads_reason(rows: int, reads: int, limit: int) -> str | None:
    """Why a tick that recomputes keyed subqueries' keys costs more than a full one, or None.

    Such a tick (:mod:`~airflow_provider_ct.ivm.plan.keyed`) evaluates the
    query twice in Spark, over the keys' rows as they are and as they were.
    Each evaluation costs about the full query's fixed part, which grows
    with its table reads (each a join or a subquery's decorrelated
    aggregate): TPC-H q2 (nine reads) over 2,000-row local copies of its
    tables took 1.0 s warm, against 1.3 s for the whole query at SF 1
    (docs/decisions.md). So the tick pays only where the full query's
    scans outweigh that, and this reuses the small-inputs limit per read:
    inputs of at most ``limit`` rows per table read run in full.

    :param rows: the pinned inputs' live rows, as for :func:`small_inputs_reason`.
    :param reads: the table reads of the query's blocks, subqueries included.
    :param limit: :func:`~airflow_provider_ct.core.settings.small_input_rows` (0: off).
    """
    if limit <= 0 or reads <= 0 or rows > limit * reads:
        return None
    return (
        "a tick that changes keyed subqueries' tables evaluates the query twice in Spark, "
        f"each time at about the fixed cost of its {reads} table reads; the inputs hold "
        f"{rows:,} rows, at most {limit:,} per read ({SMALL_INPUT_ROWS_ENV}): a full "
        "correction costs less"
    )


def large_change_reason(strategy: str, rows: int, changed: int, share: float) -> str | None:
    """Why inputs that changed by ``changed`` of ``rows`` rows are too much for a tick, or None.

    Recomputing the affected groups costs about what their share of the
    inputs costs, plus an incremental tick's fixed jobs; once the change is
    a large share of the inputs it touches most groups, and the full
    correction, which runs the query once, is cheaper (measured in
    docs/decisions.md). Linear strategies cost what changed and are left
    alone, and so is ``partition``: its cost follows the days the change
    touches, not its size (a day's backfill is large and cheap), and the
    view's cost history (:func:`history_reason`) catches one spread over
    every day. An unknown size (either number at least
    :data:`~airflow_provider_ct.core.tables.UNKNOWN_ROWS`) is not a reason.

    :param strategy: the plan's strategy; only ``group`` is concerned.
    :param rows: the pinned inputs' live rows by their summaries.
    :param changed: their change since the last batch's snapshots, by
        :func:`~airflow_provider_ct.ivm.changes.table_changes.estimated_change_rows`.
    :param share: :func:`~airflow_provider_ct.core.settings.large_change_share`
        (0: the rule is off).
    """
    if share <= 0 or strategy != GROUP:
        return None
    if max(rows, changed) >= UNKNOWN_ROWS or changed <= share * rows:
        return None
    return (
        f"the inputs changed by about {changed:,} rows of {rows:,} ({changed / max(rows, 1):.1%}, "
        f"above {share:.0%}, {LARGE_CHANGE_SHARE_ENV}): a change this large touches most groups, "
        "and recomputing them costs more than a full correction"
    )


def join_reads_reason(
    sizes: Mapping[str, int], changed: Collection[str], share: float
) -> str | None:
    """Why keeping aggregates in place would read about what the full correction reads, or None.

    The delta rules join each changed input's change with the other inputs
    as they are, read whole (twice: once for the rows gained, once for
    those lost); the full correction reads every input once. A view over
    one input, or whose changed inputs are small beside the rest, reads
    little; a change of a large input joined with another large one reads
    both again. Compared as bytes of the pinned snapshots' files.

    :param sizes: input -> bytes of its pinned snapshot (summaries).
    :param changed: the inputs whose snapshot moved since the last batch.
    :param share: :func:`~airflow_provider_ct.core.settings.full_read_share` (0: off).
    """
    total = sum(sizes.values())
    if share <= 0 or total <= 0 or total >= UNKNOWN_ROWS:
        return None
    read = sum(2 * (total - sizes[name]) for name in changed if name in sizes)
    if read < share * total:
        return None
    return (
        f"the changes of {', '.join(sorted(changed))} are joined with the other inputs read "
        f"whole: about {read / total:.0%} of the inputs' bytes against 100% for the full "
        f"correction (at least {share:.0%})"
    )


def outer_reads_reason(
    sizes: Mapping[str, int], outer_inputs: Collection[str], share: float
) -> str | None:
    """Why a nested plan's outer query would read about what the full correction reads.

    The outer query of a CTE or derived table kept in place
    (:mod:`.nested`) is recomputed every tick over the kept groups' rows
    *and* the inputs it reads itself, whole; the tick saves only the inner
    select's reads. When the outer's own inputs are most of the bytes,
    that saves little and the tick runs in full.

    :param sizes: input -> bytes of its pinned snapshot (summaries).
    :param share: :func:`~airflow_provider_ct.core.settings.full_read_share` (0: off).
    """
    total = sum(sizes.values())
    if share <= 0 or total <= 0 or total >= UNKNOWN_ROWS:
        return None
    read = sum(sizes.get(name, 0) for name in set(outer_inputs))
    if read < share * total:
        return None
    return (
        f"the query around the kept aggregate reads {', '.join(sorted(set(outer_inputs)))} "
        f"whole on every tick: {read / total:.0%} of the inputs' bytes (at least {share:.0%})"
    )


def full_diff_on_driver(rows: int, limit: int) -> bool:
    """Whether a full correction over sides of about ``rows`` rows diffs on the driver.

    ``rows`` is only a guess (the result can outgrow it in one tick): the
    driver's pulls stop past ``limit`` either way, at the price of
    evaluating the query once more, so a wrong guess costs time, never rows.

    :param rows: the target head's live rows, or the inputs' for a new target.
    :param limit: :func:`~airflow_provider_ct.core.settings.full_rows_on_driver`
        (0: the driver's diff is off).
    """
    return limit > 0 and rows <= limit


@dataclass(frozen=True)
class PastTick:
    """One earlier batch of a view: how it was computed, what it cost, over how many rows."""

    strategy: str
    compute_ms: int
    input_rows: int
    #: The restricted reads' share of the inputs' bytes, if the read estimate sent it full.
    read_share: float | None = None


#: Incremental batches the rule compares (their median) with the last full one.
INCREMENTAL_SAMPLE = 3


def read_history_reason(
    history: Sequence[PastTick], share_limit: float, retry_after: int
) -> tuple[str, float] | None:
    """Why the last batches' read estimates send this tick in full without a new one, or None.

    The read estimate (:mod:`~airflow_provider_ct.ivm.plan.read_estimate`) needs
    the affected keys, so the inputs' changes are read before it can say
    "full": a cost paid for nothing on every tick of a view whose restricted
    reads always cover most files. A view whose newest batches all went full
    for their reads goes full again at once, with the share they recorded,
    and estimates again every ``retry_after`` batches (keys and clustering
    change). Returns the reason and that share.
    """
    if share_limit <= 0 or retry_after <= 0 or not history:
        return None
    streak = 0
    for past in reversed(history):
        if past.read_share is None or past.read_share < share_limit:
            break
        streak += 1
    if streak == 0 or streak % retry_after == 0:
        return None
    share = history[-1].read_share
    assert share is not None
    reason = (
        f"the last {streak} batch(es) of this view went full because their restricted reads "
        f"covered {share:.0%} of the inputs' bytes (at least {share_limit:.0%}); the change is "
        f"not read to estimate again until {retry_after} such batches"
    )
    return reason, share


def history_reason(history: Sequence[PastTick], rows: int, retry_after: int) -> str | None:
    """Why this view's own history says a full correction is cheaper, or None.

    The other rules guess from sizes; this one reads what the view's last
    batches actually cost (``ct.compute-ms``, newest last). When the median
    of its last incremental batches took longer than its last full one,
    scaled to today's input rows (a full correction costs about its scan),
    the tick runs in full: ``refresh="auto"`` must not keep losing to the
    full correction. Sizes drift, so after ``retry_after`` batches in full
    it tries again.

    :param retry_after: :func:`~airflow_provider_ct.core.settings.retry_incremental_after`
        (0: the rule is off).
    """
    fulls = [t for t in history if t.strategy == FULL]
    incremental = [t for t in history if t.strategy != FULL]
    if retry_after <= 0 or not fulls or len(incremental) < 2:
        return None
    tail = history[-retry_after:]
    if len(tail) == retry_after and all(t.strategy == FULL for t in tail):
        return None  # time to measure incremental again
    last_full = fulls[-1]
    scale = rows / last_full.input_rows if 0 < last_full.input_rows < UNKNOWN_ROWS else 1.0
    full_ms = (
        last_full.compute_ms * max(scale, 1.0) if rows < UNKNOWN_ROWS else last_full.compute_ms
    )
    sample = sorted(t.compute_ms for t in incremental[-INCREMENTAL_SAMPLE:])
    # The lower median: of two ticks, one slow one (the first after a driver
    # start decodes its inputs' files; a busy machine) does not decide alone.
    median = sample[(len(sample) - 1) // 2]
    if median <= full_ms:
        return None
    return (
        f"this view's last incremental batches took a median {median:,} ms against "
        f"{full_ms:,.0f} ms for a full correction (its last, scaled to {rows:,} input rows): "
        f"running in full, and incremental again after {retry_after} such batches "
        f"({RETRY_INCREMENTAL_AFTER_ENV})"
    )
