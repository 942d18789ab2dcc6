"""The driver's cache of immutable files: what it keeps, what it refuses to reuse, its budget.

Changes read through the cache are checked against DuckDB's ``EXCEPT ALL``
over full scans (``test_changes.oracle``), the same oracle as uncached reads.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core import file_cache as fc
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.ivm.changes.table_changes import table_changes
from tests.test_changes import (
    ROWS,
    commit_deletes,
    counter,
    live_files,
    main_snapshots,
    new_table,
    oracle,
    position_delete,
    scan,
)


def test_least_recently_used_goes_first_and_the_budget_holds() -> None:
    cache = fc.FileCache(100)
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3, 40)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert cache.held == 80 and cache.stats.evicted == 1
    cache.put("huge", 4, 101)  # alone over the budget: not kept, nothing evicted for it
    assert cache.get("huge") is None and cache.held == 80
    cache.put("a", 5, 10)  # replacing a key re-weighs it
    assert cache.get("a") == 5 and cache.held == 50


def test_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fc.CACHE_MB_ENV, "0")
    assert fc.file_cache() is None
    monkeypatch.setenv(fc.CACHE_MB_ENV, "3")
    cache = fc.file_cache()
    assert cache is not None and cache.budget == 3 * 1024 * 1024
    assert fc.file_cache() is cache  # one per process while the budget stays
    monkeypatch.setenv(fc.CACHE_MB_ENV, "-1")
    with pytest.raises(ConfigurationError, match=fc.CACHE_MB_ENV):
        fc.file_cache()
    monkeypatch.setenv(fc.CACHE_MB_ENV, "lots")
    with pytest.raises(ConfigurationError, match="whole number"):
        fc.file_cache()


def _history(table: Any) -> tuple[int, int, list[Any]]:
    """Four files of 50 rows, then one snapshot deleting a row from each of two files."""
    for batch in range(4):
        rows = [{"k": batch * 100 + i, "v": f"v{i % 7}", "n": i} for i in range(50)]
        table.append(pa.Table.from_pylist(rows, ROWS))
    base = main_snapshots(table)[-1]
    files = sorted(live_files(table), key=lambda f: f.file_path)[:2]
    deletes = [position_delete(table, [(f.file_path, 3), (f.file_path, 11)], f) for f in files]
    commit_deletes(table, deletes, pa.Table.from_pylist([{"k": 999, "v": "new", "n": 1}], ROWS))
    return base, main_snapshots(table)[-1], files


def _cached_history(
    config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, name: str
) -> tuple[Any, int, int, list[Any]]:
    """A 64 MiB cache and a new table with :func:`_history`'s snapshots and files."""
    monkeypatch.setenv(fc.CACHE_MB_ENV, "64")
    table = new_table(config, name)
    return (table, *_history(table))


def _check(table: Any, base: int, head: int, got: Any) -> None:
    plus, minus = oracle(scan(table, base), scan(table, head))
    assert counter(got.inserted) == plus and counter(got.deleted) == minus
    assert sum(minus.values()) == 4 and sum(plus.values()) == 1


def test_a_second_read_of_a_change_is_served_from_the_cache(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, base, head, _files = _cached_history(sqlite_catalog_config, monkeypatch, "fcache.t")
    first = table_changes(table, base, head)
    _check(table, base, head, first)
    # Two data files with deletes, the appended one, and the two delete files.
    assert (first.files_read, first.files_cached) == (5, 0)
    second = table_changes(table, base, head)
    _check(table, base, head, second)
    assert (second.files_read, second.files_cached) == (0, 3)
    # A narrower projection reuses the columns it shares; a new column is read.
    narrow = table_changes(table, base, head, columns=["n", "k"])
    assert narrow.files_cached == 3 and narrow.deleted.column_names == ["n", "k"]
    cache = fc.file_cache()
    assert cache is not None and 0 < cache.held <= cache.budget


def test_the_cache_off_reads_every_time(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fc.CACHE_MB_ENV, "0")
    table = new_table(sqlite_catalog_config, "fcache.off")
    base, head, _files = _history(table)
    for _ in range(2):
        got = table_changes(table, base, head)
        _check(table, base, head, got)
        assert (got.files_read, got.files_cached) == (5, 0)


def test_a_promoted_column_is_decoded_again(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``int`` promoted to ``long``: the old files' cached int32 column is not reused."""
    table, base, head, files = _cached_history(
        sqlite_catalog_config, monkeypatch, "fcache.promoted"
    )
    assert table_changes(table, base, head).deleted.schema.field("n").type == pa.int32()
    with table.update_schema() as update:
        update.update_column("n", field_type=_long())
    table.refresh()
    # A snapshot under the new schema to start the range from (the update itself makes none).
    table.append(
        pa.Table.from_pylist([{"k": 1000, "v": "late", "n": 2**40}], table.schema().as_arrow())
    )
    promoted_base = main_snapshots(table)[-1]
    victim = files[0]  # an old file, written with int32, whose columns the first read cached
    commit_deletes(table, [position_delete(table, [(victim.file_path, 20)], victim)])
    head = main_snapshots(table)[-1]
    got = table_changes(table, promoted_base, head)
    assert got.deleted.schema.field("n").type == pa.int64()
    assert got.files_cached == 0
    plus, minus = oracle(scan(table, promoted_base), scan(table, head))
    assert counter(got.deleted) == minus and sum(minus.values()) == 1 and not plus


def _long() -> Any:
    from pyiceberg.types import LongType

    return LongType()


def test_snapshot_rows_fetch_live_rows_by_key(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a driver join fetches: live rows at each snapshot whose key is asked, never NULL."""
    from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows

    table, base, head, _files = _cached_history(sqlite_catalog_config, monkeypatch, "fcache.rows")
    table.append(pa.Table.from_pylist([{"k": None, "v": "nul", "n": 3}], ROWS))
    last = main_snapshots(table)[-1]
    values = pa.array([3, 11, 103, 999, 1000], pa.int64())
    for snapshot in (base, head, last):
        expected = scan(table, snapshot)
        expected = expected.filter(pa.compute.is_in(expected["k"], value_set=values))
        got = SnapshotRows(table, snapshot, ["k", "v"]).where("k", values)
        assert counter(got) == counter(expected.select(["k", "v"])), snapshot
    strings = pa.array(["v3", "nul"], pa.large_string())  # not indexed: scanned
    expected = scan(table, last)
    expected = expected.filter(pa.compute.is_in(expected["v"], value_set=strings))
    got = SnapshotRows(table, last, ["v", "k"]).where("v", strings)
    assert counter(got) == counter(expected.select(["v", "k"])) and got.num_rows > 3
    # Four files hold n = 3 at position 3 (two of them deleted there), plus the NULL-key row.
    assert SnapshotRows(table, last, ["n"]).where("n", pa.array([3], pa.int32())).num_rows == 3
    # A count is of the files' rows, deleted ones too: the two deleted n = 3 count.
    assert SnapshotRows(table, last, ["n"]).count("n", pa.array([3], pa.int32())) == 5
    assert SnapshotRows(table, last, ["v"]).count("v", strings) is None  # not indexed
    assert SnapshotRows(table, None, ["k"]).where("k", values).num_rows == 0
    assert SnapshotRows(table, last, ["k"]).where("k", pa.array([], pa.int64())).num_rows == 0


def test_a_warm_driver_sizes_its_cache_by_its_driver_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_ct.engine import tuning

    assert [tuning.memory_mb(t) for t in ("2g", "512m", "1024k", "1t", "4096", "3gb", "x")] == [
        2048,
        512,
        1,
        1024 * 1024,
        4096,
        3 * 1024,
        None,
    ]
    monkeypatch.delenv(fc.CACHE_MB_ENV, raising=False)
    tuning.size_file_cache("3g")
    assert fc.budget_bytes() == 3 * 1024**3
    monkeypatch.setenv(fc.CACHE_MB_ENV, "100")  # set by the user: kept
    tuning.size_file_cache("3g")
    assert fc.budget_bytes() == 100 * 1024**2


@pytest.mark.parametrize("budget_mb", ["0", "64"])
def test_a_cached_file_is_one_chunk_and_fetches_the_rows_a_scan_holds(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, budget_mb: str
) -> None:
    """A file of several row groups decodes into several chunks; the cache keeps
    its columns as one (taking rows from many chunks costs a pass over each),
    and the rows fetched by key are the same either way."""
    from airflow_provider_ct.ivm.driver.keyed_rows import SnapshotRows

    monkeypatch.setenv(fc.CACHE_MB_ENV, budget_mb)
    table = new_table(
        sqlite_catalog_config,
        f"fc.chunks{budget_mb}",
        properties={"write.parquet.row-group-limit": "10"},
    )
    rows = [{"k": i, "v": f"v{i % 7}", "n": i * 3} for i in range(50)]
    table.append(pa.Table.from_pylist(rows, ROWS))
    snapshot = table.current_snapshot().snapshot_id
    wanted = [3, 17, 42, 99]
    for _ in range(2):  # the second fetch is served from the cache when there is one
        fetcher = SnapshotRows(table, snapshot, ["k", "v", "n"])
        got = fetcher.where("k", pa.array(wanted, pa.int64()))
        assert sorted(got.to_pylist(), key=lambda r: r["k"]) == [
            r for r in rows if r["k"] in wanted
        ]
    entry = next(iter(fetcher._state.data.values()))
    chunks = fetcher._reader.rows(entry).column("v").num_chunks
    assert chunks == (1 if budget_mb != "0" else 5)
