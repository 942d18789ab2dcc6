"""compare_and_append against real catalogs (SQLite and PostgreSQL)."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CommitError
from tests.conftest import SCHEMA
from tests.helpers import rows_of, stage_rows

IDENT = "demo.t"


def _table(config: CatalogConfig) -> Any:
    return create_managed_table(config.load(), IDENT, SCHEMA)


def test_append_lands_data_and_frontier_in_one_snapshot(catalog_config: CatalogConfig) -> None:
    table = _table(catalog_config)
    files = stage_rows(table, "b1", [(1, "a"), (2, None), (2, None)])
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(101),
        batch_id="b1",
        add_files=files,
    )
    assert result.landed and not result.already_landed
    assert result.upper == Frontier.at(101)
    head = table.metadata.current_snapshot()
    assert head is not None and (head.snapshot_id,) == result.snapshot_ids
    summary = head.summary.additional_properties
    assert summary[SummaryKeys.TIME] == "100"
    assert summary[SummaryKeys.LOWER] == "0"
    assert summary[SummaryKeys.UPPER] == "101"
    assert summary[SummaryKeys.BATCH_ID] == "b1"
    assert rows_of(table) == Counter({(1, "a"): 1, (2, None): 2})


def test_upper_mismatch_is_an_outcome_not_an_error(catalog_config: CatalogConfig) -> None:
    table = _table(catalog_config)
    assert compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(10), batch_id="first"
    ).landed
    head_before = table.metadata.current_snapshot().snapshot_id
    files = stage_rows(table, "late", [(9, "x")])
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(20),
        batch_id="late",
        add_files=files,
    )
    assert not result.landed
    assert result.upper == Frontier.at(10)
    assert "upper is 10" in result.reason
    table.refresh()
    assert table.metadata.current_snapshot().snapshot_id == head_before
    assert rows_of(table) == Counter()


def test_empty_append_advances_the_upper(catalog_config: CatalogConfig) -> None:
    table = _table(catalog_config)
    for lower, upper in [(0, 5), (5, 9), (9, 30)]:
        result = compare_and_append(
            table,
            expected_upper=Frontier.at(lower),
            new_upper=Frontier.at(upper),
            batch_id=f"tick-{upper}",
        )
        assert result.landed and result.upper == Frontier.at(upper)
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.at(30)
    assert timeline.data_times() == []  # frontier-only snapshots vouch for no data time


def test_several_times_land_atomically_as_several_snapshots(
    catalog_config: CatalogConfig,
) -> None:
    table = _table(catalog_config)
    f1 = stage_rows(table, "multi", [(1, "t10")])
    f2 = stage_rows(table, "multi", [(2, "t20")])
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(31),
        batch_id="multi",
        changes=[TimedChange(10, tuple(f1)), TimedChange(20, tuple(f2)), TimedChange(30)],
    )
    assert result.landed and len(result.snapshot_ids) == 3
    timeline = Timeline.of(table)
    assert [t for t, _ in timeline.data_times()] == [10, 20, 30]
    assert [(e.lower, e.upper) for e in timeline.entries] == [
        (Frontier.at(0), Frontier.at(20)),
        (Frontier.at(20), Frontier.at(30)),
        (Frontier.at(30), Frontier.at(31)),
    ]
    assert rows_of(table, timeline.snapshot_at(15)) == Counter({(1, "t10"): 1})
    assert rows_of(table, timeline.snapshot_at(25)) == Counter({(1, "t10"): 1, (2, "t20"): 1})
    assert timeline.snapshot_at(30) == timeline.head_snapshot_id


def test_retried_append_of_a_landed_batch_reports_success(catalog_config: CatalogConfig) -> None:
    table = _table(catalog_config)
    files = stage_rows(table, "retry", [(7, "once")])
    kwargs: dict[str, Any] = dict(
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(50),
        batch_id="retry",
        add_files=files,
    )
    first = compare_and_append(table, **kwargs)
    second = compare_and_append(table, **kwargs)
    assert first.landed and not first.already_landed
    assert second.landed and second.already_landed
    assert second.snapshot_ids == first.snapshot_ids
    assert rows_of(table) == Counter({(7, "once"): 1})
    # Even after later ticks moved the upper on, the retry still recognises itself.
    compare_and_append(
        table, expected_upper=Frontier.at(50), new_upper=Frontier.at(60), batch_id="next"
    )
    assert compare_and_append(table, **kwargs).already_landed
    assert rows_of(table) == Counter({(7, "once"): 1})


def test_remove_files_and_add_files_in_one_snapshot(catalog_config: CatalogConfig) -> None:
    table = _table(catalog_config)
    old = stage_rows(table, "b1", [(1, "old"), (2, "keep")])
    compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(2),
        batch_id="b1",
        add_files=old,
    )
    new = stage_rows(table, "b2", [(2, "keep"), (3, "new")])
    result = compare_and_append(
        table,
        expected_upper=Frontier.at(2),
        new_upper=Frontier.at(4),
        batch_id="b2",
        add_files=new,
        remove_files=old,
    )
    assert result.landed
    assert rows_of(table) == Counter({(2, "keep"): 1, (3, "new"): 1})
    timeline = Timeline.of(table)
    assert rows_of(table, timeline.snapshot_at(2)) == Counter({(1, "old"): 1, (2, "keep"): 1})


def test_removing_a_file_that_is_not_live_is_refused(catalog_config: CatalogConfig) -> None:
    table = _table(catalog_config)
    stray = stage_rows(table, "stray", [(1, "x")])
    with pytest.raises(CommitError, match="not live"):
        compare_and_append(
            table,
            expected_upper=Frontier.minimum(),
            new_upper=Frontier.at(2),
            batch_id="b",
            remove_files=stray,
        )
    assert Timeline.of(table).upper == Frontier.minimum()


@pytest.mark.parametrize(
    ("expected", "new", "times", "message"),
    [
        (5, 5, [], "beyond the expected upper"),
        (5, 3, [], "beyond the expected upper"),
        (5, 10, [4], "below the expected upper"),
        (5, 10, [10], "not below the new upper"),
        (5, 10, [7, 6], "strictly increase"),
    ],
)
def test_batches_that_break_frontier_rules_are_refused(
    sqlite_catalog_config: CatalogConfig, expected: int, new: int, times: list[int], message: str
) -> None:
    table = _table(sqlite_catalog_config)
    with pytest.raises(CommitError, match=message):
        compare_and_append(
            table,
            expected_upper=Frontier.at(expected),
            new_upper=Frontier.at(new),
            batch_id="bad",
            changes=[TimedChange(t) for t in times],
        )


def test_closed_collection_refuses_appends(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    assert compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.empty(), batch_id="close"
    ).landed
    assert Timeline.of(table).upper.is_empty
    with pytest.raises(CommitError, match="closed collection"):
        compare_and_append(
            table, expected_upper=Frontier.empty(), new_upper=Frontier.empty(), batch_id="after"
        )


def test_unmanaged_table_with_history_is_refused(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace("ext")
    table = catalog.create_table("ext.t", schema=SCHEMA)
    table.append(pa.table({"k": [1], "v": ["a"]}, schema=SCHEMA))
    with pytest.raises(CommitError, match="not managed"):
        compare_and_append(
            table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(1), batch_id="b"
        )


def test_unmanaged_table_with_history_is_adopted_only_against_its_exact_head(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """A target the user created and filled: a batch computed against its head adopts it."""
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace("ext")
    table = catalog.create_table("ext.mine", schema=SCHEMA)
    table.append(pa.table({"k": [1], "v": ["a"]}, schema=SCHEMA))
    head = table.metadata.current_snapshot().snapshot_id
    for expected_upper, expected_head in ((Frontier.at(3), head), (Frontier.minimum(), head + 1)):
        with pytest.raises(CommitError, match="not managed"):
            compare_and_append(
                table,
                expected_upper=expected_upper,
                new_upper=Frontier.at(10),
                batch_id="b",
                expected_head=expected_head,
            )
    files = stage_rows(table, "adopt", [(2, "b")])
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(10),
        batch_id="adopt",
        add_files=files,
        time=9,
        expected_head=head,
    )
    assert result.landed
    timeline = Timeline.of(table)
    assert timeline.managed and timeline.upper == Frontier.at(10)
    assert rows_of(table) == {(1, "a"): 1, (2, "b"): 1}


def test_empty_unflagged_table_starts_at_the_minimum_upper(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """A table created by plain PyIceberg, still empty, can become managed by its first batch."""
    catalog = sqlite_catalog_config.load()
    catalog.create_namespace("ext")
    table = catalog.create_table("ext.fresh", schema=SCHEMA)
    late = compare_and_append(
        table, expected_upper=Frontier.at(5), new_upper=Frontier.at(9), batch_id="wrong"
    )
    assert not late.landed and late.upper == Frontier.minimum()
    files = stage_rows(table, "first", [(1, "a")])
    result = compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(11),
        batch_id="first",
        add_files=files,
    )
    assert result.landed, result
    adopted = catalog.load_table("ext.fresh")
    timeline = Timeline.of(adopted)
    assert timeline.managed and timeline.upper == Frontier.at(11)
    assert adopted.metadata.properties["ct.managed"] == "true"  # flag and data, one commit
    assert len(adopted.metadata.snapshots) == 1
    assert rows_of(table) == Counter({(1, "a"): 1})


# -- races ---------------------------------------------------------------------
def _racer(
    config: CatalogConfig, name: str, expected: int, new: int, barrier: Any, results: Any
) -> None:
    catalog = config.load()
    table = catalog.load_table(IDENT)
    files = stage_rows(table, name, [(new, name), (new, name)])
    barrier.wait(timeout=60)
    result = compare_and_append(
        table,
        expected_upper=Frontier.at(expected),
        new_upper=Frontier.at(new),
        batch_id=name,
        add_files=files,
    )
    results.put((name, result.landed, result.upper.time))


def test_two_writers_same_expected_upper_exactly_one_lands(catalog_config: CatalogConfig) -> None:
    """Real processes racing on a real catalog: one winner per round, never both."""
    table = _table(catalog_config)
    ctx = mp.get_context("spawn")
    expected = 0
    winners: list[str] = []
    for round_no in range(6):
        barrier = ctx.Barrier(2)
        results = ctx.Queue()
        new = expected + 10
        procs = [
            ctx.Process(
                target=_racer,
                args=(catalog_config, f"r{round_no}-{side}", expected, new, barrier, results),
            )
            for side in ("a", "b")
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        outcomes = [results.get(timeout=5) for _ in procs]
        landed = [o for o in outcomes if o[1]]
        lost = [o for o in outcomes if not o[1]]
        assert len(landed) == 1, outcomes
        assert len(lost) == 1
        assert lost[0][2] == new  # the loser learns the current upper
        winners.append(landed[0][0])
        expected = new
    table.refresh()
    # Contents equal exactly the winners' batches: two copies of one row each.
    assert rows_of(table) == Counter({(10 * (i + 1), w): 2 for i, w in enumerate(winners)})
    assert Timeline.of(table).upper == Frontier.at(expected)


class _InterleavingCatalog:
    """Wraps a real catalog so a real external commit lands just before ours."""

    def __init__(self, real: Any, interloper: Any) -> None:
        self._real = real
        self._interloper = interloper

    def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
        if self._interloper is not None:
            interloper, self._interloper = self._interloper, None
            interloper()
        return self._real.commit_table(table, requirements, updates)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_external_commit_between_read_and_commit_fails_ours_without_rebase(
    catalog_config: CatalogConfig,
) -> None:
    catalog = catalog_config.load()
    table = _table(catalog_config)
    compare_and_append(
        table,
        expected_upper=Frontier.minimum(),
        new_upper=Frontier.at(10),
        batch_id="base",
        add_files=stage_rows(table, "base", [(1, "base")]),
    )

    def external_commit() -> None:  # e.g. a person's manual DELETE/INSERT through PyIceberg
        other = catalog.load_table(IDENT)
        other.append(pa.table({"k": [99], "v": ["drift"]}, schema=SCHEMA))

    table.catalog = _InterleavingCatalog(catalog, external_commit)
    ours = stage_rows(table, "ours", [(2, "ours")])
    result = compare_and_append(
        table,
        expected_upper=Frontier.at(10),
        new_upper=Frontier.at(20),
        batch_id="ours",
        add_files=ours,
    )
    assert not result.landed
    assert "rejected" in result.reason
    fresh = catalog.load_table(IDENT)
    # The external commit is the head; ours is nowhere on main; no rebase happened.
    assert rows_of(fresh) == Counter({(1, "base"): 1, (99, "drift"): 1})
    timeline = Timeline.of(fresh)
    assert timeline.find_batch("ours") is None
    assert timeline.upper == Frontier.at(10)


def test_stale_expected_head_fails(catalog_config: CatalogConfig) -> None:
    """A batch computed against an older head does not land, even with the right upper."""
    catalog = catalog_config.load()
    table = _table(catalog_config)
    compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(10), batch_id="base"
    )
    base_head = table.metadata.current_snapshot().snapshot_id
    catalog.load_table(IDENT).append(pa.table({"k": [5], "v": ["drift"]}, schema=SCHEMA))
    result = compare_and_append(
        table,
        expected_upper=Frontier.at(10),
        new_upper=Frontier.at(20),
        batch_id="stale",
        expected_head=base_head,
    )
    assert not result.landed and "head is snapshot" in result.reason
    assert result.upper == Frontier.at(10)
