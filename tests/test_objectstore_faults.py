"""Faults on S3 with the REST catalog: a writer killed mid-write, the store gone during a commit.

* ``kill -9`` of a process staging an attempt (its first files uploaded to
  the table bucket, its manifest still ``writing``): the retry, a new
  attempt, lands exactly once; the sweep removes the dead attempt's files
  and manifest.
* The S3 server and REST catalog (one ``weed mini``) stopped while a commit
  is on its way: a clear :class:`CommitStateUnknownError`, the staged files
  kept; after a restart on the same ports and data the retry of the same
  manifest lands once.

No JVM: the writer is the product's staging code (what the Spark jobs and
the collections run), driven from a child Python process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.faults import ENV as FAILPOINTS
from airflow_provider_ct.core.manifest import StagedTime
from airflow_provider_ct.core.staging import begin_batch, finish_batch, list_manifests
from airflow_provider_ct.core.storage import files_under, io_properties
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import CommitStateUnknownError
from tests.conftest import SCHEMA
from tests.helpers import advance, mint_view_tick, replace_contents, rows_of
from tests.objectstore import ObjectStore, running_object_store

pytestmark = [pytest.mark.objectstore, pytest.mark.faults]

EVENTS = pa.schema([("id", pa.int64()), ("kind", pa.string())])
T1 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parent.parent

#: The child: stage an attempt of the description on stdin, one file at a time.
_WRITER = """
import json, sys
import pyarrow as pa
from airflow_provider_ct.core.batch_files import BatchFiles
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.faults import failpoint
from airflow_provider_ct.core.manifest import StagedTime
from airflow_provider_ct.core.staging import begin_batch, finish_batch
from airflow_provider_ct.core.storage import io_properties
from tests.conftest import SCHEMA
job = json.load(sys.stdin)
table = CatalogConfig(**job["catalog"]).load().load_table(job["target"])
desc = BatchDescription.from_json(job["description"])
batch, manifest = begin_batch(table, desc)
files = BatchFiles(table, batch.data_dir)
data = pa.Table.from_pylist([{"k": k, "v": v} for k, v in job["rows"]], schema=SCHEMA)
parts = files.write_rows(data)
print("manifest", manifest, flush=True)
failpoint("staging.before-finish")
finish_batch(batch, manifest, [StagedTime(desc.time, tuple(p.file for p in parts))],
             io=io_properties(table))
"""


def _view(store: ObjectStore) -> tuple[Any, Any, Any]:
    """A minted tick of a view on the REST catalog: (catalog, target, description)."""
    catalog = store.rest_config().load()
    ns = f"fault_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    events = create_managed_table(catalog, f"{ns}.events", EVENTS)
    replace_contents(events, T1, pa.table({"id": [1, 2], "kind": ["a", "b"]}, schema=EVENTS))
    advance(events, T1)
    target = create_managed_table(catalog, f"{ns}.view", SCHEMA)
    sql = f"SELECT id AS k, kind AS v FROM {ns}.events"
    return catalog, target, mint_view_tick(catalog, f"{ns}.view", sql, T1).description


def _stage(table: Any, description: Any, rows: list[tuple[int, str]]) -> str:
    batch, manifest = begin_batch(table, description)
    data = pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema=SCHEMA)
    parts = BatchFiles(table, batch.data_dir).write_rows(data)
    finish_batch(batch, manifest, [StagedTime(description.time, tuple(p.file for p in parts))],
                 io=io_properties(table))  # fmt: skip
    return manifest


def _objects(table: Any) -> set[str]:
    return {f"s3://{i.path}" for i in files_under(f"{table.location()}/data", io_properties(table))}


def _live(table: Any) -> set[str]:
    return {task.file.file_path for task in table.scan().plan_files()}


def test_a_writer_killed_mid_write_on_s3_then_the_retry_lands_once(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    _, target, description = _view(object_store)
    rows = [(1, "a"), (2, "b")]
    marker = tmp_path / "paused"
    job = {
        "catalog": dataclasses.asdict(object_store.rest_config()),
        "target": ".".join(target.name()),
        "description": description.to_json(),
        "rows": rows,
    }
    env = {**os.environ, FAILPOINTS: f"staging.before-finish=sleep:120@{marker}"}
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps(job).encode())
    child.stdin.close()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the writer did not pause"
        time.sleep(0.05)
    dead_manifest = child.stdout.readline().decode().split()[1]
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    assert child.returncode == -signal.SIGKILL
    target.refresh()
    dead_files = _objects(target)
    assert dead_files  # its upload reached the table bucket, nothing is on the table
    assert rows_of(target) == Counter()

    outcome = land_staged(target, _stage(target, description, rows))  # the retry
    assert outcome.result.landed and not outcome.result.already_landed
    report = sweep_staged(target, grace_ms=0)
    assert report.discarded == (description.id,)
    target.refresh()
    assert rows_of(target) == Counter(rows)
    assert _objects(target) == _live(target) and not dead_files & _live(target)
    io = io_properties(target)
    assert dead_manifest not in set(list_manifests(target.location(), {}, io))
    assert not list(list_manifests(target.location(), target.metadata.properties, io))


@pytest.mark.slow
def test_the_store_stopped_during_a_commit_then_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of its own (the session's is shared): stopped mid-commit, restarted, retried."""
    with running_object_store(tmp_path / "store") as store:
        _, target, description = _view(store)
        rows = [(1, "a"), (2, "b")]
        manifest = _stage(target, description, rows)
        staged = _objects(target)
        marker = tmp_path / "committing"
        monkeypatch.setenv(FAILPOINTS, f"commit.before-catalog-commit=sleep:4@{marker}")
        failure: list[BaseException] = []

        def land() -> None:
            try:
                land_staged(target, manifest)
            except BaseException as exc:  # the thread's outcome, checked below
                failure.append(exc)

        thread = threading.Thread(target=land)
        thread.start()
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the commit never started"
            time.sleep(0.02)
        store.stop()
        thread.join(120)
        assert not thread.is_alive()
        assert [type(e) for e in failure] == [CommitStateUnknownError], failure
        assert "unknown outcome" in str(failure[0]) and "retry" in str(failure[0])

        monkeypatch.delenv(FAILPOINTS)
        store.start()
        table = store.rest_config().load().load_table(".".join(target.name()))
        assert _objects(table) == staged  # nothing was deleted while the outcome was open
        again = land_staged(table, manifest)
        assert again.result.landed
        table.refresh()
        assert rows_of(table) == Counter(rows)
        # The manifest is gone once landed.
        assert not list(list_manifests(table.location(), {}, io_properties(table)))
