"""The in-place state table stays small: one snapshot per write, old ones expired, files deleted.

Written through ``write_state`` as ticks do (no Spark needed); what a later
``read_state`` returns is compared with the rows the test wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.exceptions import StateMismatchError
from airflow_provider_ct.ivm.state.table import (
    KEPT_SNAPSHOTS,
    read_state,
    state_table_name,
    write_state,
)
from tests.test_changes import commit_deletes, live_files, position_delete

TARGET = "st.view"


def _rows(tick: int) -> pa.Table:
    return pa.table(
        {"g": [f"g{i}" for i in range(4)], "__ct_rows": [tick * 10 + i for i in range(4)]}
    )


def _sorted(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda r: r["g"])


def _files_on_disk(catalog: Any, suffix: str) -> set[str]:
    location = catalog.load_table(state_table_name(TARGET)).location().removeprefix("file://")
    return {str(p) for p in Path(location).rglob(f"*{suffix}")}


@pytest.fixture
def catalog(sqlite_catalog_config: CatalogConfig) -> Any:
    loaded = sqlite_catalog_config.load()
    loaded.create_namespace("st")
    return loaded


def test_each_write_is_one_snapshot_and_old_ones_go_with_their_files(catalog: Any) -> None:
    for tick in range(1, 8):
        pins = {"st.events": tick}
        assert write_state(catalog, TARGET, _rows(tick), "digest", pins)
        rows, _ = read_state(catalog, TARGET, "digest", pins)
        assert _sorted(rows) == _sorted(_rows(tick))
        table = catalog.load_table(state_table_name(TARGET))
        assert len(table.metadata.snapshots) == min(tick, KEPT_SNAPSHOTS)
        # One data file per kept snapshot, nothing older on disk.
        live = {f.file_path.removeprefix("file://") for f in live_files(table)}
        on_disk = _files_on_disk(catalog, ".parquet")
        assert live <= on_disk and len(on_disk) == min(tick, KEPT_SNAPSHOTS)
        assert len(_files_on_disk(catalog, ".metadata.json")) <= KEPT_SNAPSHOTS + 1
        with pytest.raises(StateMismatchError, match="reflects input snapshots"):
            read_state(catalog, TARGET, "digest", {"st.events": tick - 1})


def test_no_groups_is_a_state_too(catalog: Any) -> None:
    """Every group emptied: the state is kept with no rows (not a failed write)."""
    assert write_state(catalog, TARGET, _rows(1).slice(0, 0), "digest", {"st.events": 1})
    rows, _ = read_state(catalog, TARGET, "digest", {"st.events": 1})
    assert rows.num_rows == 0
    assert write_state(catalog, TARGET, _rows(2), "digest", {"st.events": 2})
    assert write_state(catalog, TARGET, _rows(3).slice(0, 0), "digest", {"st.events": 3})
    rows, _ = read_state(catalog, TARGET, "digest", {"st.events": 3})
    assert rows.num_rows == 0


def test_a_state_table_with_delete_files_is_created_again(catalog: Any) -> None:
    assert write_state(catalog, TARGET, _rows(1), "digest", {"st.events": 1})
    table = catalog.load_table(state_table_name(TARGET))
    victim = live_files(table)[0]
    commit_deletes(table, [position_delete(table, [(victim.file_path, 0)], victim)])
    assert write_state(catalog, TARGET, _rows(2), "digest", {"st.events": 2})
    rows, _ = read_state(catalog, TARGET, "digest", {"st.events": 2})
    assert _sorted(rows) == _sorted(_rows(2))  # the old delete does not apply to the new rows
    table = catalog.load_table(state_table_name(TARGET))
    assert len(table.metadata.snapshots) == 1


def test_a_state_table_from_before_gets_bounded_metadata(catalog: Any) -> None:
    name = state_table_name(TARGET)
    schema = pa.schema([pa.field(f.name, f.type, nullable=True) for f in _rows(0).schema])
    catalog.create_table(name, schema=schema, properties={"format-version": "2"})
    assert write_state(catalog, TARGET, _rows(1), "digest", {"st.events": 1})
    properties = catalog.load_table(name).properties
    assert properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert properties["write.metadata.previous-versions-max"] == str(KEPT_SNAPSHOTS)


def _parquet_under(table: Any) -> set[str]:
    location = table.location().removeprefix("file://")
    return {str(p) for p in Path(location).rglob("*.parquet")}


def test_a_state_write_that_loses_its_commit_deletes_its_files(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers race for the state table: the loser's commit fails and its files go.

    The race is real: just before the loser's commit, another writer commits
    a state of its own, so the loser's commit asserts a head that moved.
    """
    from airflow_provider_ct.ivm.state import table as state_module

    assert write_state(catalog, TARGET, _rows(1), "digest", {"st.events": 1})
    real_commit = state_module.commit_once
    raced: list[bool] = []

    def commit_after_a_rival(table: Any, tx: Any, expected_head: int | None, **kw: Any) -> None:
        if not raced:
            raced.append(True)
            assert write_state(catalog, TARGET, _rows(7), "digest", {"st.events": 7})
        real_commit(table, tx, expected_head, **kw)

    monkeypatch.setattr(state_module, "commit_once", commit_after_a_rival)
    assert not write_state(catalog, TARGET, _rows(2), "digest", {"st.events": 2}, batch_id="b2")
    monkeypatch.undo()
    rows, _ = read_state(catalog, TARGET, "digest", {"st.events": 7})
    assert _sorted(rows) == _sorted(_rows(7))  # the rival's state is the one kept
    table = catalog.load_table(state_table_name(TARGET))
    live = {f.file_path.removeprefix("file://") for f in live_files(table)}
    assert not [p for p in _parquet_under(table) if "ct_batch=b2" in p]
    assert live <= _parquet_under(table)


def test_files_a_crashed_state_write_left_are_swept_with_the_view(catalog: Any) -> None:
    """A writer that died after writing its files and before its commit (an outage) leaves
    files no snapshot references; maintaining the view removes them from its state table."""
    from airflow_provider_ct.collections.maintenance import MaintenanceSettings, maintain
    from airflow_provider_ct.core.batch_files import BatchFiles
    from airflow_provider_ct.core.staging import batch_data_dir, new_attempt_id

    catalog.create_table(TARGET, schema=pa.schema([pa.field("g", pa.string())]))
    assert write_state(catalog, TARGET, _rows(1), "digest", {"st.events": 1})
    table = catalog.load_table(state_table_name(TARGET))
    folder = batch_data_dir(table.location(), "crashed", new_attempt_id())
    crashed = {
        p.file.path.removeprefix("file://") for p in BatchFiles(table, folder).write_rows(_rows(2))
    }
    assert crashed <= _parquet_under(table)
    settings = MaintenanceSettings(compact=False, expire=False, sweep_grace_ms=0)
    report = maintain(catalog, [TARGET], settings)
    assert report.errors == {}
    assert report.sweeps[state_table_name(TARGET)].orphans_deleted == len(crashed)
    assert not crashed & _parquet_under(table)
    rows, _ = read_state(catalog, TARGET, "digest", {"st.events": 1})
    assert _sorted(rows) == _sorted(_rows(1))  # the live state is untouched
