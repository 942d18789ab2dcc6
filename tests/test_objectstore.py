"""Object storage and a REST catalog for real: SeaweedFS's S3 and Iceberg REST catalog on 127.0.0.1.

PyIceberg only here (no JVM): the storage settings reach every file this
package lists, writes and deletes outside Iceberg, and compare-and-append
through the REST catalog's commit requirements refuses the loser of a race
and a second attempt of a landed batch.

SeaweedFS's REST catalog keeps tables in an S3 *table bucket*, which accepts
only Iceberg's own layout: the staged files go to ``data/ct_batch=<id>/...``
inside the table as everywhere, the manifests to ``ct.staging-root``, a
folder of the server's plain bucket (docs/deployment.md, "Table buckets").
Staging, landing and the sweep run on both catalogs: the REST one over the
table bucket and a SQL one whose warehouse is the plain bucket.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.manifest import StagedTime
from airflow_provider_ct.core.staging import (
    batch_data_dir,
    begin_batch,
    finish_batch,
    list_manifests,
    new_attempt_id,
)
from airflow_provider_ct.core.storage import files_under, filesystem, io_properties
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import StagingError
from tests.conftest import SCHEMA
from tests.helpers import advance, mint_view_tick, replace_contents, rows_of
from tests.objectstore import BUCKET, ObjectStore

pytestmark = pytest.mark.objectstore

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string())])
T1 = 1_700_000_000_000


def _namespace(prefix: str) -> str:
    """A namespace of the test's own on the session's shared REST catalog."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _data_file(table: Any, name: str, rows: list[tuple[int, str]]) -> list[str]:
    """Batch ``name``'s rows staged by the product's writer in its folder (``data/ct_batch=``)."""
    from airflow_provider_ct.core.batch_files import BatchFiles

    data = pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema=SCHEMA)
    folder = batch_data_dir(table.location(), name, new_attempt_id())
    return [part.file.path for part in BatchFiles(table, folder).write_rows(data)]


def _rest_table(store: ObjectStore, ident: str, schema: pa.Schema = SCHEMA) -> Any:
    catalog = store.rest_config().load()
    catalog.create_namespace_if_not_exists(ident.split(".")[0])
    return create_managed_table(catalog, ident, schema)


# -- storage through the catalog's settings ------------------------------------------------
def test_storage_reaches_s3_with_the_catalogs_settings_only(object_store: ObjectStore) -> None:
    """The settings open the store; the same URI without them (or with wrong keys) is refused."""
    io = object_store.io_properties()
    folder = f"s3://{BUCKET}/storage-{uuid.uuid4().hex[:8]}"
    fs, path = filesystem(f"{folder}/a/b.txt", io)
    assert isinstance(fs, pafs.S3FileSystem) and path.startswith(f"{BUCKET}/storage-")
    with fs.open_output_stream(path) as out:
        out.write(b"hello")
    uris = [f"s3://{i.path}" for i in files_under(folder, io)]
    assert uris == [f"{folder}/a/b.txt"]
    # s3a:// (Hadoop's spelling, what Spark writes) is the same object.
    fs_a, path_a = filesystem(f"s3a://{path}", io)
    assert fs_a.get_file_info(path_a).size == 5
    wrong = {**io, "s3.secret-access-key": "not-the-key"}
    with pytest.raises(OSError):
        filesystem(folder, wrong)[0].get_file_info(pafs.FileSelector(path.rsplit("/", 2)[0]))
    with pytest.raises(StagingError):
        filesystem("s3:///no-bucket", io)


def test_rest_tables_live_on_s3_and_carry_the_settings(object_store: ObjectStore) -> None:
    table = _rest_table(object_store, f"{_namespace('loc')}.t")
    assert table.location().startswith("s3://")
    props = io_properties(table)
    assert props["s3.endpoint"] == object_store.s3_endpoint


# -- compare-and-append through the REST catalog ------------------------------------------
def _racer(
    config: CatalogConfig, ident: str, name: str, expected: int, new: int, barrier: Any, out: Any
) -> None:
    table = config.load().load_table(ident)
    files = _data_file(table, name, [(new, name), (new, name)])
    barrier.wait(timeout=60)
    result = compare_and_append(
        table,
        expected_upper=Frontier.at(expected),
        new_upper=Frontier.at(new),
        batch_id=name,
        add_files=files,
    )
    out.put((name, result.landed, result.upper.time))


def test_two_writers_race_on_rest_exactly_one_lands(object_store: ObjectStore) -> None:
    """Two processes, one expected upper, each round: the REST commit takes exactly one."""
    ident = f"{_namespace('race')}.t"
    table = _rest_table(object_store, ident)
    config = object_store.rest_config()
    ctx = mp.get_context("spawn")
    expected, winners = 0, []
    for round_no in range(3):
        barrier, out = ctx.Barrier(2), ctx.Queue()
        new = expected + 10
        procs = [
            ctx.Process(
                target=_racer,
                args=(config, ident, f"r{round_no}-{side}", expected, new, barrier, out),
            )
            for side in ("a", "b")
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
            assert proc.exitcode == 0
        outcomes = [out.get(timeout=5) for _ in procs]
        landed = [o for o in outcomes if o[1]]
        assert len(landed) == 1, outcomes
        assert [o[2] for o in outcomes if not o[1]] == [new]  # the loser learns the upper
        winners.append(landed[0][0])
        expected = new
    table.refresh()
    assert rows_of(table) == Counter({(10 * (i + 1), w): 2 for i, w in enumerate(winners)})
    assert Timeline.of(table).upper == Frontier.at(expected)


def test_a_retried_batch_id_lands_once_on_rest(object_store: ObjectStore) -> None:
    table = _rest_table(object_store, f"{_namespace('retry')}.t")
    files = _data_file(table, "b1", [(1, "a")])
    first = compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(10), batch_id="b1",
        add_files=files,
    )  # fmt: skip
    again = compare_and_append(
        table, expected_upper=Frontier.minimum(), new_upper=Frontier.at(10), batch_id="b1",
        add_files=files,
    )  # fmt: skip
    assert first.landed and not first.already_landed
    assert again.landed and again.already_landed
    assert rows_of(table) == Counter({(1, "a"): 1})
    assert len(table.metadata.snapshots) == 1


def _stage_attempt(table: Any, description: Any, rows: list[tuple[int, str]]) -> str:
    """One write attempt of ``description``'s batch, staged on S3 as a writer does."""
    from airflow_provider_ct.core.batch_files import BatchFiles

    batch, manifest = begin_batch(table, description)
    data = pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema=SCHEMA)
    parts = BatchFiles(table, batch.data_dir).write_rows(data)
    time = StagedTime(description.time, tuple(p.file for p in parts))
    finish_batch(batch, manifest, [time], io=io_properties(table))
    return manifest


def _catalog(store: ObjectStore, kind: str, tmp_path: Path, ns: str) -> Any:
    """The REST catalog over the table bucket, or a SQLite one over the plain bucket."""
    config = store.rest_config() if kind == "rest" else store.sql_config(tmp_path, ns)
    catalog = config.load()
    catalog.create_namespace_if_not_exists(ns)
    return catalog


@pytest.mark.parametrize("kind", ["rest", "sql"])
def test_duplicate_attempts_land_once_and_the_loser_is_removed_from_s3(
    object_store: ObjectStore, tmp_path: Path, kind: str
) -> None:
    """Two attempts of one minted batch: the first lands, the second finds it landed.

    The second attempt's files and manifest are deleted from the bucket (the
    catalog's keys, not the environment's, reach them); the sweep finds nothing left.
    On REST the data files are in the table bucket, the manifests in the plain one.
    """
    ns = _namespace(f"attempts_{kind}")
    catalog = _catalog(object_store, kind, tmp_path, ns)
    events = create_managed_table(catalog, f"{ns}.events", EVENTS)
    replace_contents(events, T1, pa.table({"id": [1], "kind": ["a"]}, schema=EVENTS))
    advance(events, T1)
    target = create_managed_table(catalog, f"{ns}.view", SCHEMA)
    tick = mint_view_tick(catalog, f"{ns}.view", f"SELECT id AS k, kind AS v FROM {ns}.events", T1)
    manifests = [
        _stage_attempt(target, tick.description, [(1, "a")]),
        _stage_attempt(target, tick.description, [(1, "a")]),
    ]
    io = io_properties(target)
    if kind == "rest":
        assert all(m.startswith(f"s3://{BUCKET}/ct-staging/lakehouse/") for m in manifests)
    assert len(list(list_manifests(target.location(), target.metadata.properties, io))) == 2
    first = land_staged(target, manifests[0])
    second = land_staged(target, manifests[1])
    assert first.result.landed and not first.result.already_landed
    assert second.result.already_landed and second.files_deleted == 1
    assert list(list_manifests(target.location(), target.metadata.properties, io)) == []
    target.refresh()
    assert rows_of(target) == Counter({(1, "a"): 1})
    staged = {f"s3://{i.path}" for i in files_under(f"{target.location()}/data", io)}
    assert staged == {f.file_path for f in _data_files(target)}
    report = sweep_staged(target, grace_ms=0)
    assert report.files_deleted == 0 and report.orphans_deleted == 0


def test_the_sweep_on_a_table_bucket(object_store: ObjectStore, tmp_path: Path) -> None:
    """REST + table bucket: a crashed attempt (manifest in the plain bucket) and an orphan go.

    A lost writer's manifest stays ``writing`` and names its folder; once the
    head moved on, the sweep deletes its files from the table bucket and its
    manifest from the plain one; a file no manifest names goes after the grace.
    """
    ns = _namespace("sweep")
    catalog = _catalog(object_store, "rest", tmp_path, ns)
    events = create_managed_table(catalog, f"{ns}.events", EVENTS)
    replace_contents(events, T1, pa.table({"id": [1], "kind": ["a"]}, schema=EVENTS))
    advance(events, T1)
    target = create_managed_table(catalog, f"{ns}.view", SCHEMA)
    tick = mint_view_tick(catalog, f"{ns}.view", f"SELECT id AS k, kind AS v FROM {ns}.events", T1)
    crashed, crashed_manifest = begin_batch(target, tick.description)
    _data_file(target, "orphan", [(9, "z")])
    landed = _stage_attempt(target, tick.description, [(1, "a")])
    assert land_staged(target, landed).result.landed
    io = io_properties(target)
    report = sweep_staged(target, grace_ms=0)
    assert report.discarded == (crashed.batch_id,) and report.orphans_deleted == 1
    assert list(list_manifests(target.location(), target.metadata.properties, io)) == []
    target.refresh()
    staged = {f"s3://{i.path}" for i in files_under(f"{target.location()}/data", io)}
    assert staged == {f.file_path for f in _data_files(target)}
    assert rows_of(target) == Counter({(1, "a"): 1})
    assert crashed_manifest.startswith(f"s3://{BUCKET}/")


def test_a_table_bucket_without_a_staging_root_is_a_clear_error(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    """Manifests beside a table in a table bucket are refused: the error names the setting."""
    ns = _namespace("noroot")
    catalog = object_store.rest_config(staging_root=False).load()
    catalog.create_namespace_if_not_exists(ns)
    events = create_managed_table(catalog, f"{ns}.events", EVENTS)
    replace_contents(events, T1, pa.table({"id": [1], "kind": ["a"]}, schema=EVENTS))
    advance(events, T1)
    target = create_managed_table(catalog, f"{ns}.view", SCHEMA)
    tick = mint_view_tick(catalog, f"{ns}.view", f"SELECT id AS k, kind AS v FROM {ns}.events", T1)
    with pytest.raises(StagingError, match="ct.staging-root"):
        begin_batch(target, tick.description)


def _data_files(table: Any) -> list[Any]:
    return [task.file for task in table.scan().plan_files()]


# -- the same settings, translated for Spark -----------------------------------------------
def test_spark_gets_s3a_settings_and_keys_only_apart(object_store: ObjectStore) -> None:
    """S3A settings and HadoopFileIO on the command line; the keys only in the secret part."""
    from airflow_provider_ct.spark.conf import secret_spark_conf, spark_conf, spark_jars

    config = object_store.rest_config()
    public = spark_conf(config, include_jars=False)
    assert public["spark.hadoop.fs.s3a.endpoint"] == object_store.s3_endpoint
    assert public["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert public["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert public["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert public["spark.sql.catalog.ct.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
    everything = json.dumps(public)
    assert object_store.secret_key not in everything
    assert object_store.access_key not in everything
    secret = secret_spark_conf(config)
    assert secret["spark.hadoop.fs.s3a.access.key"] == object_store.access_key
    assert secret["spark.hadoop.fs.s3a.secret.key"] == object_store.secret_key
    assert secret["spark.sql.catalog.ct.credential"].endswith(object_store.secret_key)
    jars = [Path(j).name for j in spark_jars(config)]
    assert jars[0].startswith("iceberg-spark-runtime-3.5_2.12-")
    assert {"hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar"} <= set(jars)
    assert not any("jackson" in j for j in jars)  # the runtime carries its own
