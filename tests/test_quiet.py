"""Quiet ticks decided from metadata alone, on real SQLite catalogs (no JVM).

The view batches these tests start from are landed the way the write job
lands them (staged files, a manifest with the query hash, compare-and-append),
with the desired rows computed by DuckDB instead of Spark.
"""

from __future__ import annotations

import time as _time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import StringType

from airflow_provider_ct.collections import AppendOnlyCollection, register_collection
from airflow_provider_ct.collections.compaction import compact
from airflow_provider_ct.collections.ticker import tick_table
from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.continual import input_times
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.manifest import StagedFile, StagedTime, read_manifest, write_manifest
from airflow_provider_ct.core.query import nondeterministic_calls, parse_query, query_hash
from airflow_provider_ct.core.quiet import (
    continual_tick_is_quiet,
    stage_empty_batch,
    view_tick_is_quiet,
)
from airflow_provider_ct.core.staging import begin_batch, finish_batch
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import StagingError
from tests.conftest import SCHEMA
from tests.helpers import (
    advance,
    live_data_files,
    local_path,
    mint_view_tick,
    oracle,
    replace_contents,
    rewrite_files,
    rows_of,
)

SQL = "SELECT a.k, b.v FROM q.a AS a JOIN q.b AS b ON a.k = b.k"
TARGET = "q.view"


# -- helpers ------------------------------------------------------------------------------
def _rows(*pairs: tuple[int, str | None]) -> pa.Table:
    return pa.Table.from_pylist([{"k": k, "v": v} for k, v in pairs], SCHEMA)


def land_view(
    catalog: Any,
    target: str,
    sql: str,
    time: int,
    written: dict[str, int | None],
    *,
    hash_it: bool = True,
) -> Any:
    """One view tick as the write job does it, with DuckDB computing the desired rows.

    ``written`` is each input's snapshot as the test recorded it when it wrote
    the input: the rows are computed over those, and the minted description
    must pin exactly them (so a pinning bug fails here instead of feeding the
    batch). Returns the description it landed.
    """
    desc = mint_view_tick(catalog, target, sql, time).description
    assert desc is not None
    assert dict(desc.inputs) == written
    table = catalog.load_table(target)
    want = oracle(catalog, sql, written)
    data = pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, row, strict=True)) for row, n in want.items() for _ in range(n)],
        SCHEMA,
    )
    summary = {SummaryKeys.QUERY_HASH: query_hash(sql)} if hash_it else None
    batch, manifest = begin_batch(table, desc, summary=summary)
    path = f"{batch.data_dir}/part-{uuid.uuid4().hex}.parquet"
    local_path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, local_path(path))
    added = StagedFile(path, data.num_rows, local_path(path).stat().st_size)
    change = StagedTime(desc.time, (added,), tuple(live_data_files(table)))
    finish_batch(batch, manifest, [change])
    assert land_staged(table, manifest, description=desc).result.landed
    return desc


def heads(tables: dict[str, Any]) -> dict[str, int | None]:
    """Each table's current snapshot: the test's record, taken right after its own writes."""
    return {
        name: None if (s := t.metadata.current_snapshot()) is None else s.snapshot_id
        for name, t in tables.items()
    }


def shop(catalog: Any) -> dict[str, Any]:
    """Inputs ``q.a`` and ``q.b`` with rows at 500, and the (empty) target."""
    a = create_managed_table(catalog, "q.a", SCHEMA)
    b = create_managed_table(catalog, "q.b", SCHEMA)
    replace_contents(a, 500, _rows((1, None), (2, None), (2, None)))
    replace_contents(b, 500, _rows((1, "one"), (2, "two"), (3, "three")))
    create_managed_table(catalog, TARGET, SCHEMA)
    return {"q.a": a, "q.b": b}


def seal(catalog: Any, time: int) -> None:
    for name in ("q.a", "q.b"):
        advance(catalog.load_table(name), time)


def decide(catalog: Any, desc: BatchDescription, sql: str = SQL) -> Any:
    inputs = {n: catalog.load_table(n) for n in parse_query(sql).inputs}
    return view_tick_is_quiet(catalog.load_table(TARGET), desc, sql=sql, inputs=inputs)


def mint_at(catalog: Any, time: int, sql: str = SQL) -> BatchDescription:
    desc = mint_view_tick(catalog, TARGET, sql, time).description
    assert desc is not None
    return desc


def external(catalog: Any) -> Any:
    """``q.ext``: a table written by plain PyIceberg (its upper is the wall clock)."""
    catalog.create_namespace_if_not_exists("q")
    return catalog.create_table("q.ext", schema=SCHEMA)


def sealed_now() -> int:
    """A time an external input (wall-clock upper, 1 s allowance) has sealed: wait for it."""
    time = now_ms()
    _time.sleep(1.1)
    return time


# -- views: quiet -------------------------------------------------------------------------
def test_unchanged_inputs_are_quiet_and_the_empty_batch_keeps_the_contents(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    # The inputs' snapshots as the test wrote them (not as the product pinned them).
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    before = rows_of(catalog.load_table(TARGET))
    assert before == oracle(catalog, SQL, written) and sum(before.values()) == 3
    seal(catalog, 2000)  # the inputs' uppers move on; their contents do not
    desc = mint_at(catalog, 2000)
    quiet, reason = decide(catalog, desc)
    assert quiet, reason
    assert reason.startswith("no input changed") and "same snapshot" in reason

    table = catalog.load_table(TARGET)
    hashed = {SummaryKeys.QUERY_HASH: query_hash(SQL)}
    batch, manifest = stage_empty_batch(table, desc, record_time=True, summary=hashed)
    assert batch.staged_files == [] and [t.time for t in batch.times] == [2000]
    assert land_staged(table, manifest, description=desc).result.landed
    table = catalog.load_table(TARGET)
    timeline = Timeline.of(table)
    assert timeline.upper == Frontier.sealing(2000)
    assert [t for t, _ in timeline.data_times()] == [1000, 2000]
    assert rows_of(table) == oracle(catalog, SQL, written) == before
    assert rows_of(table, timeline.snapshot_at(2000)) == rows_of(table, timeline.snapshot_at(1999))
    head = timeline.entries[-1]
    assert head.inputs == dict(desc.inputs) == written
    assert head.summary[SummaryKeys.QUERY_HASH] == query_hash(SQL)
    # The quiet batch carries what the next proof needs: quiet again.
    seal(catalog, 3000)
    assert decide(catalog, mint_at(catalog, 3000)).quiet


def test_an_upstream_empty_append_changes_no_row(sqlite_catalog_config: CatalogConfig) -> None:
    """An input that is itself a view with a quiet tick: a new snapshot, no new file."""
    catalog = sqlite_catalog_config.load()
    inputs = shop(catalog)
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, heads(inputs))
    a = inputs["q.a"]
    a.refresh()
    landed = compare_and_append(
        a,
        expected_upper=Timeline.of(a).upper,
        new_upper=Frontier.sealing(1500),
        batch_id="upstream-quiet-1500",
        time=1500,
    )
    assert landed.landed
    seal(catalog, 2000)
    desc = mint_at(catalog, 2000)
    assert desc.inputs["q.a"] == landed.snapshot_ids[0]  # pinned to the empty append
    quiet, reason = decide(catalog, desc)
    assert quiet, reason
    assert "changed no row" in reason


def test_a_compacted_external_input_is_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    ext = external(catalog)
    ext.append(_rows((1, "x"), (2, None), (2, None)))
    ext.append(_rows((3, "y")))
    appended = ext.metadata.current_snapshot().snapshot_id
    create_managed_table(catalog, "q.ev", SCHEMA)
    sql = "SELECT k, v FROM q.ext"
    land_view(catalog, "q.ev", sql, sealed_now(), {"q.ext": appended})
    compacted = rewrite_files(catalog.load_table("q.ext"))
    desc = mint_view_tick(catalog, "q.ev", sql, sealed_now()).description
    assert desc is not None and desc.inputs["q.ext"] == compacted != appended
    quiet, reason = view_tick_is_quiet(
        catalog.load_table("q.ev"), desc, sql=sql, inputs={"q.ext": catalog.load_table("q.ext")}
    )
    assert quiet, reason
    # Right to be quiet: the query gives the same rows over the test's own snapshots.
    assert oracle(catalog, sql, {"q.ext": compacted}) == oracle(catalog, sql, {"q.ext": appended})


def test_a_view_over_a_collection_our_compaction_rewrote_is_quiet(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """compact() commits Iceberg's ``replace``: the view downstream proves its tick quiet.

    The collection is compacted after the view's last tick, then a
    checkpointing tick restates its contents at a later time, so the next
    mint pins a snapshot past the compaction. An ``overwrite`` there (what
    compaction committed before) made the view run Spark to find no change.
    """
    catalog = sqlite_catalog_config.load()
    register_collection(catalog, "q.coll", SCHEMA, "append-only")
    with AppendOnlyCollection.open(catalog, "q.coll", batch_interval_ms=0) as writer:
        for i in range(4):
            writer.blind_write([(i, f"r{i}"), (i, None)])
    coll = catalog.load_table("q.coll")
    written = heads({"q.coll": coll})
    t1 = now_ms()
    assert tick_table(coll, now=t1 + 1).status == "advanced"
    create_managed_table(catalog, "q.cv", SCHEMA)
    sql = "SELECT k, v FROM q.coll WHERE k > 0"
    land_view(catalog, "q.cv", sql, t1, written)

    report = compact(catalog, "q.coll", min_files=4)
    assert report.status == "compacted" and report.files_rewritten == 4
    coll.refresh()
    assert coll.metadata.current_snapshot().summary.operation.value == "replace"
    checkpoint = tick_table(coll, now=t1 + 100, checkpoint_ms=0)
    assert checkpoint.status == "advanced" and "checkpoint" in checkpoint.detail
    coll.refresh()
    restated = coll.metadata.current_snapshot().snapshot_id

    desc = mint_view_tick(catalog, "q.cv", sql, t1 + 50).description
    assert desc is not None and desc.inputs["q.coll"] == restated != written["q.coll"]
    quiet, reason = view_tick_is_quiet(
        catalog.load_table("q.cv"), desc, sql=sql, inputs={"q.coll": coll}
    )
    assert quiet, reason
    assert "changed no row" in reason
    # Right to be quiet: the query gives the same rows over both snapshots.
    assert oracle(catalog, sql, {"q.coll": restated}) == oracle(catalog, sql, written)


# -- views: not quiet ---------------------------------------------------------------------
def test_a_changed_input_is_not_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    replace_contents(catalog.load_table("q.b"), 1500, _rows((1, "uno"), (2, "two")))
    seal(catalog, 2000)
    quiet, reason = decide(catalog, mint_at(catalog, 2000))
    assert not quiet
    assert reason.startswith("input q.b changed: snapshot") and "(overwrite)" in reason


def test_an_appended_external_input_is_not_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    ext = external(catalog)
    ext.append(_rows((1, "x")))
    create_managed_table(catalog, "q.ev", SCHEMA)
    sql = "SELECT k, v FROM q.ext"
    land_view(catalog, "q.ev", sql, sealed_now(), heads({"q.ext": ext}))
    rewrite_files(catalog.load_table("q.ext"))
    catalog.load_table("q.ext").append(_rows((9, "new")))  # compaction, then a real change
    desc = mint_view_tick(catalog, "q.ev", sql, sealed_now()).description
    assert desc is not None
    quiet, reason = view_tick_is_quiet(
        catalog.load_table("q.ev"), desc, sql=sql, inputs={"q.ext": catalog.load_table("q.ext")}
    )
    assert not quiet and "(append)" in reason


def test_an_input_schema_change_is_not_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    seal(catalog, 2000)
    desc = mint_at(catalog, 2000)
    assert decide(catalog, desc).quiet
    with catalog.load_table("q.a").update_schema() as update:
        update.add_column("extra", StringType())
    quiet, reason = decide(catalog, desc)
    assert not quiet and reason.startswith("input q.a's schema changed")


def test_an_expired_pinned_snapshot_is_not_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    ext = external(catalog)
    ext.append(_rows((1, "x")))
    appended = heads({"q.ext": ext})
    create_managed_table(catalog, "q.ev", SCHEMA)
    sql = "SELECT k, v FROM q.ext"
    land_view(catalog, "q.ev", sql, sealed_now(), appended)  # the batch pins the append
    rewrite_files(catalog.load_table("q.ext"))
    ext = catalog.load_table("q.ext")
    ext.maintenance.expire_snapshots().by_id(appended["q.ext"]).commit()
    desc = mint_view_tick(catalog, "q.ev", sql, sealed_now()).description
    assert desc is not None
    quiet, reason = view_tick_is_quiet(
        catalog.load_table("q.ev"), desc, sql=sql, inputs={"q.ext": catalog.load_table("q.ext")}
    )
    assert not quiet and "has expired" in reason


def test_target_drift_is_not_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    catalog.load_table(TARGET).append(_rows((99, "ghost")))  # behind our back
    seal(catalog, 2000)
    desc = mint_at(catalog, 2000)
    quiet, reason = decide(catalog, desc)
    assert not quiet and "foreign commit" in reason


def test_a_moved_head_or_a_changed_target_schema_is_not_quiet(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, SQL, 1000, written)
    seal(catalog, 2000)
    desc = mint_at(catalog, 2000)
    stale = BatchDescription(
        target=desc.target,
        lower=desc.lower,
        upper=desc.upper,
        time=desc.time,
        base_snapshot_id=12345,
        inputs=desc.inputs,
    )
    quiet, reason = decide(catalog, stale)
    assert not quiet and "is not the description's base 12345" in reason
    with catalog.load_table(TARGET).update_schema() as update:
        update.add_column("extra", StringType())
    quiet, reason = decide(catalog, desc)
    assert not quiet and reason == "the target's schema changed since the last batch"


def test_a_rolled_back_target_is_not_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    first = land_view(catalog, TARGET, SQL, 1000, written)
    seal(catalog, 2000)
    land_view(catalog, TARGET, SQL, 2000, written)
    table = catalog.load_table(TARGET)
    old_head = Timeline.of(table).find_batch(first.id)
    assert old_head is not None
    table.manage_snapshots().rollback_to_snapshot(old_head.snapshot_id).commit()
    seal(catalog, 3000)
    # Minting refuses a rolled-back table; a description made by hand is refused here too.
    desc = BatchDescription(
        target=TARGET,
        lower=Frontier.sealing(1000),
        upper=Frontier.sealing(3000),
        time=3000,
        base_snapshot_id=old_head.snapshot_id,
        inputs=written,
    )
    quiet, reason = decide(catalog, desc)
    assert not quiet and "rolled back" in reason


@pytest.mark.parametrize(
    ("last_sql", "now_sql", "hash_it", "expected"),
    [
        (SQL, SQL + " ", True, "the query changed since the last batch"),
        (SQL, SQL, False, "recorded no query hash: cannot prove quiet"),
        (
            SQL + " WHERE rand() < 2",
            SQL + " WHERE rand() < 2",
            True,
            "not a function of its inputs alone (it calls ['rand'])",
        ),
    ],
    ids=["query-changed", "no-hash", "nondeterministic"],
)
def test_a_query_that_cannot_be_vouched_for_is_not_quiet(
    sqlite_catalog_config: CatalogConfig, last_sql: str, now_sql: str, hash_it: bool, expected: str
) -> None:
    catalog = sqlite_catalog_config.load()
    written = heads(shop(catalog))
    seal(catalog, 1000)
    land_view(catalog, TARGET, last_sql, 1000, written, hash_it=hash_it)
    seal(catalog, 2000)
    quiet, reason = decide(catalog, mint_at(catalog, 2000, now_sql), now_sql)
    assert not quiet and expected in reason


def test_without_a_previous_batch_nothing_is_quiet(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    inputs = shop(catalog)
    catalog.drop_table(TARGET)
    seal(catalog, 1000)
    desc = mint_at(catalog, 1000)
    assert view_tick_is_quiet(None, desc, sql=SQL, inputs=inputs) == (
        False,
        "the target does not exist yet",
    )
    create_managed_table(catalog, TARGET, SCHEMA)
    assert decide(catalog, desc) == (False, "the target has no batch yet")


def test_nondeterministic_calls_are_found() -> None:
    def calls(sql: str) -> list[str]:
        return nondeterministic_calls(parse_query(sql).expression)

    assert calls(SQL) == []
    assert calls("SELECT k, count(*) FROM q.a GROUP BY k") == []
    assert calls("SELECT uuid(), now(), unix_timestamp() FROM q.a") == [
        "current_timestamp",
        "now",
        "uuid",
    ]
    assert calls("SELECT k FROM q.a TABLESAMPLE (10 PERCENT)") == ["tablesample"]


# -- continual tasks ----------------------------------------------------------------------
def _ct_desc(output: Any, lower: int, time: int) -> BatchDescription:
    head = output.metadata.current_snapshot()
    return BatchDescription(
        target="q.out",
        lower=Frontier.at(lower),
        upper=Frontier.sealing(time),
        time=time,
        base_snapshot_id=None if head is None else head.snapshot_id,
        inputs={},
    )


def test_a_continual_task_is_quiet_when_its_input_has_no_time_in_the_batch(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    src = create_managed_table(catalog, "q.src", SCHEMA)
    replace_contents(src, 3, _rows((1, "x")))
    advance(src, 30)
    output = create_managed_table(catalog, "q.out", SCHEMA, properties={TableKeys.AS_OF: "5"})

    def decide_ct(desc: BatchDescription, snapshot: bool = False) -> Any:
        return continual_tick_is_quiet(
            catalog.load_table("q.out"),
            desc,
            input_name="q.src",
            input_table=catalog.load_table("q.src"),
            snapshot=snapshot,
        )

    quiet, reason = decide_ct(_ct_desc(output, 0, 10))  # input time 3 is before the as-of
    assert quiet and reason == "no input changed: input q.src has no change in [0, 11)"
    # SNAPSHOT = true: a batch covering the as-of (5) takes the snapshot, however often
    # it is retried; later batches do not.
    quiet, reason = decide_ct(_ct_desc(output, 0, 10), snapshot=True)
    assert not quiet and reason == "input q.src has 1 time(s) to process in [0, 11)"
    assert decide_ct(_ct_desc(output, 6, 10), snapshot=True).quiet
    replace_contents(catalog.load_table("q.src"), 40, _rows((2, "y")))
    quiet, reason = decide_ct(_ct_desc(output, 11, 50))
    assert not quiet and reason == "input q.src has 1 time(s) to process in [11, 51)"
    # Not the first tick's output, or not at its base: the job decides.
    output.transaction().remove_properties(TableKeys.AS_OF).commit_transaction()
    assert not decide_ct(_ct_desc(output, 0, 10)).quiet
    assert not continual_tick_is_quiet(
        None, _ct_desc(output, 0, 10), input_name="q.src", input_table=src
    ).quiet


def test_a_compaction_is_not_an_input_time(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    ext = external(catalog)
    ext.append(_rows((1, "x")))
    ext.append(_rows((2, "y")))
    compacted = rewrite_files(catalog.load_table("q.ext"))
    timeline = Timeline.of(catalog.load_table("q.ext"))
    appends = {e.time for e in timeline.entries if e.operation == "append" and e.time is not None}
    replace = timeline.entry(compacted)
    assert replace is not None and replace.time is not None
    assert input_times(timeline, 0, replace.time + 1, -1) == sorted(appends)
    # The compaction's own time is no input time (unless an append shares its millisecond).
    assert input_times(timeline, replace.time, replace.time + 1, -1) == sorted(
        appends & {replace.time}
    )


# -- the manifest's summary ---------------------------------------------------------------
def test_a_manifest_may_only_set_known_summary_keys(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    shop(catalog)
    seal(catalog, 1000)
    desc = mint_at(catalog, 1000)
    table = catalog.load_table(TARGET)
    with pytest.raises(StagingError, match="not one a manifest may set"):
        begin_batch(table, desc, summary={SummaryKeys.UPPER: "99999"})
    batch, manifest = begin_batch(table, desc, summary={SummaryKeys.QUERY_HASH: "sha256:x"})
    assert read_manifest(manifest).summary == {SummaryKeys.QUERY_HASH: "sha256:x"}
    hostile = batch.to_json()
    hostile["summary"] = {SummaryKeys.BATCH_ID: "someone-else"}
    with open(local_path(manifest), "w") as out:
        import json

        json.dump(hostile, out)
    with pytest.raises(StagingError, match="not one a manifest may set"):
        read_manifest(manifest)
    write_manifest(batch, manifest)  # a well-formed one reads back
    assert read_manifest(manifest).summary == {SummaryKeys.QUERY_HASH: "sha256:x"}
