"""Views ticked through ``dag.test()`` on the REST catalog with S3 storage (SeaweedFS, 127.0.0.1).

The tables live in the REST catalog's table bucket, the staged batches'
manifests under ``ct.staging-root`` in the server's plain bucket. The write
job runs once through ``spark-submit`` and once on the warm engine; both
reach the REST catalog (Iceberg's REST client in the runtime jar) and S3
(Hadoop S3A with the connection's endpoint and keys). The input is a plain
merge-on-read table changed by appends and a position-delete file; the
oracle is a Python model of the rows the test wrote.

While the ``spark-submit`` job runs, every process the test starts has its
command line and environment read from ``/proc``: neither holds the S3
secret key or the REST credential.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.staging import list_manifests
from airflow_provider_ct.core.storage import files_under, io_properties
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import rows_of, run_at_sealed_time
from tests.objectstore import ObjectStore
from tests.test_changes import commit_deletes, position_delete
from tests.test_continual_plain_inputs import PyIcebergInputs, StreamTableJoin, World
from tests.test_secrets import watching_processes

pytestmark = [pytest.mark.objectstore, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("amount", pa.int64())])
ROOT = Path(__file__).resolve().parent.parent


def connection_json(config: CatalogConfig) -> str:
    """The Iceberg connection: kind, URL, warehouse, and every catalog property as an extra."""
    extra = {
        "kind": config.kind,
        "uri": config.uri,
        "warehouse": config.warehouse,
        "catalog_name": config.name,
        **config.properties,
    }
    return json.dumps({"conn_type": "iceberg_catalog", "extra": extra})


def _model(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    groups: dict[str, list[int]] = {}
    for row in rows:
        groups.setdefault(row["kind"], []).append(row["amount"])
    return Counter((kind, len(a), sum(a)) for kind, a in groups.items())


@pytest.fixture
def rest_lake(
    airflow_db: None, object_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> CatalogConfig:
    """The REST catalog (table bucket, staging root in the plain bucket): the default connection."""
    config = object_store.rest_config()
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", connection_json(config))
    monkeypatch.delenv("CT_READ_ONLY", raising=False)
    return config


def _dag(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import objectstore_view

    return getattr(objectstore_view, name)


def _fresh_namespace(catalog: Any, ns: str) -> None:
    """The DAG's namespace, emptied (the REST catalog lives for the whole session)."""
    if ns in {n[0] for n in catalog.list_namespaces()}:
        for ident in catalog.list_tables(ns):
            catalog.drop_table(ident)
    else:
        catalog.create_namespace(ns)


def tick_view(config: CatalogConfig, dag: Any, ns: str, *, tick_between: bool = True) -> Any:
    """Appends, a tick, drift in the view, then a position delete with appends, a tick.

    Each tick is checked against the model (the second corrects the drift).

    ``tick_between=False``: one tick only, after every change (a merge-on-read
    input read in full), to keep the ``spark-submit`` run short.
    """
    catalog = config.load()
    _fresh_namespace(catalog, ns)
    events = catalog.create_table(
        f"{ns}.events",
        EVENTS,
        properties={"format-version": "2", "write.delete.mode": "merge-on-read"},
    )
    rows = [
        {"id": 1, "kind": "a", "amount": 10},
        {"id": 2, "kind": "b", "amount": 5},
        {"id": 3, "kind": "a", "amount": 7},
    ]
    events.append(pa.Table.from_pylist(rows, schema=EVENTS))
    events.refresh()
    if tick_between:
        run_at_sealed_time(dag, events.metadata.current_snapshot().timestamp_ms)
        totals = catalog.load_table(f"{ns}.totals")
        assert rows_of(totals) == _model(rows)
        # Drift: another engine appends a row to the view; the next tick corrects it.
        arrow = totals.schema().as_arrow()
        drift = dict(zip(arrow.names, ["zz", 1, 99], strict=True))
        totals.append(pa.Table.from_pylist([drift], schema=arrow))

    (data_file,) = [task.file for task in events.scan().plan_files()]
    deleted = position_delete(events, [(data_file.file_path, 1)], data_file)
    added = [{"id": 4, "kind": "c", "amount": 1}, {"id": 5, "kind": "a", "amount": 2}]
    commit_deletes(events, [deleted], pa.Table.from_pylist(added, schema=EVENTS))
    rows = [r for r in rows if r["id"] != 2] + added
    run_at_sealed_time(dag, events.metadata.current_snapshot().timestamp_ms)
    totals = catalog.load_table(f"{ns}.totals")
    assert rows_of(totals) == _model(rows)
    assert len(Timeline.of(totals).data_times()) == (2 if tick_between else 1)
    check_nothing_staged_left(totals)
    return totals


def check_nothing_staged_left(table: Any) -> None:
    """Every staged file is the table's; no manifest is left in the staging root."""
    io = io_properties(table)
    assert table.location().startswith("s3://lakehouse/")
    tasks = list(table.scan().plan_files())
    live = {t.file.file_path for t in tasks} | {d.file_path for t in tasks for d in t.delete_files}
    staged = {f"s3://{i.path}" for i in files_under(f"{table.location()}/data", io)}
    assert live <= staged
    assert not list(list_manifests(table.location(), table.metadata.properties, io))


def test_a_view_ticks_on_rest_and_s3_through_spark_submit_without_exposing_keys(
    rest_lake: CatalogConfig, object_store: ObjectStore
) -> None:
    dag = _dag("objectstore_view_rest")
    with watching_processes() as seen:
        tick_view(rest_lake, dag, "restlake", tick_between=False)
    store_pid = object_store.process.pid if object_store.process else -1
    commands = {pid: cmd for pid, (cmd, _) in seen.items() if pid != store_pid}
    assert any("org.apache.spark.deploy.SparkSubmit" in c for c in commands.values())
    secrets = [object_store.secret_key, rest_lake.properties["credential"]]
    inherited = {f"{k}={v}" for k, v in os.environ.items()}
    for pid, (cmdline, environ) in seen.items():
        if pid == store_pid:
            continue  # the S3 server itself is started with its keys
        added = [v for v in environ.splitlines() if v not in inherited]
        for secret in secrets:
            assert secret not in cmdline, f"a secret on the command line of {pid}: {cmdline}"
            assert not [v for v in added if secret in v], f"a secret added to {pid}'s environment"


def test_a_view_ticks_on_rest_and_s3_on_the_warm_engine(rest_lake: CatalogConfig) -> None:
    """The warm driver reaches S3 with the keys each job sets on its session."""
    tick_view(rest_lake, _dag("objectstore_view_warm"), "warmlake")


class _RestWorld(World):
    """The stream-table join's inputs, model and DAG on the REST catalog."""

    def __init__(self, catalog: Any, namespace: str) -> None:
        _fresh_namespace(catalog, namespace)
        self.inputs, self.model = PyIcebergInputs(catalog, namespace), StreamTableJoin(False)
        self.catalog, self.ns = catalog, namespace
        self.dag = _dag("objectstore_continual")
        self.ticks = []


def test_a_continual_task_ticks_on_rest_and_s3(rest_lake: CatalogConfig) -> None:
    """Materialize's stream-table join over plain inputs, on the warm engine, against its model.

    Several input times in one tick, the reference changing between them;
    the output's files are in the table bucket, its manifests gone.
    """
    world = _RestWorld(rest_lake.load(), "restct")
    world.set_reference([(1, "v0"), (2, "a")])
    world.tick()  # the as-of: nothing written
    first = world.insert([1])
    world.tick()
    assert world.rows() == Counter({(1, "v0"): 1}) == world.model.output
    times = [world.insert([2])]
    world.set_reference([(1, "v1"), (2, "b")])
    times.append(world.insert([2, 1]))
    world.tick()
    assert world.rows() == world.model.output
    assert world.rows()[(2, "a")] == 1 and world.rows()[(2, "b")] == 1
    assert [t for t, _ in Timeline.of(world.output()).data_times()] == [first, *times]
    check_nothing_staged_left(world.output())
