"""Table layouts, schema changes and owners: the rules, without Spark (PyIceberg tables)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.appending import append_batch, land_staged
from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.layout import TableLayout, TargetSettings, parse_partition
from airflow_provider_ct.core.manifest import StagedTime, read_manifest
from airflow_provider_ct.core.owner import Owner, claim
from airflow_provider_ct.core.schema_change import (
    SchemaChange,
    diff_schemas,
    pending_table,
    plan_schema_change,
)
from airflow_provider_ct.core.staging import begin_batch, finish_batch
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import ConfigurationError, OwnershipError, SchemaMismatchError
from tests.conftest import sqlite_config
from tests.helpers import local_path, rows_of

EVENTS = pa.schema(
    [("ts", pa.timestamp("us")), ("country", pa.string()), ("id", pa.int64()), ("n", pa.int32())]
)


@pytest.mark.parametrize(
    ("term", "column", "transform"),
    [
        ("country", "country", "identity"),
        ("`country`", "country", "identity"),
        ("day(ts)", "ts", "day"),
        ("days(ts)", "ts", "day"),
        ("HOURS(ts)", "ts", "hour"),
        ("months(ts)", "ts", "month"),
        ("year(ts)", "ts", "year"),
        ("bucket(16, id)", "id", "bucket[16]"),
        ("bucket(id, 16)", "id", "bucket[16]"),
        ("truncate(4, country)", "country", "truncate[4]"),
        ("identity(country)", "country", "identity"),
    ],
)
def test_partition_terms_parse_as_spark_sql_spells_them(
    term: str, column: str, transform: str
) -> None:
    field = parse_partition(term)
    assert (field.column, field.transform) == (column, transform)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_by": ["weeks(ts)"]}, "unknown transform 'weeks'"),
        ({"partition_by": ["bucket(0, id)"]}, "positive width"),
        ({"partition_by": ["bucket(id)"]}, "positive width"),
        ({"partition_by": ["day(ts, x)"]}, "takes one column"),
        ({"partition_by": ["a b"]}, "not a column"),
        ({"partition_by": ["day(ts)", "days(ts)"]}, "repeats a field"),
        ({"partition_by": [3]}, "takes strings"),
        ({"table_properties": {"ct.managed": "false"}}, "cannot be set"),
        ({"table_properties": {"commit.retry.num-retries": "4"}}, "cannot be set"),
    ],
)
def test_bad_layouts_fail_naming_the_term(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TableLayout.parse(**kwargs)


def test_settings_survive_their_json_and_refuse_an_unknown_mode() -> None:
    layout = TableLayout.parse(
        ["day(ts)", "bucket(8, id)", "truncate(2, country)"],
        ["ts DESC", "country ASC NULLS LAST", "bucket(8, id)"],
        {"comment": "x"},
    )
    settings = TargetSettings(layout, "recreate")
    assert TargetSettings.from_json(settings.to_json()) == settings
    with pytest.raises(ConfigurationError, match="on_schema_change='drop'"):
        TargetSettings(layout, "drop")


def test_a_layout_naming_a_column_the_query_lacks_creates_nothing(tmp_path: Path) -> None:
    catalog = sqlite_config(tmp_path).load()
    with pytest.raises(ConfigurationError, match="names column 'tz'"):
        create_managed_table(catalog, "lake.t", EVENTS, layout=TableLayout.parse(["day(tz)"]))
    assert not catalog.table_exists("lake.t")
    table = create_managed_table(
        catalog, "lake.t", EVENTS, layout=TableLayout.parse(["month(ts)"], ["id DESC"])
    )
    assert [str(f.transform) for f in table.spec().fields] == ["month"]
    assert [f.direction.name for f in table.sort_order().fields] == ["DESC"]


def _table(tmp_path: Path, schema: pa.Schema = EVENTS) -> Any:
    config: CatalogConfig = sqlite_config(tmp_path)
    return create_managed_table(config.load(), "lake.t", schema)


def test_schema_diffs_tell_added_widened_dropped_and_narrowed_columns(tmp_path: Path) -> None:
    table = _table(tmp_path)
    query = pa.schema(
        [("country", pa.string()), ("ts", pa.timestamp("us")), ("n", pa.int64()), ("x", pa.bool_())]
    )
    diff = diff_schemas(table.schema(), query)
    assert diff.added == ("x",)
    assert diff.promoted == (("n", "int", "long"),)
    assert diff.dropped == ("id",)
    assert not diff.evolvable
    narrowed = pa.schema([*[f for f in EVENTS if f.name != "id"], pa.field("id", pa.int32())])
    assert diff_schemas(table.schema(), narrowed).changed == (("id", "long", "int"),)
    assert not diff_schemas(table.schema(), EVENTS)


def test_evolve_refuses_a_drop_naming_recreate_and_fail_names_itself(tmp_path: Path) -> None:
    table = _table(tmp_path)
    dropped = pa.schema([f for f in EVENTS if f.name != "id"])
    diff = diff_schemas(table.schema(), dropped)
    with pytest.raises(SchemaMismatchError, match='query lacks column id.*"recreate"'):
        plan_schema_change(table, diff, dropped, "evolve")
    added = pa.schema([*EVENTS, pa.field("x", pa.bool_())])
    diff = diff_schemas(table.schema(), added)
    with pytest.raises(SchemaMismatchError, match='new column x.*on_schema_change="fail"'):
        plan_schema_change(table, diff, added, "fail")
    assert [f.name for f in table.refresh().schema().fields] == ["ts", "country", "id", "n"]


def test_a_planned_change_commits_nothing_and_keeps_old_names_on_old_fields(
    tmp_path: Path,
) -> None:
    """Files without ids keep resolving a replaced column's name to the field they wrote."""
    from pyiceberg.table.name_mapping import parse_mapping_from_json

    table = _table(tmp_path)
    before = (table.metadata.current_schema_id, len(table.metadata.schemas), table.properties)
    query = pa.schema([*[f for f in EVENTS if f.name != "n"], pa.field("n", pa.string())])
    change = plan_schema_change(table, diff_schemas(table.schema(), query), query, "recreate")
    table.refresh()
    assert (table.metadata.current_schema_id, len(table.metadata.schemas)) == before[:2]
    assert table.properties == before[2]
    new_n = pending_table(table, change).schema().find_field("n").field_id
    ids = {n: f.field_id for f in parse_mapping_from_json(change.name_mapping) for n in f.names}
    assert ids["n"] == 4 and new_n != 4
    assert SchemaChange.from_json(json.loads(json.dumps(change.to_json()))) == change
    with pytest.raises((TypeError, ValueError)):
        SchemaChange.from_json({**change.to_json(), "schema": {"type": "struct"}})


# -- one commit: the schema change lands with its batch or not at all ---------------
OLD_ROWS = pa.table(
    {
        "ts": [dt.datetime(2026, 3, 1, 8), dt.datetime(2026, 3, 1, 9)],
        "country": ["DE", "FR"],
        "id": [1, 2],
        "n": [3, 4],
    },
    schema=EVENTS,
)
#: ``recreate``: ``id`` dropped, ``n`` narrowed to a string, ``x`` added.
RECREATED = pa.schema(
    [("ts", pa.timestamp("us")), ("country", pa.string()), ("n", pa.string()), ("x", pa.bool_())]
)
#: ``evolve``: ``n`` widened to a long, ``x`` added.
EVOLVED = pa.schema([*[f for f in EVENTS if f.name != "n"], ("n", pa.int64()), ("x", pa.bool_())])
NEW_ROWS = {
    "recreate": pa.table(
        {
            "ts": [dt.datetime(2026, 3, 1, 8), dt.datetime(2026, 3, 2, 8)],
            "country": ["DE", "US"],
            "n": ["three", "five"],
            "x": [True, None],
        },
        schema=RECREATED,
    ),
    "evolve": pa.table(
        {
            "ts": [dt.datetime(2026, 3, 1, 8), dt.datetime(2026, 3, 2, 8)],
            "country": ["DE", "US"],
            "id": [1, 7],
            "n": [2**40, 5],
            "x": [True, None],
        },
        schema=EVOLVED,
    ),
}


def _rows(data: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(zip(*(c.to_pylist() for c in data.columns), strict=True))


def _description(table: Any, time: int) -> BatchDescription:
    table.refresh()
    timeline = Timeline.of(table)
    return BatchDescription(
        target="lake.t",
        lower=timeline.upper,
        upper=Frontier.sealing(time),
        time=time,
        base_snapshot_id=timeline.head_snapshot_id,
    )


def _stage(
    table: Any,
    desc: BatchDescription,
    rows: pa.Table,
    change: SchemaChange | None = None,
    remove: tuple[str, ...] = (),
) -> str:
    """Stage a batch as the write job does: its files under the schema it commits with."""
    target = table if change is None else pending_table(table, change)
    batch, manifest = begin_batch(target, desc, schema_change=change)
    added = tuple(p.file for p in BatchFiles(target, batch.data_dir).write_rows(rows))
    finish_batch(batch, manifest, [StagedTime(desc.time, added, remove)])
    return manifest


def _first_tick(tmp_path: Path) -> tuple[Any, int]:
    """The table with ``OLD_ROWS`` landed at time 10; the snapshot they landed in."""
    table = _table(tmp_path)
    desc = _description(table, 10)
    assert land_staged(table, _stage(table, desc, OLD_ROWS), description=desc).result.landed
    return table, table.metadata.current_snapshot_id


def _planned(table: Any, mode: str) -> SchemaChange:
    query = RECREATED if mode == "recreate" else EVOLVED
    return plan_schema_change(table, diff_schemas(table.schema(), query), query, mode)


def _schema_state(table: Any) -> tuple[Any, ...]:
    table.refresh()
    metadata = table.metadata
    return (
        metadata.current_schema_id,
        [s.schema_id for s in metadata.schemas],
        metadata.last_column_id,
        metadata.properties.get("schema.name-mapping.default"),
    )


@pytest.mark.parametrize("mode", ["recreate", "evolve"])
def test_a_schema_change_lands_with_its_batch_in_one_commit(tmp_path: Path, mode: str) -> None:
    table, old_snapshot = _first_tick(tmp_path)
    old_schema = table.metadata.current_schema_id
    old_files = tuple(t.file.file_path for t in table.scan().plan_files())
    snapshots, log = len(table.metadata.snapshots), len(table.metadata.metadata_log)
    desc = _description(table, 20)
    change = _planned(table, mode)
    manifest = _stage(table, desc, NEW_ROWS[mode], change, remove=old_files)
    batch = read_manifest(manifest)
    landed = land_staged(table, manifest, description=desc)
    assert landed.landed_by_this_attempt

    table.refresh()
    metadata = table.metadata
    # One commit: one new snapshot, one new metadata file, the snapshot under the new schema.
    assert len(metadata.snapshots) == snapshots + 1
    assert len(metadata.metadata_log) == log + 1
    head = metadata.current_snapshot()
    assert head is not None and head.parent_snapshot_id == old_snapshot
    assert head.schema_id == metadata.current_schema_id != old_schema
    assert metadata.snapshot_by_id(old_snapshot).schema_id == old_schema
    query = NEW_ROWS[mode].schema
    assert [f.name for f in table.schema().fields] == [
        *[n for n in EVENTS.names if n in query.names],
        *[n for n in query.names if n not in EVENTS.names],
    ]
    assert rows_of(table) == _rows(NEW_ROWS[mode].select(table.schema().column_names))
    assert Timeline.of(table).upper == Frontier.sealing(20)
    # Time travel to the snapshot before: the old rows, with the old columns.
    then = table.scan(snapshot_id=old_snapshot).to_arrow()
    assert then.column_names == EVENTS.names and _rows(then) == _rows(OLD_ROWS)
    # A retried append of the landed batch finds it landed and commits nothing.
    again = append_batch(table, batch)
    assert again.landed and again.already_landed
    table.refresh()
    assert len(table.metadata.metadata_log) == log + 1


@pytest.mark.parametrize("when", ["before", "at-commit"])
@pytest.mark.parametrize("rival", ["append", "schema-change"])
def test_a_lost_race_changes_nothing_not_even_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rival: str, when: str
) -> None:
    """Another writer moves the head or changes the schema, before the append or between
    its checks and its catalog commit: the batch loses, the schema stays the rival's."""
    from pyiceberg.types import StringType

    table, _ = _first_tick(tmp_path)
    before = _schema_state(table)
    desc = _description(table, 20)
    change = _planned(table, "recreate")
    manifest = _stage(table, desc, NEW_ROWS["recreate"], change)
    data_dir = read_manifest(manifest).data_dir
    other = sqlite_config(tmp_path).load().load_table("lake.t")

    def run_rival() -> None:
        if rival == "schema-change":
            other.update_schema().add_column("y", StringType()).commit()
            return
        result = compare_and_append(
            other, expected_upper=desc.lower, new_upper=Frontier.sealing(15), batch_id="rival"
        )
        assert result.landed

    if when == "before":
        run_rival()
        outcome = land_staged(table, manifest, description=desc)
    else:
        outcome = _land_while(table, manifest, desc, tmp_path, monkeypatch, run_rival)
        assert "rejected by the catalog" in outcome.result.reason
    assert not outcome.result.landed
    after = _schema_state(table)
    columns = [("ts", "timestamp"), ("country", "string"), ("id", "long"), ("n", "int")]
    if rival == "append":
        assert after == before
    else:  # the rival's schema, not ours
        assert after[0] == before[0] + 1 and len(after[1]) == len(before[1]) + 1
        columns.append(("y", "string"))
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == columns
    assert [e.batch_id for e in Timeline.of(table).entries].count(desc.id) == 0
    assert outcome.files_deleted >= 1 and not local_path(data_dir).exists()


def _land_while(
    table: Any,
    manifest: str,
    desc: BatchDescription,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rival: Callable[[], None],
) -> Any:
    """``land_staged``, with ``rival`` run after its checks and before its catalog commit."""
    marker = tmp_path / "paused"
    monkeypatch.setenv(FAILPOINTS, f"commit.before-catalog-commit=sleep:3@{marker}")
    outcome: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: outcome.setdefault("x", land_staged(table, manifest, description=desc))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the append never reached its commit"
        time.sleep(0.05)
    rival()  # the failpoint fired once: the rival commits unpaused
    thread.join(timeout=60)
    assert not thread.is_alive()
    return outcome["x"]


def test_the_first_definition_owns_a_table_and_a_second_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path)
    mine, theirs = Owner("daily_dag", "view_daily"), Owner("copy_dag", "view_daily")
    assert claim(table, mine, record=False) is table  # read-only: checks only
    assert Owner.of(table) is None
    table = claim(table, mine)
    assert table.properties[TableKeys.OWNER_DAG] == "daily_dag"
    assert claim(table, mine) is table
    with pytest.raises(OwnershipError) as err:
        claim(table, theirs)
    assert "'daily_dag'" in str(err.value) and "'copy_dag'" in str(err.value)
    assert TableKeys.OWNER_DAG in str(err.value)


def test_a_registered_collection_cannot_be_claimed_by_a_view(tmp_path: Path) -> None:
    """Its writers own it: a view ticking into it would undo their rows on every tick."""
    from airflow_provider_ct.collections import register_collection

    catalog = sqlite_config(tmp_path).load()
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    table = register_collection(catalog, "lake.log", schema, "append-only")
    before = dict(table.properties)
    with pytest.raises(OwnershipError, match="registered append-only collection"):
        claim(table, Owner("daily_dag", "view_daily"))
    assert dict(catalog.load_table("lake.log").properties) == before  # nothing recorded


def test_a_partitioned_collection_keeps_each_file_in_its_partition(tmp_path: Path) -> None:
    """Blind writes and retractions into ``bucket(2, k), v``: files and deletes per partition."""
    import pyarrow.parquet as pq
    from pyiceberg.transforms import BucketTransform

    from airflow_provider_ct.collections import AppendOnlyCollection, register_collection

    catalog = sqlite_config(tmp_path).load()
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    layout = TableLayout.parse(["bucket(2, k)", "v"], ["k"])
    table = register_collection(catalog, "lake.log", schema, "append-only", layout=layout)
    assert [str(f.transform) for f in table.spec().fields] == ["bucket[2]", "identity"]
    rows = [(k, v) for k in range(8) for v in ("a", "b")]
    with AppendOnlyCollection.open(catalog, "lake.log", batch_interval_ms=0) as writer:
        writer.blind_write(rows)
        writer.blind_write([(1, "a"), (6, "b")], diffs=[-1, -1])
    table = catalog.load_table("lake.log")
    expected = [r for r in rows if r not in {(1, "a"), (6, "b")}]
    assert sorted(rows_of(table).elements()) == sorted(expected)
    bucket = BucketTransform(2).transform(pa_type_long())
    partition_of, deletes = {}, []
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as stream:
            keys = {(bucket(r["k"]), r["v"]) for r in pq.read_table(stream).to_pylist()}
        assert keys == {tuple(task.file.partition)}
        partition_of[task.file.file_path] = tuple(task.file.partition)
        deletes += task.delete_files
    # Retractions rewrite small files or add position deletes: either stays in its partition.
    for delete in deletes:
        with table.io.new_input(delete.file_path).open() as stream:
            targets = set(pq.read_table(stream).column("file_path").to_pylist())
        assert {partition_of[t] for t in targets} == {tuple(delete.partition)}
    assert len(partition_of) == 4  # two buckets times two values: the check could fail


def pa_type_long() -> Any:
    from pyiceberg.types import LongType

    return LongType()
