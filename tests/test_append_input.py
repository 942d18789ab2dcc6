"""Hostile input to the append: every bad report or manifest fails clearly and changes nothing.

A real SQLite catalog, a real staged batch written as the write job does
(write-ahead manifest, a Parquet file in the attempt's folder, the manifest
marked staged), then the append is handed something wrong. Each case checks
the error names the problem, the table's head and rows are unchanged, and a
folder outside the table (the "victim") still has its file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.appending import append_batch, land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.manifest import StagedFile, StagedTime, read_manifest, write_manifest
from airflow_provider_ct.core.staging import begin_batch, finish_batch
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import CTError, DescriptionError, StagingError
from airflow_provider_ct.operators.append import AppendOperator
from tests.conftest import SCHEMA
from tests.helpers import local_path, rows_of

pytestmark = pytest.mark.faults

IDENT = "ns.v"


@dataclasses.dataclass
class World:
    table: Any
    desc: BatchDescription
    manifest: str
    report: dict[str, Any]
    victim: Path


@pytest.fixture
def world(default_catalog: CatalogConfig, tmp_path: Path) -> World:
    table = create_managed_table(default_catalog.load(), IDENT, SCHEMA)
    desc = BatchDescription(
        target=IDENT,
        lower=Frontier.minimum(),
        upper=Frontier.at(11),
        time=10,
        base_snapshot_id=None,
    )
    batch, manifest = begin_batch(table, desc)
    path = f"{batch.data_dir}/part-0.parquet"
    local_path(path).parent.mkdir(parents=True)
    pq.write_table(pa.table({"k": [1, 2], "v": ["a", "b"]}, SCHEMA), local_path(path))
    finish_batch(batch, manifest, [StagedTime(10, (StagedFile(path, 2, 1),))])
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    report = {
        "status": "staged",
        "description_id": desc.id,
        "target": IDENT,
        "manifest": manifest,
        "rows_to_insert": 2,
        "rows_to_delete": 0,
    }
    return World(table, desc, manifest, report, victim)


def _append(report: Any) -> dict[str, Any]:
    out: dict[str, Any] = AppendOperator(task_id="append", report=report).execute({})
    return out


def _unchanged(world: World) -> None:
    world.table.refresh()
    assert world.table.metadata.current_snapshot() is None
    assert rows_of(world.table) == {}
    assert (world.victim / "precious.txt").read_text() == "keep me"
    assert local_path(world.manifest).exists()


def _edit_manifest(world: World, **changes: Any) -> None:
    batch = dataclasses.replace(read_manifest(world.manifest), **changes)
    write_manifest(batch, world.manifest)


REPORTS: dict[str, tuple[Callable[[World], Any], str]] = {
    "empty": (lambda w: {}, "field 'status'"),
    "not an object": (lambda w: "[1, 2]", "must be a JSON object"),
    "unknown status": (lambda w: {**w.report, "status": "done"}, "field 'status'"),
    "no manifest": (lambda w: {**w.report, "manifest": None}, "field 'manifest'"),
    "manifest not text": (lambda w: {**w.report, "manifest": 7}, "field 'manifest'"),
    "no target": (lambda w: {**w.report, "target": ""}, "field 'target'"),
    "no description id": (lambda w: {**w.report, "description_id": None}, "'description_id'"),
    "manifest outside": (
        lambda w: {**w.report, "manifest": str(w.victim / "m.json")},
        "not a manifest in",
    ),
    "manifest via ..": (
        lambda w: {**w.report, "manifest": w.manifest.replace("ct-staging/", "ct-staging/../")},
        "not a manifest in",
    ),
    "other table": (lambda w: {**w.report, "target": "ns.other"}, "ns.other"),
}


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_a_malformed_report_fails_the_append_and_changes_nothing(world: World, case: str) -> None:
    make, message = REPORTS[case]
    with pytest.raises(CTError, match=message):
        _append(make(world))
    _unchanged(world)


MANIFESTS: dict[str, tuple[Callable[[World], dict[str, Any]], str]] = {
    "data_dir outside": (lambda w: {"data_dir": w.victim.as_uri()}, "is not its folder"),
    "data_dir via ..": (
        lambda w: {"data_dir": read_manifest(w.manifest).data_dir + "/../.."},
        "is not its folder",
    ),
    "file outside": (
        lambda w: {
            "times": (StagedTime(10, (StagedFile(f"file://{w.victim}/precious.txt", 1, 1),)),)
        },
        "outside its folder",
    ),
    "still writing": (lambda w: {"state": "writing"}, "state 'writing'"),
    "another table": (lambda w: {"target": "ns.other"}, "is for ns.other"),
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_a_hostile_manifest_is_refused_before_anything_is_deleted_or_committed(
    world: World, case: str
) -> None:
    make, message = MANIFESTS[case]
    _edit_manifest(world, **make(world))
    with pytest.raises(StagingError, match=message):
        _append(world.report)
    _unchanged(world)


def test_a_manifest_naming_a_path_id_is_refused(world: World) -> None:
    raw = json.loads(local_path(world.manifest).read_text())
    raw["batch_id"] = "../../victim"
    local_path(world.manifest).write_text(json.dumps(raw))
    with pytest.raises(StagingError, match="not a valid id"):
        _append(world.report)
    _unchanged(world)


def test_a_manifest_of_another_description_is_refused(world: World) -> None:
    other = BatchDescription(
        target=IDENT,
        lower=Frontier.minimum(),
        upper=Frontier.at(21),
        time=20,
        base_snapshot_id=None,
    )
    with pytest.raises(StagingError, match=f"does not answer description {other.id}"):
        land_staged(world.table, world.manifest, description=other)
    _unchanged(world)


def test_a_manifest_answering_a_different_time_is_refused(world: World) -> None:
    """Same lower, upper and base, another time: a different description, refused."""
    other = dataclasses.replace(world.desc, time=5, id="")
    assert other.id != world.desc.id
    with pytest.raises(StagingError, match=f"does not answer description {other.id}"):
        land_staged(world.table, world.manifest, description=other)
    _unchanged(world)


def _restage_times(world: World, *times: int) -> None:
    """The manifest's file under the first of ``times``; the others stage no file."""
    batch = read_manifest(world.manifest)
    first = dataclasses.replace(batch.times[0], time=times[0])
    _edit_manifest(world, times=(first, *(StagedTime(t) for t in times[1:])))


def test_a_view_manifest_staging_another_time_than_its_description_is_refused(
    world: World,
) -> None:
    """A view's batch stages at most its tick's time (the description is unedited)."""
    _restage_times(world, 5)
    with pytest.raises(StagingError, match="a view's batch stages only the tick's time 10"):
        land_staged(world.table, world.manifest, description=world.desc)
    _restage_times(world, 5, 10)
    with pytest.raises(StagingError, match="a view's batch stages only"):
        land_staged(world.table, world.manifest, description=world.desc)
    _unchanged(world)


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ((3, 12), "time 12 lies outside the batch's"),
        ((7, 3), "do not strictly increase"),
        ((3, 8), r"time 8 is not one of the batch's 3 input time\(s\) \[3, 7, 12\]"),
    ],
)
def test_a_continual_manifest_must_stage_the_batchs_input_times(
    world: World, times: tuple[int, ...], message: str
) -> None:
    """A continual task's times lie below the tick, inside the window, each an input time."""
    _restage_times(world, *times)
    with pytest.raises(StagingError, match=message):
        land_staged(world.table, world.manifest, description=world.desc, allowed_times=[3, 7, 12])
    _unchanged(world)


def test_a_continual_manifest_of_input_times_below_the_tick_lands(world: World) -> None:
    """Times 3 and 7 of a tick at 10: the case the view's rule refused for every plain input."""
    _restage_times(world, 3, 7)
    with pytest.raises(StagingError, match="a view's batch stages only the tick's time 10"):
        land_staged(world.table, world.manifest, description=world.desc)
    outcome = land_staged(world.table, world.manifest, description=world.desc, allowed_times=[3, 7])
    assert outcome.landed_by_this_attempt
    timeline = Timeline.of(world.table)
    assert [t for t, _ in timeline.data_times()] == [3, 7]
    assert timeline.upper == Frontier.at(11)
    assert rows_of(world.table) == {(1, "a"): 1, (2, "b"): 1}


def test_the_untouched_batch_still_lands_after_all_that(world: World) -> None:
    """The fixture's batch is sound: without tampering the same append lands it."""
    out = _append(world.report)
    assert out["appended"] and not out["already_appended"]
    world.table.refresh()
    assert rows_of(world.table) == {(1, "a"): 1, (2, "b"): 1}
    with pytest.raises(DescriptionError):
        _append({**world.report, "status": None})


def test_a_retry_after_the_landed_snapshot_expired_keeps_the_live_files(world: World) -> None:
    """Crash after the commit (manifest kept), the snapshot expired, then the retry."""
    batch = read_manifest(world.manifest)
    assert append_batch(world.table, batch).landed  # the commit, then the "crash"
    tick = compare_and_append(
        world.table, expected_upper=Frontier.at(11), new_upper=Frontier.at(21), batch_id="tick"
    )
    landed_snapshot = Timeline.of(world.table).find_batch(batch.batch_id)
    assert tick.landed and landed_snapshot is not None
    world.table.maintenance.expire_snapshots().by_id(landed_snapshot.snapshot_id).commit()
    world.table.refresh()
    assert Timeline.of(world.table).find_batch(batch.batch_id) is None

    outcome = land_staged(world.table, world.manifest, description=world.desc)
    assert outcome.result.landed and outcome.result.already_landed
    assert outcome.files_deleted == 0
    assert all(local_path(f).exists() for f in batch.staged_files)
    assert not local_path(world.manifest).exists()
    assert rows_of(world.table) == {(1, "a"): 1, (2, "b"): 1}
