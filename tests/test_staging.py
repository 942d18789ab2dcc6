"""Staged-batch manifests and the cleanup of what writers leave behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.staging import (
    StagedBatch,
    StagedFile,
    StagedTime,
    append_batch,
    batch_data_dir,
    cleanup_staged,
    manifest_path,
    read_manifest,
    write_manifest,
)
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import StagingError
from tests.conftest import SCHEMA
from tests.helpers import local_path, rows_of, stage_rows


def _batch(
    table: Any, batch_id: str, lower: int, upper: int, rows: list[Any], created: int | None = None
) -> tuple[StagedBatch, str]:
    files = stage_rows(table, batch_id, rows)
    batch = StagedBatch(
        batch_id=batch_id,
        target="ns.t",
        lower=Frontier.at(lower),
        upper=Frontier.at(upper),
        base_snapshot_id=table.metadata.current_snapshot().snapshot_id
        if table.metadata.current_snapshot()
        else None,
        data_dir=batch_data_dir(table.location(), batch_id),
        times=(StagedTime(upper - 1, tuple(StagedFile(f, len(rows), 1) for f in files)),),
        description={"id": batch_id},
        inputs={"ns.in": 7},
        created_at_ms=now_ms() if created is None else created,
    )
    path = manifest_path(table.location(), batch_id)
    write_manifest(batch, path)
    return batch, path


def test_manifest_round_trip_and_changes(sqlite_catalog_config: CatalogConfig) -> None:
    table = create_managed_table(sqlite_catalog_config.load(), "ns.t", SCHEMA)
    batch, path = _batch(table, "b1", 0, 10, [(1, "a"), (2, "b")])
    again = read_manifest(path)
    assert again == batch
    [change] = again.changes()
    assert change.time == 9 and list(change.add_files) == batch.added_files
    assert again.added_record_count == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: "{not json", "not JSON"),
        (lambda d: {**d, "format": 99}, "unknown manifest format"),
        (lambda d: {k: v for k, v in d.items() if k != "times"}, "times"),
        (lambda d: {**d, "base_snapshot_id": "12"}, "base_snapshot_id"),
        (lambda d: {**d, "state": "half-done"}, "unknown state"),
        (lambda d: [1, 2], "not a JSON object"),
    ],
)
def test_malformed_manifests_name_the_path(
    tmp_path: Path, sqlite_catalog_config: CatalogConfig, mutate: Any, message: str
) -> None:
    table = create_managed_table(sqlite_catalog_config.load(), "ns.t", SCHEMA)
    batch, _ = _batch(table, "b1", 0, 10, [(1, "a")])
    broken = mutate(batch.to_json())
    path = tmp_path / "broken.json"
    path.write_text(broken if isinstance(broken, str) else json.dumps(broken))
    with pytest.raises(StagingError, match=message) as info:
        read_manifest(str(path))
    assert str(path) in str(info.value)
    with pytest.raises(StagingError, match="does not exist"):
        read_manifest(str(tmp_path / "missing.json"))


def test_cleanup_keeps_landed_files_and_removes_what_can_never_land(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = create_managed_table(sqlite_catalog_config.load(), "ns.t", SCHEMA)
    landed, landed_path = _batch(table, "landed", 0, 10, [(1, "a")])
    loser, loser_path = _batch(table, "loser", 0, 10, [(2, "b")])
    result = append_batch(table, landed)
    assert result.landed
    pending, pending_path = _batch(table, "pending", 10, 20, [(3, "c")])
    crashed, crashed_path = _batch(
        table, "crashed", 10, 20, [(4, "d")], created=now_ms() - 7_200_000
    )
    kept, kept_path = _batch(table, "kept", 10, 20, [(5, "e")], created=0)

    report = cleanup_staged(Timeline.of(table), table.location(), keep=["kept"])
    assert report.landed == ("landed",)
    assert set(report.discarded) == {"loser", "crashed"}
    assert set(report.kept) == {"pending", "kept"}
    assert report.files_deleted == 2
    # Landed: manifest gone, data files stay (they are the table's files now).
    assert not local_path(landed_path).exists()
    assert all(local_path(f).exists() for f in landed.added_files)
    assert rows_of(table) == {(1, "a"): 1}
    # Never-landing batches: folder and manifest gone.
    for batch, path in ((loser, loser_path), (crashed, crashed_path)):
        assert not local_path(path).exists()
        assert not local_path(batch.data_dir).exists()
    # Pending and kept batches untouched.
    for batch, path in ((pending, pending_path), (kept, kept_path)):
        assert local_path(path).exists()
        assert all(local_path(f).exists() for f in batch.added_files)
