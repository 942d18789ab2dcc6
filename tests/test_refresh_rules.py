"""The refresh rules' boundaries: when an incremental tick runs in full, where a full one diffs.

Plain Python: no Spark, no catalog. The rules (``ivm/plan/refresh.py``) decide
from numbers the snapshots' summaries give, so each threshold is checked at,
just below and just above it, turned off (0), and against a size the
summaries could not tell (``UNKNOWN_ROWS``), with the reason a report gives.
``tests/test_incremental.py`` checks that the write job asks them.
"""

from __future__ import annotations

import pytest

from airflow_provider_ct.core.settings import (
    LARGE_CHANGE_SHARE,
    RETRY_INCREMENTAL_AFTER,
    ROWS_ON_DRIVER,
    SMALL_INPUT_ROWS,
    SMALL_INPUT_ROWS_ENV,
)
from airflow_provider_ct.core.tables import UNKNOWN_ROWS
from airflow_provider_ct.ivm.plan.decision import RefreshMode, RefreshSettings
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, GROUP, LINEAR, PARTITION
from airflow_provider_ct.ivm.plan.refresh import (
    PastTick,
    full_diff_on_driver,
    history_reason,
    join_reads_reason,
    keyed_reads_reason,
    large_change_reason,
    outer_reads_reason,
    small_inputs_reason,
)


@pytest.mark.parametrize(
    ("rows", "reads", "limit", "full"),
    [
        (9 * SMALL_INPUT_ROWS, 9, SMALL_INPUT_ROWS, True),  # at: q2's nine reads
        (9 * SMALL_INPUT_ROWS + 1, 9, SMALL_INPUT_ROWS, False),  # one row above
        (3 * SMALL_INPUT_ROWS + 1, 3, SMALL_INPUT_ROWS, False),
        (0, 1, SMALL_INPUT_ROWS, True),
        (5, 3, 0, False),  # 0 turns it off, as it does the small-inputs rule
        (5, 0, SMALL_INPUT_ROWS, False),  # no keyed table changed: no reads counted
        (UNKNOWN_ROWS, 9, SMALL_INPUT_ROWS, False),  # a summary without totals
    ],
)
def test_keyed_reads(rows: int, reads: int, limit: int, full: bool) -> None:
    reason = keyed_reads_reason(rows, reads, limit)
    assert (reason is not None) == full, reason
    if reason is not None:
        assert (
            f"its {reads} table reads; the inputs hold {rows:,} rows, at most {limit:,} "
            f"per read ({SMALL_INPUT_ROWS_ENV})" in reason
        )


def _small(rows: int, limit: int) -> str:
    return (
        f"the inputs hold {rows:,} rows, at most {limit:,} (CT_FULL_BELOW_ROWS): "
        "a full correction costs less than an incremental one at this size"
    )


@pytest.mark.parametrize(
    ("rows", "limit", "expected"),
    [
        (SMALL_INPUT_ROWS, SMALL_INPUT_ROWS, _small(SMALL_INPUT_ROWS, SMALL_INPUT_ROWS)),  # at
        (SMALL_INPUT_ROWS - 1, SMALL_INPUT_ROWS, _small(SMALL_INPUT_ROWS - 1, SMALL_INPUT_ROWS)),
        (SMALL_INPUT_ROWS + 1, SMALL_INPUT_ROWS, None),  # above
        (0, SMALL_INPUT_ROWS, _small(0, SMALL_INPUT_ROWS)),  # empty inputs
        (1, 1, _small(1, 1)),
        (2, 1, None),
        (0, 0, None),  # 0 turns the rule off, even over empty inputs
        (5, 0, None),
        (UNKNOWN_ROWS, SMALL_INPUT_ROWS, None),  # a summary without totals: not small
        (UNKNOWN_ROWS + 10, SMALL_INPUT_ROWS, None),  # one unknown input among others
    ],
)
def test_small_inputs(rows: int, limit: int, expected: str | None) -> None:
    assert small_inputs_reason(rows, limit, GROUP) == expected


@pytest.mark.parametrize("strategy", [LINEAR, GROUP, PARTITION, FULL])
def test_small_inputs_send_every_strategy_but_aggregates_in_place_full(strategy: str) -> None:
    assert small_inputs_reason(10, 250_000, strategy) == _small(10, 250_000)
    assert small_inputs_reason(10, 250_000, AGGREGATE) is None
    # A keyed block the driver evaluates has no Spark job's fixed cost either.
    assert small_inputs_reason(10, 250_000, strategy, on_driver=True) is None


def _settings(refresh: str) -> RefreshSettings:
    """The thresholds a tick of ``refresh`` runs under, as the write job takes them."""
    return RefreshSettings.of(RefreshMode.parse(refresh))


def test_small_inputs_message_names_the_numbers_and_the_variable() -> None:
    reason = small_inputs_reason(1_234, 250_000, GROUP)
    assert reason == _small(1_234, 250_000)
    assert reason is not None and reason.startswith("the inputs hold 1,234 rows, at most 250,000")
    assert f"({SMALL_INPUT_ROWS_ENV})" in reason


def test_small_inputs_follow_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``refresh="auto"`` applies the rule; the variable moves or removes the limit."""
    monkeypatch.delenv(SMALL_INPUT_ROWS_ENV, raising=False)
    assert small_inputs_reason(SMALL_INPUT_ROWS, _settings("auto").small_rows, GROUP) is not None
    assert small_inputs_reason(0, _settings("incremental").small_rows, GROUP) is None
    assert small_inputs_reason(0, _settings(FULL).small_rows, GROUP) is None
    monkeypatch.setenv(SMALL_INPUT_ROWS_ENV, "10")
    assert small_inputs_reason(10, _settings("auto").small_rows, GROUP) == _small(10, 10)
    assert small_inputs_reason(11, _settings("auto").small_rows, GROUP) is None
    monkeypatch.setenv(SMALL_INPUT_ROWS_ENV, "0")
    assert small_inputs_reason(0, _settings("auto").small_rows, GROUP) is None


def _large(changed: int, rows: int, share_text: str, percent: str) -> str:
    return (
        f"the inputs changed by about {changed:,} rows of {rows:,} ({percent}, above "
        f"{share_text}, CT_FULL_ABOVE_CHANGE): a change this large touches most groups, "
        "and recomputing them costs more than a full correction"
    )


@pytest.mark.parametrize(
    ("rows", "changed", "share", "expected"),
    [
        (1_000, 100, 0.1, None),  # at the share: not above it
        (1_000, 99, 0.1, None),  # below
        (1_000, 101, 0.1, _large(101, 1_000, "10%", "10.1%")),  # above
        (1_000, 0, 0.1, None),  # nothing changed
        (2_000_000, 4_000_000, 0.1, _large(4_000_000, 2_000_000, "10%", "200.0%")),
        (10, 6, 0.5, _large(6, 10, "50%", "60.0%")),
        (10, 5, 0.5, None),
        (0, 5, 0.1, _large(5, 0, "10%", "500.0%")),  # inputs emptied: rows count as 1
        (1_000, 1_000_000, 0.0, None),  # 0 turns the rule off
        (1_000, 100_000, 100.0, None),  # a share above 1: at it
        (1_000, 100_001, 100.0, _large(100_001, 1_000, "10000%", "10000.1%")),
        (UNKNOWN_ROWS, 500, 0.1, None),  # unknown rows: not a reason
        (1_000, UNKNOWN_ROWS, 0.1, None),  # unknown change: not a reason
        (1_000, UNKNOWN_ROWS + 3, 0.1, None),  # one unknown input among others
    ],
)
def test_large_change_of_a_group_view(
    rows: int, changed: int, share: float, expected: str | None
) -> None:
    assert large_change_reason(GROUP, rows, changed, share) == expected


@pytest.mark.parametrize("strategy", [LINEAR, FULL, "anything else"])
def test_large_change_concerns_only_group_views(strategy: str) -> None:
    """Linear strategies cost what changed: however large, the change is not a reason."""
    assert large_change_reason(strategy, 1_000, 1_000_000, 0.1) is None
    assert large_change_reason(GROUP, 1_000, 1_000_000, 0.1) is not None


def test_large_change_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``refresh="auto"`` applies the rule; the variable moves or removes the share."""
    monkeypatch.delenv("CT_FULL_ABOVE_CHANGE", raising=False)
    assert _settings("auto").large_change == LARGE_CHANGE_SHARE
    assert large_change_reason(GROUP, 1_000, 101, _settings("auto").large_change) is not None
    assert large_change_reason(GROUP, 1_000, 101, _settings("incremental").large_change) is None
    monkeypatch.setenv("CT_FULL_ABOVE_CHANGE", "0.5")
    assert large_change_reason(GROUP, 1_000, 500, _settings("auto").large_change) is None
    reason = large_change_reason(GROUP, 1_000, 501, _settings("auto").large_change)
    assert reason == _large(501, 1_000, "50%", "50.1%")
    monkeypatch.setenv("CT_FULL_ABOVE_CHANGE", "0")
    assert large_change_reason(GROUP, 1_000, 1_000_000, _settings("auto").large_change) is None


@pytest.mark.parametrize(
    ("rows", "limit", "expected"),
    [
        (ROWS_ON_DRIVER, ROWS_ON_DRIVER, True),  # at
        (ROWS_ON_DRIVER - 1, ROWS_ON_DRIVER, True),  # below
        (ROWS_ON_DRIVER + 1, ROWS_ON_DRIVER, False),  # above
        (0, ROWS_ON_DRIVER, True),  # an empty target
        (0, 0, False),  # 0 turns the driver's diff off
        (UNKNOWN_ROWS, ROWS_ON_DRIVER, False),  # an unknown size goes to Spark
    ],
)
def test_full_correction_diffs_on_the_driver_up_to_the_limit(
    rows: int, limit: int, expected: bool
) -> None:
    assert full_diff_on_driver(rows, limit) is expected


# -- the view's own cost history ------------------------------------------------------------


def _past(*ticks: tuple[str, int, int]) -> list[PastTick]:
    return [PastTick(strategy, ms, rows) for strategy, ms, rows in ticks]


def test_history_needs_a_full_batch_and_two_incremental_ones_to_judge() -> None:
    assert history_reason(_past(("group", 900, 10), ("group", 900, 10)), 10, 8) is None
    assert history_reason(_past(("full", 100, 10), ("group", 900, 10)), 10, 8) is None
    assert history_reason([], 10, 8) is None
    slow = _past(("full", 100, 10), ("group", 900, 10), ("group", 900, 10))
    assert history_reason(slow, 10, 8) is not None
    assert history_reason(slow, 10, 0) is None  # CT_RETRY_INCREMENTAL_AFTER=0: the rule is off


def test_incremental_batches_slower_than_the_full_one_send_the_view_full() -> None:
    history = _past(
        ("full", 1000, 1000), ("group", 900, 1000), ("group", 1500, 1000), ("group", 1200, 1000)
    )
    reason = history_reason(history, 1000, 8)
    assert reason is not None and "median 1,200 ms against 1,000 ms" in reason
    # The same full batch over half the rows scales down: still slower.
    assert history_reason(history, 500, 8) is not None
    # Over three times the rows the full one would cost 3,000 ms: incremental wins.
    assert history_reason(history, 3000, 8) is None
    # At exactly the full cost incremental is kept (a tie is no loss).
    tie = _past(("full", 1200, 1000), ("group", 1200, 1000), ("group", 1200, 1000))
    assert history_reason(tie, 1000, 8) is None


def test_one_slow_tick_of_two_does_not_send_a_view_full() -> None:
    """The first tick after a driver start decodes its inputs' files: alone, it decides nothing."""
    cold = _past(("full", 1000, 10), ("aggregate", 3000, 10), ("aggregate", 400, 10))
    assert history_reason(cold, 10, 8) is None
    both = _past(("full", 1000, 10), ("aggregate", 3000, 10), ("aggregate", 2500, 10))
    assert history_reason(both, 10, 8) is not None
    # Of three, the median: one fast tick does not keep a slow view incremental.
    third = [*both, *_past(("aggregate", 300, 10))]
    assert history_reason(third, 10, 8) is not None


def test_after_enough_batches_in_full_incremental_is_tried_again() -> None:
    slow = [("full", 100, 10), ("group", 900, 10), ("group", 900, 10)]
    fulls = [("full", 100, 10)] * (RETRY_INCREMENTAL_AFTER - 1)
    after = RETRY_INCREMENTAL_AFTER
    assert history_reason(_past(*slow, *fulls), 10, after) is not None
    assert history_reason(_past(*slow, *fulls, ("full", 100, 10)), 10, after) is None
    # Unknown sizes compare the costs as they are.
    assert history_reason(_past(*slow), UNKNOWN_ROWS, after) is not None


def test_read_history_sends_a_view_full_until_it_is_time_to_estimate_again() -> None:
    from airflow_provider_ct.ivm.plan.refresh import PastTick, read_history_reason

    def tick(share: float | None) -> PastTick:
        return PastTick("full" if share is not None else "group", 100, 1_000, share)

    assert read_history_reason([], 0.5, 3) is None
    assert read_history_reason([tick(None)], 0.5, 3) is None  # the last batch estimated nothing
    assert read_history_reason([tick(0.4)], 0.5, 3) is None  # below the share
    found = read_history_reason([tick(None), tick(0.9)], 0.5, 3)
    assert found is not None and found[1] == 0.9 and "last 1 batch(es)" in found[0]
    assert read_history_reason([tick(0.9)] * 2, 0.5, 3) is not None
    assert read_history_reason([tick(0.9)] * 3, 0.5, 3) is None  # every third: estimate again
    assert read_history_reason([tick(0.9)] * 4, 0.5, 3) is not None
    assert read_history_reason([tick(0.9)], 0.0, 3) is None  # the rule is off


@pytest.mark.parametrize(
    ("sizes", "changed", "expected"),
    [
        ({"l": 900}, ["l"], None),  # one input: only its change is read
        ({"l": 900, "o": 100}, ["o"], "o are joined"),  # 2 * 900 / 1000: l read twice
        ({"l": 900, "o": 100}, ["l"], None),  # 2 * 100 / 1000 = 20% < 50%
        ({"l": 750, "o": 250}, ["l"], "50%"),  # exactly at the share
        ({"l": 800, "o": 200}, ["l"], None),  # 40%
        ({"l": 900, "o": 100}, ["l", "o"], "l, o"),
        ({"l": 900, "o": 100}, [], None),
        ({"l": 0, "o": 0}, ["o"], None),  # empty inputs: nothing to compare
        ({"l": UNKNOWN_ROWS, "o": 100}, ["o"], None),  # sizes the summaries do not tell
    ],
)
def test_join_reads_of_in_place_aggregates(
    sizes: dict[str, int], changed: list[str], expected: str | None
) -> None:
    reason = join_reads_reason(sizes, changed, 0.5)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason
    assert join_reads_reason(sizes, changed, 0.0) is None  # the rule is off


@pytest.mark.parametrize(
    ("sizes", "outer", "expected"),
    [
        ({"l": 900, "s": 100}, ["s"], None),  # q15: the outer reads supplier, 10%
        ({"l": 500, "s": 500}, ["s"], "reads s whole"),  # exactly at the share
        ({"l": 400, "s": 600}, ["s", "s"], "60%"),  # a table read twice counts once
        ({"l": 100, "s": 300, "p": 600}, ["s", "p"], "p, s"),
        ({"l": 900}, [], None),  # an outer over the kept rows alone
        ({"l": 0, "s": 0}, ["s"], None),
        ({"l": UNKNOWN_ROWS, "s": 100}, ["s"], None),
    ],
)
def test_outer_reads_of_nested_plans(
    sizes: dict[str, int], outer: list[str], expected: str | None
) -> None:
    reason = outer_reads_reason(sizes, outer, 0.5)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason
    assert outer_reads_reason(sizes, outer, 0.0) is None  # the rule is off


#: q2's shape (a linear view, its correlated MIN over three tables) and the same block
#: aggregated; the subquery over an outer join stays Spark's.
KEYED_VIEWS = {
    "SELECT p.k, s.name FROM t.p p, t.s s WHERE p.k = s.k AND p.v = (SELECT MIN(s2.v) FROM"
    " t.s s2, t.n n WHERE s2.k = p.k AND n.id = s2.nid AND n.name = 'EU')": True,
    "SELECT s.name, COUNT(*) AS c FROM t.p p, t.s s WHERE p.k = s.k AND p.v = (SELECT"
    " MIN(s2.v) FROM t.s s2, t.n n WHERE s2.k = p.k AND n.id = s2.nid) GROUP BY s.name": True,
    "SELECT p.k FROM t.p p WHERE p.v = (SELECT MIN(s2.v) FROM t.s s2 LEFT JOIN t.n n ON"
    " n.id = s2.nid WHERE s2.k = p.k)": False,
    # q20's nesting: the IN's subquery with an IN and a scalar tied by two columns.
    "SELECT s.name FROM t.s s WHERE s.k IN (SELECT p.k FROM t.p p WHERE p.v IN (SELECT"
    " n.id FROM t.n n) AND p.w > (SELECT SUM(s2.v) FROM t.s s2 WHERE s2.k = p.k AND"
    " s2.nid = p.v))": True,
    # ... but an outer join in the nested subquery stays Spark's.
    "SELECT s.name FROM t.s s WHERE s.k IN (SELECT p.k FROM t.p p WHERE p.v IN (SELECT"
    " n.id FROM t.n n LEFT JOIN t.s s3 ON s3.nid = n.id))": False,
}


@pytest.mark.parametrize(("sql", "on_driver"), sorted(KEYED_VIEWS.items()))
def test_keyed_blocks_the_driver_evaluates_are_spared_the_per_read_rules(
    sql: str, on_driver: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A linear or in-place view whose keyed subqueries inner-join tables of their own is
    evaluated on the driver (no Spark job's fixed cost), so neither the keyed-reads rule
    nor the small-inputs rule prices it; without the driver's cache or rows, they do."""
    from airflow_provider_ct.core.file_cache import CACHE_MB_ENV
    from airflow_provider_ct.core.query import parse_query
    from airflow_provider_ct.ivm.plan.planner import plan_query
    from airflow_provider_ct.ivm.plan.sizes import keyed_on_driver

    plan = plan_query(parse_query(sql))
    assert plan.blocks and plan.blocks[0].keyed, plan
    monkeypatch.setenv(CACHE_MB_ENV, "64")
    monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "1000")
    assert keyed_on_driver(plan) is on_driver
    monkeypatch.setenv(CACHE_MB_ENV, "0")
    assert keyed_on_driver(plan) is False
    monkeypatch.setenv(CACHE_MB_ENV, "64")
    monkeypatch.setenv("CT_DRIVER_DIFF_ROWS", "0")
    assert keyed_on_driver(plan) is False
