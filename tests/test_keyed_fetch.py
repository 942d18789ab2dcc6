"""The keyed rule's rows fetched on the driver: a key's live rows at both snapshots.

The oracle is PyIceberg's own scan of each snapshot, filtered in pyarrow by
the keys the test chose (NULL matching NULL, as the rule's restriction does).
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_ct.core import file_cache as fc
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.ivm.driver.arrow_eval import NotOnDriver
from airflow_provider_ct.ivm.driver.keyed_fetch import KeyedFetch
from tests.test_changes import (
    ROWS,
    commit_deletes,
    counter,
    live_files,
    main_snapshots,
    new_table,
    position_delete,
    scan,
)


def _history(config: CatalogConfig, name: str, seed: int) -> tuple[Any, int, int]:
    """Three files of random keys (NULLs among them), then deletes and an insert."""
    rng = random.Random(seed)
    table = new_table(config, name)
    for batch in range(3):
        rows = [
            {"k": rng.choice([None, *range(12)]), "v": f"v{batch}.{i}", "n": i} for i in range(40)
        ]
        table.append(pa.Table.from_pylist(rows, ROWS))
    before = main_snapshots(table)[-1]
    files = sorted(live_files(table), key=lambda f: f.file_path)[:2]
    deletes = [
        position_delete(table, [(f.file_path, p) for p in rng.sample(range(40), 6)], f)
        for f in files
    ]
    added = [{"k": rng.choice([None, 1, 5, 50]), "v": "new", "n": i} for i in range(5)]
    commit_deletes(table, deletes, pa.Table.from_pylist(added, ROWS))
    return table, before, main_snapshots(table)[-1]


def _expected(table: Any, snapshot: int, keys: list[Any]) -> pa.Table:
    rows = scan(table, snapshot).select(["k", "v", "n"])
    kept = [k for k in keys if k is not None]
    mask = pc.is_in(rows["k"], value_set=pa.array(kept, pa.int64()))
    if None in keys:
        mask = pc.or_(pc.fill_null(mask, False), pc.is_null(rows["k"]))
    return rows.filter(pc.fill_null(mask, False))


@pytest.mark.parametrize("seed", range(6))
def test_a_keys_rows_at_both_snapshots_are_the_scans_rows_of_those_keys(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setenv(fc.CACHE_MB_ENV, "64")
    table, before, after = _history(sqlite_catalog_config, f"kfetch.t{seed}", seed)
    rng = random.Random(seed)
    keys = rng.sample([None, *range(14), 50], 5)
    fetch = KeyedFetch({"t": table}, {"t": before}, {"t": after}, {"t": ["k", "v", "n"]}, 10_000)
    assert fetch.refusal(["t"], keys) is None
    new, old = fetch.rows("t", "K", keys)  # the key column as the plan spells it
    assert counter(new) == counter(_expected(table, after, keys)), keys
    assert counter(old) == counter(_expected(table, before, keys)), keys
    assert fetch.fetched >= new.num_rows + old.num_rows


def test_an_unchanged_input_is_fetched_once_and_an_empty_one_has_no_rows(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fc.CACHE_MB_ENV, "64")
    table, _before, after = _history(sqlite_catalog_config, "kfetch.same", 7)
    fetch = KeyedFetch({"t": table}, {"t": after}, {"t": after}, {"t": ["k", "n"]}, 10_000)
    new, old = fetch.rows("t", "k", [1, 2, None])
    assert new is old and counter(new) == counter(_expected(table, after, [1, 2, None]).drop(["v"]))
    empty = KeyedFetch({"t": table}, {"t": None}, {"t": after}, {"t": ["k", "n"]}, 10_000)
    assert empty.rows("t", "k", [1, 2])[1].num_rows == 0


def test_the_driver_refuses_past_its_rows_and_without_a_cache(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the row limit a fetch raises before rows are taken (counted in the indexes);
    without a file cache, or with too many keys, the driver does not take the tick."""
    monkeypatch.setenv(fc.CACHE_MB_ENV, "64")
    table, before, after = _history(sqlite_catalog_config, "kfetch.limit", 3)
    all_keys = list(range(12))
    total = _expected(table, after, all_keys).num_rows
    tight = KeyedFetch({"t": table}, {"t": before}, {"t": after}, {"t": ["k"]}, total - 1)
    with pytest.raises(NotOnDriver, match="pass the driver's"):
        tight.rows("t", "k", all_keys)
    assert tight.refusal(["t"], list(range(total))) is not None  # more keys than rows allowed
    monkeypatch.setenv(fc.CACHE_MB_ENV, "0")
    assert "no file cache" in str(tight.refusal(["t"], [1]))


def test_a_column_the_older_snapshot_lacks_sends_the_fetch_to_spark(
    sqlite_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column added after the last batch's snapshot is not in that snapshot's schema: the
    driver refuses the fetch (Spark reads the keys' rows), rather than failing the tick."""
    from pyiceberg.types import LongType

    monkeypatch.setenv(fc.CACHE_MB_ENV, "64")
    table, _before, after = _history(sqlite_catalog_config, "kfetch.evolved", 5)
    with table.update_schema() as update:
        update.add_column("extra", LongType())
    rows = [{"k": 1, "v": "e", "n": 1, "extra": 7}]
    table.append(pa.Table.from_pylist(rows, table.schema().as_arrow()))
    head = main_snapshots(table)[-1]
    fetch = KeyedFetch({"t": table}, {"t": after}, {"t": head}, {"t": ["k", "extra"]}, 10_000)
    assert fetch.refusal(["t"], [1]) is None
    with pytest.raises(NotOnDriver, match=f"snapshot {after}"):
        fetch.rows("t", "k", [1])
