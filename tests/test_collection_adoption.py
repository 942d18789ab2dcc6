"""Collections over tables the user created first are adopted, their rows kept exact.

The user creates a table with PyIceberg (or Spark SQL), partitioned, with
properties of their own and maybe rows, then registers it as a collection.
Before adoption existed ``register_collection`` refused every such table
(after writing a name mapping into it), and a tick of one marked by hand
either failed or, when it was empty, reported it "contended": a green tick
that wrote nothing.

The oracle is always what the test itself wrote (its own Arrow rows, read
back from the table and from the data files with PyArrow), never what the
product recorded about it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    CollectionKeys,
    DifferentialCollection,
    register,
    register_collection,
    tick_collections,
)
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.keys import SummaryKeys, TableKeys
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import (
    NotACollectionError,
    OwnershipError,
    ReadOnlyError,
    SchemaMismatchError,
)
from tests.conftest import SCHEMA
from tests.helpers import live_data_files, local_path, rows_of, task_xcom

ROOT = Path(__file__).resolve().parent.parent

#: The user's table: an audit log partitioned by day and service.
AUDIT = Schema(
    NestedField(1, "service", StringType(), required=False),
    NestedField(2, "event", StringType(), required=False),
    NestedField(3, "at", TimestamptzType(), required=False),
)
AUDIT_SPEC = PartitionSpec(
    PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="at_day"),
    PartitionField(source_id=1, field_id=1001, transform=IdentityTransform(), name="service"),
)
#: The same columns as the collection declares them (Arrow, as users pass them).
AUDIT_ARROW = pa.schema(
    [("service", pa.string()), ("event", pa.string()), ("at", pa.timestamp("us", tz="UTC"))]
)
USER_PROPERTIES = {"write.parquet.compression-codec": "zstd", "team.owner": "ops"}


def _at(day: int, hour: int) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=UTC)


#: Rows the user wrote before registering, in two commits (two snapshots).
USER_ROWS = [
    [("api", "start", _at(1, 9)), ("api", "stop", _at(1, 17)), ("billing", "start", _at(1, 9))],
    [("api", "start", _at(2, 9)), ("search", "start", _at(2, 10)), ("api", "start", _at(2, 9))],
]


def _arrow(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(AUDIT_ARROW.names, r, strict=True)) for r in rows])


def _create_audit(catalog: Any, name: str, batches: list[list[tuple[Any, ...]]]) -> Any:
    """The user's own table, made with plain PyIceberg (no airflow-provider-ct involved)."""
    namespace = name.split(".")[0]
    if not catalog.namespace_exists(namespace):
        catalog.create_namespace(namespace)
    table = catalog.create_table(
        name, schema=AUDIT, partition_spec=AUDIT_SPEC, properties=USER_PROPERTIES
    )
    for batch in batches:
        table.append(_arrow(batch).cast(AUDIT.as_arrow()))
    return catalog.load_table(name)


def _files_rows(table: Any) -> Counter[tuple[Any, ...]]:
    """The rows of the head's data files, each file read with PyArrow (no Iceberg reader)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for path in live_data_files(table):
        data = pq.read_table(local_path(path)).select(AUDIT_ARROW.names)
        out.update(zip(*(c.to_pylist() for c in data.columns), strict=True))
    return out


def _one_partition_per_file(table: Any) -> None:
    """Every data file holds exactly one (day, service) partition, as Iceberg records it."""
    for task in table.scan().plan_files():
        data = pq.read_table(local_path(task.file.file_path), columns=["service", "at"])
        keys = {(a.date(), s) for s, a in zip(*(c.to_pylist() for c in data.columns), strict=True)}
        assert len(keys) == 1, (task.file.file_path, keys)


def _state(table: Any) -> tuple[Any, ...]:
    """What "nothing was written" compares: snapshots, head, properties, metadata file."""
    table.refresh()
    meta = table.metadata
    snapshots = tuple(s.snapshot_id for s in meta.snapshots)
    return snapshots, meta.current_snapshot_id, dict(meta.properties), table.metadata_location


def _everything(batches: list[list[tuple[Any, ...]]]) -> Counter[tuple[Any, ...]]:
    return Counter(row for batch in batches for row in batch)


# -- PyIceberg-made tables -------------------------------------------------------------------
def test_empty_partitioned_table_is_adopted_and_written_like_ours(
    catalog_config: CatalogConfig,
) -> None:
    catalog = catalog_config.load()
    _create_audit(catalog, "ua.audit", [])
    adopted_at = now_ms()
    done = register(catalog, "ua.audit", AUDIT_ARROW, "append-only", now=adopted_at)
    assert done.status == "adopted" and done.adoption is not None
    assert done.adoption.adopted_snapshot_id is None and done.adoption.rows == 0
    table = catalog.load_table("ua.audit")
    assert table.spec() == AUDIT_SPEC  # the user's partitioning, properties and schema kept
    assert USER_PROPERTIES.items() <= table.metadata.properties.items()
    assert table.metadata.properties[CollectionKeys.KIND] == "append-only"
    timeline = Timeline.of(table)
    assert timeline.managed and timeline.upper == Frontier.sealing(adopted_at)
    assert timeline.snapshot_at(adopted_at) == timeline.head_snapshot_id
    assert live_data_files(table) == []

    written = [
        ("api", "start", _at(5, 8)),
        ("search", "stop", _at(6, 9)),
        ("api", "stop", _at(5, 9)),
    ]
    with AppendOnlyCollection.open(catalog, "ua.audit", batch_interval_ms=0) as log:
        receipt = log.blind_write([list(r) for r in written])
    assert receipt.time is not None and receipt.time >= adopted_at + 1  # after the adoption
    table.refresh()
    assert rows_of(table) == Counter(written) == _files_rows(table)
    _one_partition_per_file(table)
    report = tick_collections(catalog, namespaces=["ua"], now=receipt.time + 60_000)
    assert report.statuses() == {"ua.audit": "advanced"}
    assert Timeline.of(catalog.load_table("ua.audit")).upper == Frontier.at(receipt.time + 60_000)


def test_rows_of_a_filled_table_are_kept_as_the_append_only_contents(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    user = _create_audit(catalog, "ub.audit", USER_ROWS)
    user_head = user.metadata.current_snapshot_id
    user_files = sorted(live_data_files(user))
    assert _files_rows(user) == _everything(USER_ROWS)

    adopted_at = now_ms()
    done = register(catalog, "ub.audit", AUDIT_ARROW, "append-only", now=adopted_at)
    assert done.adoption is not None and done.adoption.adopted_snapshot_id == user_head
    assert done.adoption.rows == 6
    table = catalog.load_table("ub.audit")
    # No file rewritten: the adoption is a frontier commit on the user's head.
    assert sorted(live_data_files(table)) == user_files
    timeline = Timeline.of(table)
    at_adoption = timeline.snapshot_at(adopted_at)
    assert at_adoption == done.adoption.snapshot_id
    assert rows_of(table, at_adoption) == _everything(USER_ROWS)
    assert timeline.snapshot_at(adopted_at - 1) is None  # the collection's history starts there
    summary = timeline.entry(at_adoption).summary  # type: ignore[union-attr]
    assert summary[SummaryKeys.TIME] == str(adopted_at)
    assert summary[CollectionKeys.ADOPTED] == str(user_head)

    # Later writes are blind writes on top of the adopted rows, retractions included.
    model = _everything(USER_ROWS)
    new = ("billing", "stop", _at(2, 18))
    with AppendOnlyCollection.open(catalog, "ub.audit", batch_interval_ms=0) as log:
        receipt = log.blind_write([list(USER_ROWS[1][1]), list(new)], diffs=[-1, 1])
    model[USER_ROWS[1][1]] -= 1
    model[new] += 1
    table.refresh()
    assert rows_of(table) == +model == _files_rows(table)
    assert rows_of(table, at_adoption) == _everything(USER_ROWS)  # the adoption time stays
    assert receipt.time is not None and receipt.time > adopted_at
    _one_partition_per_file(table)


def test_rows_of_a_filled_table_are_the_differential_state(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    _create_audit(catalog, "uc.status", USER_ROWS[:1])
    adopted_at = now_ms()
    assert register(catalog, "uc.status", None, "differential", now=adopted_at).status == "adopted"

    # A fresh writer's update applies to the adopted rows (they are the desired state) ...
    status = DifferentialCollection.open(catalog, "uc.status")
    first, second, third = USER_ROWS[0]
    replaced = ("api", "crashed", _at(1, 18))
    result = status.update(retract=[list(second)], insert=[list(replaced)])
    assert (result.status, result.inserted, result.retracted) == ("landed", 1, 1)
    table = catalog.load_table("uc.status")
    assert rows_of(table) == Counter([first, third, replaced]) == _files_rows(table)
    # ... and a full replacement corrects them away like any foreign row.
    desired = [("search", "start", _at(3, 7))]
    assert status.replace([list(r) for r in desired]).status == "landed"
    table.refresh()
    assert rows_of(table) == Counter(desired) == _files_rows(table)
    entries = Timeline.of(table).entries
    assert next(e.time for e in entries if e.time is not None) == adopted_at


def test_a_schema_that_does_not_fit_is_refused_naming_the_columns(
    catalog_config: CatalogConfig,
) -> None:
    catalog = catalog_config.load()
    table = _create_audit(catalog, "ud.audit", USER_ROWS[:1])
    before = _state(table)
    wrong = pa.schema([("service", pa.string()), ("event", pa.int64()), ("when", pa.string())])
    with pytest.raises(SchemaMismatchError) as refused:
        register_collection(catalog, "ud.audit", wrong, "append-only")
    message = str(refused.value)
    assert "column event is string in the table, long in the declaration" in message
    assert "column when (string) is declared but not in the table" in message
    assert "column at (timestamptz) is in the table but not declared" in message
    assert "Nothing was written" in message
    reordered = pa.schema([AUDIT_ARROW.field(i) for i in (1, 0, 2)])
    with pytest.raises(SchemaMismatchError, match=r"another order.*\['service', 'event', 'at'\]"):
        register_collection(catalog, "ud.audit", reordered, "append-only")
    assert _state(table) == before  # not even a name mapping or a property
    assert not Timeline.of(catalog.load_table("ud.audit")).managed
    assert rows_of(catalog.load_table("ud.audit")) == _everything(USER_ROWS[:1])


def test_tables_of_others_and_read_only_mode_are_refused_unwritten(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    owned = _create_audit(catalog, "ue.daily", USER_ROWS[:1])
    owned.transaction().set_properties(
        {TableKeys.OWNER_DAG: "revenue", TableKeys.OWNER_GROUP: "view_daily"}
    ).commit_transaction()
    before = _state(owned)
    with pytest.raises(OwnershipError, match="maintained by DAG 'revenue', group 'view_daily'"):
        register_collection(catalog, "ue.daily", AUDIT_ARROW, "differential")
    assert _state(owned) == before

    plain = _create_audit(catalog, "ue.audit", USER_ROWS[:1])
    before = _state(plain)
    with pytest.raises(ReadOnlyError, match="read-only. Nothing was written"):
        register(catalog, "ue.audit", AUDIT_ARROW, "append-only", deployment_read_only=True)
    assert _state(plain) == before

    register_collection(catalog, "ue.audit", AUDIT_ARROW, "append-only")
    with pytest.raises(NotACollectionError, match="already a append-only collection"):
        register_collection(catalog, "ue.audit", AUDIT_ARROW, "differential")


def test_a_table_that_is_ours_is_not_adopted_again(sqlite_catalog_config: CatalogConfig) -> None:
    catalog = sqlite_catalog_config.load()
    _create_audit(catalog, "uf.audit", USER_ROWS[:1])
    assert register(catalog, "uf.audit", AUDIT_ARROW, "append-only").status == "adopted"
    before = _state(catalog.load_table("uf.audit"))
    again = register(catalog, "uf.audit", AUDIT_ARROW, "append-only")
    assert (again.status, again.adoption) == ("existing", None)
    assert _state(catalog.load_table("uf.audit")) == before

    managed = create_managed_table(catalog, "uf.managed", SCHEMA)
    assert register(catalog, "uf.managed", SCHEMA, "append-only").status == "registered"
    managed.refresh()
    assert managed.metadata.snapshots == []  # a property, not an adoption commit
    assert register(catalog, "uf.new", SCHEMA, "differential").status == "created"


def test_a_tick_adopts_a_table_marked_by_hand(sqlite_catalog_config: CatalogConfig) -> None:
    """Before: the filled table's tick failed, the empty one's was a green "contended"."""
    catalog = sqlite_catalog_config.load()
    filled = _create_audit(catalog, "ug.filled", USER_ROWS)
    empty = _create_audit(catalog, "ug.empty", [])
    for table in (filled, empty):  # what ALTER TABLE ... SET TBLPROPERTIES does
        table.transaction().set_properties(
            {CollectionKeys.KIND: "append-only"}
        ).commit_transaction()
    with pytest.raises(NotACollectionError, match="no frontier of ours"):
        AppendOnlyCollection.open(catalog, "ug.filled")

    tick_at = now_ms()
    report = tick_collections(catalog, namespaces=["ug"], now=tick_at)
    assert report.statuses() == {"ug.empty": "advanced", "ug.filled": "advanced"}
    assert all("adopted" in o.detail for o in report.outcomes)
    for name, rows in (("ug.filled", _everything(USER_ROWS)), ("ug.empty", Counter())):
        table = catalog.load_table(name)
        timeline = Timeline.of(table)
        assert timeline.upper == Frontier.at(tick_at)  # where every ticked collection is
        assert rows_of(table, timeline.snapshot_at(tick_at - 1)) == rows
    with AppendOnlyCollection.open(catalog, "ug.filled", batch_interval_ms=0) as log:
        log.blind_write([["api", "deploy", _at(9, 9)]])
    later = tick_collections(catalog, namespaces=["ug"], now=now_ms() + 60_000)
    assert set(later.statuses().values()) == {"advanced"}
    assert rows_of(catalog.load_table("ug.filled")) == _everything(
        [*USER_ROWS, [("api", "deploy", _at(9, 9))]]
    )


def test_an_adoption_whose_response_was_lost_lands_once(
    sqlite_catalog_config: CatalogConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = sqlite_catalog_config.load()
    _create_audit(catalog, "uh.audit", USER_ROWS[:1])
    marker = tmp_path / "lost-once"
    monkeypatch.setenv("CT_FAILPOINTS", f"commit.after-catalog-commit=raise@{marker}")
    done = register(catalog, "uh.audit", AUDIT_ARROW, "append-only")
    assert marker.exists() and done.status == "adopted" and done.adoption is not None
    assert done.adoption.attempts == 2  # the second attempt found the first on main
    entries = Timeline.of(catalog.load_table("uh.audit")).entries
    assert [e.batch_id for e in entries if e.batch_id] == [done.adoption.batch_id]


def test_a_writer_that_commits_during_the_adoption_has_its_rows_adopted_too(
    sqlite_catalog_config: CatalogConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The adoption's commit asserts the head it read; the user's append wins, we adopt again."""
    catalog = sqlite_catalog_config.load()
    user = _create_audit(catalog, "ui.audit", USER_ROWS[:1])
    marker = tmp_path / "paused"
    monkeypatch.setenv("CT_FAILPOINTS", f"commit.before-catalog-commit=sleep:3@{marker}")
    outcome: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: outcome.update(done=register(catalog, "ui.audit", None, "append-only"))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the adoption never reached its commit"
    user.append(_arrow(USER_ROWS[1]).cast(AUDIT.as_arrow()))  # the user's job, meanwhile
    thread.join(60)
    done = outcome["done"]
    assert done.adoption is not None and done.adoption.attempts == 2
    table = catalog.load_table("ui.audit")
    timeline = Timeline.of(table)
    assert rows_of(table, timeline.snapshot_at(done.adoption.time)) == _everything(USER_ROWS)


# -- through Airflow ---------------------------------------------------------------------------
def _dag_module() -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import collection_adoption

    return collection_adoption


BY_SERVICE = PartitionSpec(
    PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="service")
)


def _create_dag_tables(catalog: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The DAG's two tables as the user makes them (partitioned by service, filled)."""
    catalog.create_namespace("adopt")
    tables = {
        "adopt.audit": (
            Schema(
                NestedField(1, "service", StringType(), required=False),
                NestedField(2, "event", StringType(), required=False),
                NestedField(3, "seq", LongType(), required=False),
            ),
            [("api", "start", 1), ("billing", "start", 2), ("api", "start", 1)],
        ),
        "adopt.status": (
            Schema(
                NestedField(1, "service", StringType(), required=False),
                NestedField(2, "state", StringType(), required=False),
            ),
            [("api", "up"), ("search", "up")],
        ),
    }
    for name, (schema, rows) in tables.items():
        names = [f.name for f in schema.fields]
        data = [dict(zip(names, r, strict=True)) for r in rows]
        table = catalog.create_table(name, schema, partition_spec=BY_SERVICE)
        table.append(pa.Table.from_pylist(data, schema.as_arrow()))
    return tables["adopt.audit"][1], tables["adopt.status"][1]


@pytest.mark.airflow
def test_the_register_operator_adopts_through_dag_test(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    module = _dag_module()
    catalog = default_catalog.load()
    audit_rows, _ = _create_dag_tables(catalog)
    started = now_ms()
    run = module.adoption_dag.test(logical_date=datetime(2026, 8, 1, tzinfo=UTC))
    assert run.state == "success", run.state
    for task_id in ("register_audit", "register_status"):
        report = task_xcom("ct_collection_adoption", run.run_id, task_id)
        assert report["status"] == "adopted" and report["adoption"]["time"] >= started
    audit, status = catalog.load_table("adopt.audit"), catalog.load_table("adopt.status")
    assert audit.spec() == BY_SERVICE and status.spec() == BY_SERVICE
    blind = [tuple(r) for r in module.BLIND_ROWS]
    assert rows_of(audit) == Counter(audit_rows) + Counter(blind)
    assert rows_of(status) == Counter([("api", "degraded"), ("search", "up")])
    update = task_xcom("ct_collection_adoption", run.run_id, "update")
    assert (update["status"], update["inserted"], update["retracted"]) == ("landed", 1, 1)
    adopted_at = task_xcom("ct_collection_adoption", run.run_id, "register_audit")["adoption"][
        "time"
    ]
    assert rows_of(audit, Timeline.of(audit).snapshot_at(adopted_at)) == Counter(audit_rows)
    assert int(Timeline.of(audit).upper.time) >= started  # type: ignore[arg-type]

    again = module.adoption_dag.test(logical_date=datetime(2026, 8, 2, tzinfo=UTC))
    assert again.state == "success", again.state
    for task_id in ("register_audit", "register_status"):
        assert task_xcom("ct_collection_adoption", again.run_id, task_id)["status"] == "existing"
    assert task_xcom("ct_collection_adoption", again.run_id, "update")["status"] == "in-sync"
    adoptions = [
        e
        for e in Timeline.of(catalog.load_table("adopt.audit")).entries
        if e.summary.get(CollectionKeys.ADOPTED)
    ]
    assert len(adoptions) == 1


def test_the_operator_declares_zoned_timestamps_as_spark_makes_them(
    default_catalog: CatalogConfig,
) -> None:
    """Spark's ``TIMESTAMP`` is Iceberg's ``timestamptz``; its Arrow alias used to be refused."""
    from airflow_provider_ct.operators.collections import RegisterCollectionOperator

    catalog = default_catalog.load()
    _create_audit(catalog, "uj.audit", USER_ROWS[:1])
    columns = {"service": "string", "event": "string", "at": "timestamp[us, tz=UTC]"}
    report = RegisterCollectionOperator(
        task_id="r", collection="uj.audit", columns=columns, kind="append-only"
    ).execute({})
    assert report["status"] == "adopted" and report["adoption"]["rows"] == 3
    naive = {**columns, "at": "timestamp[us]"}
    with pytest.raises(SchemaMismatchError, match="column at is timestamptz in the table"):
        RegisterCollectionOperator(
            task_id="r2", collection="uj.audit", columns=naive, kind="append-only"
        ).execute({})


@pytest.mark.airflow
def test_the_register_operator_refuses_a_table_that_does_not_fit(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    module = _dag_module()
    catalog = default_catalog.load()
    table = _create_audit(catalog, "adopt.mismatch", USER_ROWS[:1])
    before = _state(table)
    run = module.mismatch_dag.test(logical_date=datetime(2026, 8, 3, tzinfo=UTC))
    assert run.state == "failed", run.state
    assert _state(catalog.load_table("adopt.mismatch")) == before


# -- a table made with Spark SQL -------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
def test_a_table_made_with_spark_sql_is_adopted(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """Partitioned by ``days(at), service``, merge-on-read, with a row deleted by Spark.

    Spark writes position deletes for the DELETE; the adopted contents are
    the rows left, and Spark reads back what the collection then holds.
    """
    spark.sql("CREATE NAMESPACE IF NOT EXISTS ct.sadopt")
    spark.sql("DROP TABLE IF EXISTS ct.sadopt.audit PURGE")
    spark.sql(
        "CREATE TABLE ct.sadopt.audit (service STRING, event STRING, at TIMESTAMP) USING iceberg "
        "PARTITIONED BY (days(at), service) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'team.owner'='ops')"
    )
    values = ", ".join(
        f"('{s}', '{e}', TIMESTAMP '{a:%Y-%m-%d %H:%M:%S}')"
        for batch in USER_ROWS
        for s, e, a in batch
    )
    spark.sql(f"INSERT INTO ct.sadopt.audit VALUES {values}")
    spark.sql("DELETE FROM ct.sadopt.audit WHERE event = 'stop'")
    kept = Counter(r for r in _everything(USER_ROWS).elements() if r[1] != "stop")

    catalog = spark_catalog_config.load()
    before = catalog.load_table("sadopt.audit")
    assert before.metadata.current_snapshot().summary["total-position-deletes"] == "1"
    done = register(catalog, "sadopt.audit", AUDIT_ARROW, "append-only")
    assert done.status == "adopted" and done.adoption is not None
    table = catalog.load_table("sadopt.audit")
    assert [f.transform for f in table.spec().fields] == [DayTransform(), IdentityTransform()]
    assert table.metadata.properties["team.owner"] == "ops"
    assert rows_of(table, Timeline.of(table).snapshot_at(done.adoption.time)) == kept

    new = ("search", "stop", _at(3, 12))
    with AppendOnlyCollection.open(catalog, "sadopt.audit", batch_interval_ms=0) as log:
        log.blind_write([list(USER_ROWS[0][0]), list(new)], diffs=[-1, 1])
    model = kept - Counter([USER_ROWS[0][0]]) + Counter([new])

    def spark_rows(snapshot: int | None = None) -> Counter[tuple[Any, ...]]:
        reader = spark.read if snapshot is None else spark.read.option("snapshot-id", snapshot)
        # Microseconds, not Python datetimes (those come back in the local time zone).
        frame = reader.table("ct.sadopt.audit").selectExpr("service", "event", "unix_micros(at)")
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        return Counter((s, e, epoch + timedelta(microseconds=us)) for s, e, us in frame.collect())

    assert spark_rows() == model
    assert spark_rows(done.adoption.snapshot_id) == kept
