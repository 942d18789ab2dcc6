"""A view ticked through ``dag.test()`` with its tables on S3 (SeaweedFS, 127.0.0.1).

The Spark job runs through ``spark-submit`` with Hadoop's S3A jars and the
settings translated from the catalog connection (endpoint, path style, no
TLS on an ``http://`` endpoint; the keys never on its command line). The
input is a plain merge-on-read Iceberg table changed by appends and a
position-delete file; the oracle is a Python model of the rows the test
wrote. Staging and manifests are on the bucket too (the job, on this worker, answers
through the operator's temporary folder: docs/deployment.md, "Deploy modes").

The catalog is SQL (SQLite) with an ``s3://`` warehouse in a plain bucket;
the same view on the REST catalog and its table bucket, through
``spark-submit`` and the warm engine, is in ``tests/test_objectstore_rest.py``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.storage import files_under, io_properties
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import rows_of, run_at_sealed_time
from tests.objectstore import ObjectStore
from tests.test_changes import commit_deletes, position_delete

pytestmark = [pytest.mark.objectstore, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("amount", pa.int64())])
ROOT = Path(__file__).resolve().parent.parent


def _connection(config: CatalogConfig) -> str:
    """The Iceberg connection: catalog URL, warehouse, and the FileIO properties as extras."""
    extra = {"uri": config.uri, "warehouse": config.warehouse, "catalog_name": config.name}
    return json.dumps({"conn_type": "iceberg_catalog", "extra": {**extra, **config.properties}})


def _model(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    groups: dict[str, list[int]] = {}
    for row in rows:
        groups.setdefault(row["kind"], []).append(row["amount"])
    return Counter((kind, len(a), sum(a)) for kind, a in groups.items())


@pytest.fixture
def s3_lake(
    airflow_db: None, object_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> CatalogConfig:
    """A SQLite catalog whose warehouse is on the bucket, as Airflow's default connection."""
    config = object_store.sql_config(tmp_path, f"lake-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", _connection(config))
    monkeypatch.delenv("CT_READ_ONLY", raising=False)
    return config


def test_a_view_ticks_on_s3_over_a_merge_on_read_input(s3_lake: CatalogConfig) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "dags"))
    import objectstore_view

    dag, ns = objectstore_view.objectstore_view, "s3lake"
    catalog = s3_lake.load()
    catalog.create_namespace(ns)
    events = catalog.create_table(
        f"{ns}.events",
        EVENTS,
        properties={"format-version": "2", "write.delete.mode": "merge-on-read"},
    )
    assert events.location().startswith("s3://")
    rows = [
        {"id": 1, "kind": "a", "amount": 10},
        {"id": 2, "kind": "b", "amount": 5},
        {"id": 3, "kind": "a", "amount": 7},
    ]
    events.append(pa.Table.from_pylist(rows, schema=EVENTS))
    events.refresh()
    run_at_sealed_time(dag, events.metadata.current_snapshot().timestamp_ms)
    totals = catalog.load_table(f"{ns}.totals")
    assert rows_of(totals) == _model(rows)

    # Merge-on-read: a position delete of row id=2 and new rows, in one snapshot.
    (data_file,) = [task.file for task in events.scan().plan_files()]
    deleted = position_delete(events, [(data_file.file_path, 1)], data_file)
    added = [{"id": 4, "kind": "c", "amount": 1}, {"id": 5, "kind": "a", "amount": 2}]
    commit_deletes(events, [deleted], pa.Table.from_pylist(added, schema=EVENTS))
    rows = [r for r in rows if r["id"] != 2] + added
    run_at_sealed_time(dag, events.metadata.current_snapshot().timestamp_ms)
    totals = catalog.load_table(f"{ns}.totals")
    assert rows_of(totals) == _model(rows)
    assert len(Timeline.of(totals).data_times()) == 2
    # Everything the ticks staged is the table's now: no manifest, no stray file left.
    io = io_properties(totals)
    live = {task.file.file_path for task in totals.scan().plan_files()}
    live |= {d.file_path for task in totals.scan().plan_files() for d in task.delete_files}
    staged = {f"s3://{i.path}" for i in files_under(f"{totals.location()}/data", io)}
    assert live <= staged
    assert not files_under(f"{totals.location()}/ct-staging", io)
