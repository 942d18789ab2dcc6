"""Staged-batch manifests and the cleanup of what writers leave behind (real SQLite catalog)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.manifest import (
    MANIFEST_FORMAT,
    STATE_STAGED,
    STATE_WRITING,
    StagedBatch,
    StagedFile,
    StagedTime,
    read_manifest,
    write_manifest,
)
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.staging import batch_data_dir, manifest_path
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import StagingError
from tests.conftest import SCHEMA
from tests.helpers import local_path, rows_of, stage_rows

IDENT = "ns.t"
#: A fixed "now" for cleanup, so ages are exact.
NOW = 1_800_000_000_000
GRACE = 3_600_000


def _table(config: CatalogConfig, properties: dict[str, str] | None = None) -> Any:
    return create_managed_table(config.load(), IDENT, SCHEMA, properties=properties)


def _stage(
    table: Any,
    batch_id: str,
    lower: int,
    upper: int,
    rows: list[tuple[int, str | None]],
    *,
    created: int = NOW,
    state: str = STATE_STAGED,
) -> tuple[StagedBatch, str]:
    """Write a batch's data file and manifest as a writer would; returns it and its path."""
    files = stage_rows(table, batch_id, rows)
    head = table.metadata.current_snapshot()
    batch = StagedBatch(
        batch_id=batch_id,
        target=IDENT,
        lower=Frontier.at(lower),
        upper=Frontier.at(upper),
        base_snapshot_id=None if head is None else head.snapshot_id,
        data_dir=batch_data_dir(table.location(), batch_id),
        times=(StagedTime(upper - 1, tuple(StagedFile(f, len(rows), 1) for f in files)),),
        description={"id": batch_id},
        state=state,
        created_at_ms=created,
    )
    path = manifest_path(table.location(), batch_id, table.metadata.properties)
    write_manifest(batch, path)
    return batch, path


def _land(table: Any, batch: StagedBatch) -> None:
    result = compare_and_append(
        table,
        expected_upper=batch.lower,
        new_upper=batch.upper,
        batch_id=batch.batch_id,
        changes=batch.changes(),
    )
    assert result.landed, result


def _exists(batch: StagedBatch) -> bool:
    return local_path(batch.data_dir).is_dir() and all(
        local_path(f).is_file() for f in batch.staged_files
    )


def _full_batch(root: Path) -> StagedBatch:
    """A batch using every manifest field, with two times."""
    return StagedBatch(
        batch_id="b-1",
        target="ns.target",
        lower=Frontier.at(100),
        upper=Frontier.empty(),
        base_snapshot_id=1234567890123,
        data_dir=str(root / "data" / "ct-batch=b-1"),
        times=(
            StagedTime(
                time=100,
                add=(StagedFile(str(root / "a1.parquet"), 3, 300),),
                remove=(str(root / "old.parquet"),),
                deletes=(StagedFile(str(root / "d1.parquet"), 2, 50),),
                removed_record_count=2,
            ),
            StagedTime(
                time=250,
                add=(
                    StagedFile(str(root / "a2.parquet"), 4, 400),
                    StagedFile(str(root / "a3.parquet"), 5, 500),
                ),
            ),
        ),
        description={"id": "b-1", "nested": {"x": [1, 2]}},
        inputs={"ns.in": 42, "ns.empty": None},
        state=STATE_WRITING,
        created_at_ms=1_700_000_000_000,
    )


# -- manifests ------------------------------------------------------------------------
def test_manifest_round_trip(tmp_path: Path) -> None:
    batch = _full_batch(tmp_path)
    path = str(tmp_path / "ct-staging" / "b-1.json")
    write_manifest(batch, path)
    on_disk = json.loads(Path(path).read_text())
    assert on_disk["format"] == MANIFEST_FORMAT
    assert on_disk["upper"] is None  # the empty frontier
    assert on_disk["state"] == STATE_WRITING
    assert read_manifest(path) == batch
    # Only the manifest is left behind (no temporary file).
    assert sorted(p.name for p in (tmp_path / "ct-staging").iterdir()) == ["b-1.json"]


def test_manifest_round_trip_of_a_file_uri(tmp_path: Path) -> None:
    batch = StagedBatch("b", "ns.t", Frontier.minimum(), Frontier.at(1), None, "/x")
    uri = (tmp_path / "staging" / "b.json").as_uri()
    write_manifest(batch, uri)
    assert (tmp_path / "staging" / "b.json").is_file()
    assert read_manifest(uri) == batch


def test_rewriting_a_manifest_replaces_it(tmp_path: Path) -> None:
    writing = StagedBatch("b", "ns.t", Frontier.at(5), Frontier.at(9), 7, "/x", state=STATE_WRITING)
    path = str(tmp_path / "b.json")
    write_manifest(writing, path)
    staged = StagedBatch(
        "b",
        "ns.t",
        Frontier.at(5),
        Frontier.at(9),
        7,
        "/x",
        times=(StagedTime(8, (StagedFile("/x/p.parquet", 1, 10),)),),
        state=STATE_STAGED,
    )
    write_manifest(staged, path)
    assert read_manifest(path) == staged
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_changes_map_times_and_files(tmp_path: Path) -> None:
    batch = _full_batch(tmp_path)
    assert batch.changes() == [
        TimedChange(
            100,
            (str(tmp_path / "a1.parquet"),),
            (str(tmp_path / "old.parquet"),),
            (str(tmp_path / "d1.parquet"),),
        ),
        TimedChange(250, (str(tmp_path / "a2.parquet"), str(tmp_path / "a3.parquet")), (), ()),
    ]
    assert batch.added_files == [str(tmp_path / f"a{i}.parquet") for i in (1, 2, 3)]
    assert batch.staged_files == [
        str(tmp_path / "a1.parquet"),
        str(tmp_path / "d1.parquet"),
        str(tmp_path / "a2.parquet"),
        str(tmp_path / "a3.parquet"),
    ]
    assert batch.added_record_count == 12
    assert batch.added_bytes == 1200
    assert batch.deleted_record_count == 2
    assert StagedBatch("e", "ns.t", Frontier.at(1), Frontier.at(2), None, "/x").changes() == []


def _without(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda d: {k: v for k, v in d.items() if k != key}


def _first_time(**fields: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda d: {**d, "times": [{**d["times"][0], **fields}, *d["times"][1:]]}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda d: "{not json", "is not JSON", id="not-json"),
        pytest.param(lambda d: "", "is not JSON", id="empty-file"),
        pytest.param(lambda d: [d], "not a JSON object", id="a-list"),
        pytest.param(lambda d: {**d, "format": 2}, "unknown manifest format 2", id="format-2"),
        pytest.param(
            lambda d: {**d, "format": "1"}, "unknown manifest format '1'", id="format-str"
        ),
        pytest.param(_without("format"), "unknown manifest format None", id="no-format"),
        pytest.param(_without("batch_id"), "'batch_id'", id="no-batch-id"),
        pytest.param(_without("target"), "'target'", id="no-target"),
        pytest.param(_without("lower"), "'lower'", id="no-lower"),
        pytest.param(_without("upper"), "'upper'", id="no-upper"),
        pytest.param(_without("base_snapshot_id"), "'base_snapshot_id'", id="no-base"),
        pytest.param(_without("data_dir"), "'data_dir'", id="no-data-dir"),
        pytest.param(_without("state"), "'state'", id="no-state"),
        pytest.param(_without("times"), "'times'", id="no-times"),
        pytest.param(_first_time(add=None), "not iterable", id="add-null"),
        pytest.param(
            lambda d: {**d, "base_snapshot_id": "12"}, "base_snapshot_id must be", id="base-str"
        ),
        pytest.param(
            lambda d: {**d, "created_at_ms": "5"}, "created_at_ms must be", id="created-str"
        ),
        pytest.param(
            lambda d: {**d, "created_at_ms": True}, "created_at_ms must be", id="created-bool"
        ),
        pytest.param(_first_time(time="100"), "time must be an integer", id="time-str"),
        pytest.param(_first_time(time=1.5), "time must be an integer", id="time-float"),
        pytest.param(
            _first_time(add=[{"path": "/p", "record_count": "3", "size_bytes": 1}]),
            "record_count must be",
            id="record-count-str",
        ),
        pytest.param(_first_time(removed_record_count="2"), "removed must be", id="removed-str"),
        pytest.param(lambda d: {**d, "state": "half-done"}, "unknown state", id="bad-state"),
        pytest.param(
            lambda d: {**d, "lower": "100"},
            "lower",
            id="lower-str",
        ),
        pytest.param(
            lambda d: {**d, "upper": -1},
            "upper",
            id="upper-negative",
        ),
    ],
)
def test_malformed_manifests_raise_staging_error_naming_the_path(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], Any], message: str
) -> None:
    broken = mutate(_full_batch(tmp_path).to_json())
    path = tmp_path / "broken.json"
    path.write_text(broken if isinstance(broken, str) else json.dumps(broken))
    with pytest.raises(StagingError) as info:
        read_manifest(str(path))
    assert f"staged-batch manifest {path}" in str(info.value)
    assert message in str(info.value)


def test_a_manifest_of_binary_garbage_raises_staging_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.json"
    path.write_bytes(b"\x80\x81\xfe\xff")
    with pytest.raises(StagingError, match="is not JSON"):
        read_manifest(str(path))


def test_a_missing_manifest_raises_staging_error_naming_the_path(tmp_path: Path) -> None:
    path = str(tmp_path / "missing.json")
    with pytest.raises(StagingError, match=f"manifest {path} does not exist"):
        read_manifest(path)


# -- cleanup --------------------------------------------------------------------------
def test_cleanup_forgets_a_landed_batch_but_keeps_its_files(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _table(sqlite_catalog_config)
    batch, path = _stage(table, "landed", 0, 10, [(1, "a"), (2, "b")])
    _land(table, batch)

    report = sweep_staged(table, now=NOW)
    assert report.landed == ("landed",)
    assert report.discarded == () and report.kept == ()
    assert report.files_deleted == 0
    assert not local_path(path).exists()
    assert _exists(batch)  # the table's files now
    reloaded = sqlite_catalog_config.load().load_table(IDENT)
    assert rows_of(reloaded) == {(1, "a"): 1, (2, "b"): 1}


def test_cleanup_discards_an_outdated_batch(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    winner, _ = _stage(table, "winner", 0, 10, [(1, "a")])
    loser, loser_path = _stage(table, "loser", 0, 10, [(2, "b")])
    stage_rows(table, "loser", [(3, "c")])  # a second file in the loser's folder
    _land(table, winner)
    # The loser could never land now.
    lost = compare_and_append(
        table,
        expected_upper=loser.lower,
        new_upper=loser.upper,
        batch_id=loser.batch_id,
        changes=loser.changes(),
    )
    assert not lost.landed

    report = sweep_staged(table, now=NOW)
    assert report.discarded == ("loser",)
    assert report.landed == ("winner",)
    assert report.files_deleted == 2
    assert not local_path(loser_path).exists()
    assert not local_path(loser.data_dir).exists()
    assert _exists(winner)
    assert rows_of(table) == {(1, "a"): 1}


def test_cleanup_keeps_a_fresh_pending_batch(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    first, _ = _stage(table, "first", 0, 10, [(1, "a")])
    _land(table, first)
    pending, path = _stage(table, "pending", 10, 20, [(15, "b")], created=NOW)
    writing, writing_path = _stage(
        table, "writing", 10, 20, [(16, "c")], created=NOW - GRACE, state=STATE_WRITING
    )

    report = sweep_staged(table, grace_ms=GRACE, now=NOW)
    assert sorted(report.kept) == ["pending", "writing"]
    assert report.discarded == () and report.files_deleted == 0
    for batch, manifest in ((pending, path), (writing, writing_path)):
        assert local_path(manifest).is_file()
        assert _exists(batch)
    # It still lands afterwards.
    _land(table, pending)
    assert rows_of(table) == {(1, "a"): 1, (15, "b"): 1}


def test_cleanup_keeps_a_fresh_batch_on_an_empty_table(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _table(sqlite_catalog_config)
    batch, path = _stage(table, "b", 0, 10, [(1, "a")], created=NOW - 5)
    report = sweep_staged(table, now=NOW)
    assert report.kept == ("b",)
    assert local_path(path).is_file() and _exists(batch)


def test_cleanup_keeps_a_batch_that_may_still_land_whatever_its_age(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """An old manifest whose lower is the upper and whose base is the head could be mid-append."""
    table = _table(sqlite_catalog_config)
    old, old_path = _stage(table, "old", 0, 10, [(1, "a")], created=NOW - GRACE - 1)
    crashed, crashed_path = _stage(
        table, "crashed", 0, 10, [(2, "b")], created=0, state=STATE_WRITING
    )
    report = sweep_staged(table, grace_ms=GRACE, now=NOW)
    assert sorted(report.kept) == ["crashed", "old"]
    assert report.files_deleted == 0 and report.orphans_deleted == 0
    # Once another batch lands, neither can ever land: both go, whatever the grace.
    _land(table, old)
    report = sweep_staged(table, grace_ms=10 * GRACE, now=NOW)
    assert report.landed == ("old",)
    assert report.discarded == ("crashed",)
    assert not local_path(crashed_path).exists() and not _exists(crashed)
    assert not local_path(old_path).exists() and _exists(old)
    assert rows_of(table) == {(1, "a"): 1}


def test_cleanup_removes_orphan_files_only_after_the_grace(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """Files no manifest accounts for (a crash before the manifest) go once old enough."""
    table = _table(sqlite_catalog_config)
    landed, _ = _stage(table, "landed", 0, 10, [(1, "a")])
    _land(table, landed)
    orphan = stage_rows(table, "no-manifest", [(2, "b")])
    half = Path(local_path(manifest_path(table.location(), "x"))).with_suffix(".json.tmp-1")
    half.write_text("{")
    young = sweep_staged(table, grace_ms=GRACE, now=int(time.time() * 1000))
    assert young.orphans_deleted == 0
    assert all(local_path(f).exists() for f in orphan) and half.exists()
    old = sweep_staged(table, grace_ms=GRACE, now=int(time.time() * 1000) + GRACE + 1_000)
    assert old.orphans_deleted == 2
    assert not any(local_path(f).exists() for f in orphan) and not half.exists()
    assert _exists(landed)  # live files are never orphans
    assert rows_of(table) == {(1, "a"): 1}


def test_cleanup_respects_keep(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    landed, landed_path = _stage(table, "landed", 0, 10, [(1, "a")])
    outdated, outdated_path = _stage(table, "outdated", 0, 10, [(2, "b")])
    ancient, ancient_path = _stage(table, "ancient", 10, 20, [(12, "c")], created=0)
    _land(table, landed)

    keep = ["landed", "outdated", "ancient"]
    report = sweep_staged(table, now=NOW, keep=keep)
    assert sorted(report.kept) == sorted(keep)
    assert report.landed == () and report.discarded == () and report.files_deleted == 0
    for batch, manifest in (
        (landed, landed_path),
        (outdated, outdated_path),
        (ancient, ancient_path),
    ):
        assert local_path(manifest).is_file()
        assert _exists(batch)
    # Without keep the same cleanup removes them.
    report = sweep_staged(table, now=NOW)
    assert report.landed == ("landed",)
    assert sorted(report.discarded) == ["ancient", "outdated"]


def test_cleanup_skips_unreadable_manifests(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    outdated, _ = _stage(table, "outdated", 0, 10, [(1, "a")], created=0)
    winner, _ = _stage(table, "winner", 0, 10, [(2, "b")])
    _land(table, winner)
    broken = Path(local_path(manifest_path(table.location(), "broken")))
    broken.write_text("{not json")
    report = sweep_staged(table, now=NOW)
    assert report.discarded == ("outdated",)
    assert report.kept == () and report.landed == ("winner",)
    assert report.skipped == (str(broken) if "://" not in table.location() else report.skipped)
    assert not local_path(outdated.data_dir).exists()
    assert broken.read_text() == "{not json"


def test_cleanup_uses_the_tables_staging_dir(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config, {TableKeys.STAGING_DIR: "my-staging"})
    batch, path = _stage(table, "old", 0, 10, [(1, "a")], created=0)
    winner, _ = _stage(table, "winner", 0, 10, [(2, "b")])
    _land(table, winner)
    assert "/my-staging/" in path
    report = sweep_staged(table, now=NOW)
    assert report.discarded == ("old",)
    assert not local_path(path).exists() and not local_path(batch.data_dir).exists()


@pytest.mark.parametrize("folder", ["../elsewhere", "/tmp/abs", "a/../../b", "s3://x/y", ""])
def test_a_staging_dir_outside_the_table_is_refused(
    sqlite_catalog_config: CatalogConfig, folder: str
) -> None:
    table = _table(sqlite_catalog_config, {TableKeys.STAGING_DIR: folder})
    with pytest.raises(StagingError, match="must be a relative folder inside the table"):
        sweep_staged(table, now=NOW)


def test_cleanup_of_a_table_without_staged_batches(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    report = sweep_staged(table, now=NOW)
    assert (report.landed, report.discarded, report.kept, report.files_deleted) == (
        (),
        (),
        (),
        0,
    )


def test_cleanup_never_deletes_files_of_a_landed_batch_whose_snapshot_expired(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _table(sqlite_catalog_config)
    batch, _ = _stage(table, "landed", 0, 10, [(1, "a")])
    _land(table, batch)
    landed_snapshot = Timeline.of(table).find_batch("landed")
    assert landed_snapshot is not None
    tick = compare_and_append(
        table, expected_upper=Frontier.at(10), new_upper=Frontier.at(20), batch_id="tick"
    )
    assert tick.landed
    table.maintenance.expire_snapshots().by_id(landed_snapshot.snapshot_id).commit()
    table.refresh()
    assert rows_of(table) == {(1, "a"): 1}  # the data is still live in the head

    report = sweep_staged(table, now=NOW)
    assert "landed" not in report.discarded
    assert all(local_path(f).exists() for f in batch.added_files)
