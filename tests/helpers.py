"""Test helpers that write real files and read real tables (no mocks)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.storage import Properties, files_under, filesystem, is_s3


def local_path(uri: str) -> Path:
    return Path(urlsplit(uri).path) if uri.startswith("file:") else Path(uri)


def file_key(uri: str) -> str:
    """A file's location without its scheme, as ``files_under`` lists it.

    ``file:///p``, ``file:/p`` and ``/p`` are all ``/p``; ``s3://b/k`` and
    ``s3a://b/k`` are both ``b/k``: Iceberg metadata, Spark and our staging
    spell one file in more than one way, and checks compare files, not spellings.
    """
    if "://" not in uri and not uri.startswith("file:"):
        return uri
    parts = urlsplit(uri)
    return parts.netloc + parts.path


def files_present(uri: str, io: Properties | None = None) -> set[str]:
    """The keys (:func:`file_key`) of every file below ``uri``: one listing, local or S3."""
    return {info.path for info in files_under(uri, io)}


def file_exists(uri: str, io: Properties | None = None) -> bool:
    """Whether a file exists, on a local folder or S3 (with the catalog's FileIO settings)."""
    fs, path = filesystem(uri, io)
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def stage_rows(table: Any, batch_id: str, rows: list[tuple[int, str | None]]) -> list[str]:
    """Write ``rows`` as one Parquet file in the batch's staging folder (no field ids)."""
    data = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
        }
    )
    return stage_arrow(table, batch_id, data)


def rows_of(table: Any, snapshot_id: int | None = None) -> Counter[tuple[Any, ...]]:
    """The table's rows (as of a snapshot) as a multiset, read by PyIceberg."""
    if snapshot_id is None and table.metadata.current_snapshot() is None:
        return Counter()
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow()
    return Counter(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def stage_arrow(table: Any, batch_id: str, data: pa.Table) -> list[str]:
    """Write an Arrow table as one Parquet file in the batch's staging folder.

    On object storage through the table's own FileIO (its catalog's S3 settings).
    """
    if is_s3(table.location()):
        path = f"{batch_data_dir(table.location(), batch_id)}/part-{uuid.uuid4().hex}.parquet"
        with table.io.new_output(path).create() as out:
            pq.write_table(data, out)
        return [path]
    folder = local_path(batch_data_dir(table.location(), batch_id))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(data, path)
    prefix = "file://" if table.location().startswith("file:") else ""
    return [prefix + str(path)]


def live_data_files(table: Any) -> list[str]:
    return [task.file.file_path for task in table.scan().plan_files()]


def replace_contents(table: Any, time: int, data: pa.Table) -> int:
    """Make a managed input hold exactly ``data`` from ``time`` on (one snapshot at ``time``).

    Returns the id of that snapshot, read from the table's head right after
    the commit: tests use it as their own record of where ``data`` lives.
    """
    from airflow_provider_ct.core.commit import compare_and_append
    from airflow_provider_ct.core.frontier import Frontier
    from airflow_provider_ct.core.timeline import Timeline

    table.refresh()
    upper = Timeline.of(table).upper
    batch_id = f"input-{time}-{uuid.uuid4().hex[:8]}"
    files = stage_arrow(table, batch_id, data) if data.num_rows else []
    result = compare_and_append(
        table,
        expected_upper=upper,
        new_upper=Frontier.sealing(time),
        batch_id=batch_id,
        add_files=files,
        remove_files=live_data_files(table),
        time=time,
    )
    assert result.landed, result
    table.refresh()
    return int(table.metadata.current_snapshot().snapshot_id)


def stamp(table: Any, time: int) -> int:
    """Declare a managed input's current contents to be its contents at ``time``.

    For inputs changed by writers that record no ``ct.time`` (Spark DML, a
    PyIceberg append, a compaction): one empty compare-and-append at ``time``
    (no file, so the contents stay those of the head). Returns its snapshot id.
    """
    from airflow_provider_ct.core.commit import compare_and_append
    from airflow_provider_ct.core.frontier import Frontier
    from airflow_provider_ct.core.timeline import Timeline

    table.refresh()
    result = compare_and_append(
        table,
        expected_upper=Timeline.of(table).upper,
        new_upper=Frontier.sealing(time),
        batch_id=f"stamp-{time}-{uuid.uuid4().hex[:8]}",
        time=time,
    )
    assert result.landed, result
    table.refresh()
    return int(table.metadata.current_snapshot().snapshot_id)


def advance(table: Any, time: int) -> None:
    """Advance a managed input's upper past ``time`` without changing it."""
    from airflow_provider_ct.core.commit import compare_and_append
    from airflow_provider_ct.core.frontier import Frontier
    from airflow_provider_ct.core.timeline import Timeline

    table.refresh()
    upper = Timeline.of(table).upper
    if upper.seals(time):
        return
    result = compare_and_append(
        table,
        expected_upper=upper,
        new_upper=Frontier.sealing(time),
        batch_id=f"advance-{time}-{uuid.uuid4().hex[:8]}",
    )
    assert result.landed, result


def oracle(
    catalog: Any, sql: str, pinned: dict[str, int | None], catalog_name: str = "ct"
) -> Counter[tuple[Any, ...]]:
    """Run ``sql`` in DuckDB over the given input snapshots (read by PyIceberg).

    ``pinned`` maps each input to a snapshot id (``None``: empty). For an
    oracle, pass snapshots the test recorded itself when it wrote the inputs,
    never the ones the product pinned (a description's ``inputs``, ``ct.inputs``):
    a pinning bug would then check itself. The tables are replaced by the
    snapshots with sqlglot here, not with the product's own rewrite
    (``ParsedQuery.pinned_sql``), so a bug there cannot hide either.
    """
    import duckdb

    con = duckdb.connect()
    tree = sqlglot.parse_one(sql, read="spark")
    views: dict[str, str] = {}
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not table.db and table.name.lower() in ctes:
            continue  # a WITH name, not an input
        name = _input_name(table, catalog_name)
        if name not in views:
            views[name] = f"__ct_input_{len(views)}"
            con.register(views[name], _snapshot_rows(catalog.load_table(name), pinned[name]))
        alias = table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(table.name))
        table.replace(exp.Table(this=exp.to_identifier(views[name]), alias=alias))
    duck_sql = tree.sql(dialect="duckdb")
    rows = con.execute(duck_sql).fetchall()
    return Counter(tuple(r) for r in rows)


#: The example shop's inputs, as ``dags_examples/shop_feed.py`` names them.
SHOP_INPUTS = ("orders", "customers")


def fed_snapshots(catalog: Any, namespace: str, time: int) -> dict[str, int | None]:
    """The snapshot ``shop_feed.feed_shop`` committed to each shop input for tick ``time``.

    For DAGs whose inputs a feed task writes, this is the test's own record of
    where the inputs' contents at ``time`` live: the feed commits once per input
    and tick, stamped with its batch id ``feed-<input>-<time>`` and ``ct.time``
    = ``time``. Read from the inputs' ``main`` history by PyIceberg alone, never
    from the view (its ``ct.inputs``) nor the package's timeline code.
    """
    from pyiceberg.table.snapshots import ancestors_of

    found: dict[str, int | None] = {}
    for short in SHOP_INPUTS:
        table = catalog.load_table(f"{namespace}.{short}")
        batch_id = f"feed-{short}-{time}"
        stamps = {
            s.snapshot_id: {} if s.summary is None else s.summary.additional_properties
            for s in ancestors_of(table.current_snapshot(), table.metadata)
        }
        matches = [i for i, p in stamps.items() if p.get("ct.batch-id") == batch_id]
        assert len(matches) == 1, (table.name(), batch_id, len(matches))
        assert stamps[matches[0]].get("ct.time") == str(time), (table.name(), batch_id)
        found[f"{namespace}.{short}"] = matches[0]
    return found


def _input_name(table: Any, catalog_name: str) -> str:
    """``[catalog.]ns.t`` as the catalog stores it (the test's own reading, not the product's)."""
    parts = [p.lower() for p in (table.catalog, table.db, table.name) if p]
    if len(parts) == 3 and parts[0] == catalog_name.lower():
        parts = parts[1:]
    assert len(parts) == 2, f"oracle: {table.sql()} is not namespace.table"
    return ".".join(parts)


def _snapshot_rows(table: Any, snapshot: int | None) -> pa.Table:
    if snapshot is None:
        return table.schema().as_arrow().empty_table()
    return table.scan(snapshot_id=snapshot).to_arrow()


def mint_view_tick(catalog: Any, target: str, sql: str, time: int) -> Any:
    """Mint a view's description for tick ``time`` from the catalog's current state."""
    from pyiceberg.exceptions import NoSuchTableError

    from airflow_provider_ct.core.mint import mint
    from airflow_provider_ct.core.query import parse_query
    from airflow_provider_ct.core.timeline import Timeline

    parsed = parse_query(sql, target=target)
    inputs = {n: Timeline.of(catalog.load_table(n)) for n in parsed.inputs}
    try:
        target_tl = Timeline.of(catalog.load_table(target))
    except NoSuchTableError:
        target_tl = None
    return mint(target=target, target_timeline=target_tl, time=time, inputs=inputs)


def append_between(table: Any, lower: int, upper: int, batch: str, **kwargs: Any) -> None:
    """Compare-and-append ``batch`` moving the upper from ``lower`` to ``upper``; it must land."""
    from airflow_provider_ct.core.commit import compare_and_append
    from airflow_provider_ct.core.frontier import Frontier

    result = compare_and_append(
        table,
        expected_upper=Frontier.at(lower),
        new_upper=Frontier.at(upper),
        batch_id=batch,
        **kwargs,
    )
    assert result.landed, result.reason


def rewrite_files(table: Any) -> int:
    """Compact the table's files into one: an Iceberg ``replace`` snapshot (same rows).

    The snapshot Spark's ``rewrite_data_files`` makes, through the product's
    ``replace_producer`` (PyIceberg 0.12 has no rewrite of its own); what is
    tested is how readers treat it, and the test checks the operation itself.
    """
    from pyiceberg.io.pyarrow import parquet_files_to_data_files
    from pyiceberg.table.snapshots import Operation

    from airflow_provider_ct.core.producers import replace_producer
    from airflow_provider_ct.core.tables import ensure_name_mapping

    ensure_name_mapping(table)  # the compacted file is written without field ids
    table.refresh()
    data = table.scan().to_arrow()
    path = f"{table.location()}/data/compacted-{uuid.uuid4().hex}.parquet"
    local_path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, local_path(path))
    old = [task.file for task in table.scan().plan_files()]
    tx = table.transaction()
    producer = replace_producer(tx, {})
    for data_file in old:
        producer.delete_data_file(data_file)
    for data_file in parquet_files_to_data_files(table.io, tx.table_metadata, iter([path])):
        producer.append_data_file(data_file)
    producer.commit()
    tx.commit_transaction()
    snapshot = table.metadata.current_snapshot()
    assert snapshot.summary.operation == Operation.REPLACE
    return int(snapshot.snapshot_id)


class XComTI:
    """The ``ti`` of a context for operators run by hand: ``xcom_pull(task_ids=...)``."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def xcom_pull(self, task_ids: str, **_: Any) -> Any:
        return self.values.get(task_ids)


def run_at_sealed_time(
    dag: Any, last_commit_ms: int, conf: dict[str, Any] | None = None, *, state: str = "success"
) -> int:
    """Run ``dag`` at a tick time its wall-clock inputs have sealed, after their last commit.

    Plain Iceberg inputs are sealed up to the wall clock minus the default
    1 s allowance for late commits: wait until that passes the last commit,
    then run with ``dag_run.conf["time"]`` just after it (and ``conf``).
    The run must end in ``state``. Returns the time.
    """
    import time as _time

    from airflow_provider_ct.core.frontier import now_ms

    while now_ms() < last_commit_ms + 1_100:
        _time.sleep(0.05)
    time = now_ms() - 1_050
    run = dag.test(run_conf={"time": time, **(conf or {})})
    assert run.state == state, run.state
    return time


#: Spark SQL table properties of a merge-on-read v2 input (Spark's DML writes deletes).
MERGE_ON_READ = (
    "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read')"
)


def fresh_events(spark: Any, namespace: str, columns: str, partitioned_by: str) -> None:
    """An empty namespace ``ct.<namespace>`` holding only a merge-on-read ``events`` input.

    Created with Spark SQL, as users create their tables: the tests of
    views over tables the product did not create start from one.
    """
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS ct.{namespace}")
    for (name,) in spark.sql(f"SHOW TABLES IN ct.{namespace}").select("tableName").collect():
        spark.sql(f"DROP TABLE IF EXISTS ct.{namespace}.{name} PURGE")
    spark.sql(
        f"CREATE TABLE ct.{namespace}.events ({columns}) USING iceberg "
        f"PARTITIONED BY ({partitioned_by}) {MERGE_ON_READ}"
    )


def task_xcom(dag_id: str, run_id: str, task_id: str) -> Any:
    """A task instance's return value from Airflow's metadata DB (``{}`` if it pushed none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        found = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).all()
        return XComModel.deserialize_value(found[0]) if found else {}


def files_by_day(table: Any) -> dict[Any, set[str]]:
    """Every live data and delete file of a table partitioned by a day, by that day."""
    import datetime as _dt

    out: dict[Any, set[str]] = {}
    for task in table.scan().plan_files():
        for file in (task.file, *task.delete_files):
            day = _dt.date(1970, 1, 1) + _dt.timedelta(days=file.partition[0])
            out.setdefault(day, set()).add(file.file_path)
    return out
