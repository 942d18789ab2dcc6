"""Both collection kinds on the REST catalog with S3 storage (SeaweedFS, 127.0.0.1); no JVM.

The collections live in the REST catalog's table bucket; manifests and a
differential collection's pending desired states (read-only mode) under
``ct.staging-root`` in the plain bucket. Blind writes with retractions,
desired states and updates, ticks, read-only mode, then maintenance
(compaction, snapshot expiry, the sweep): every result against a Python
model of what the test wrote, the history at each written time included.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from airflow_provider_ct.collections import (
    AppendOnlyCollection,
    CollectionKind,
    DifferentialCollection,
    MaintenanceSettings,
    maintain,
    register_collection,
    tick_collections,
)
from airflow_provider_ct.collections.differential import list_pending
from airflow_provider_ct.core.staging import list_manifests, referenced_files
from airflow_provider_ct.core.storage import files_under, io_properties
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.timeline import Timeline
from tests.conftest import SCHEMA
from tests.helpers import rows_of
from tests.objectstore import STAGING_ROOT, ObjectStore

pytestmark = pytest.mark.objectstore

#: Maintenance that compacts even two small files and expires everything it may.
SQUEEZE = MaintenanceSettings(retention_ms=0, small_file_bytes=1 << 20, min_files=2)


def _catalog(store: ObjectStore) -> tuple[Any, str]:
    catalog = store.rest_config().load()
    ns = f"col_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    return catalog, ns


def _files(table: Any) -> set[str]:
    """Every object under the table's ``data/`` folder (its bucket is the table bucket)."""
    return {f"s3://{i.path}" for i in files_under(f"{table.location()}/data", io_properties(table))}


def _live(table: Any) -> set[str]:
    """The data and delete files some kept snapshot references."""
    return referenced_files(table)


def test_an_append_only_collection_on_rest_and_s3(object_store: ObjectStore) -> None:
    catalog, ns = _catalog(object_store)
    name = f"{ns}.log"
    register_collection(catalog, name, SCHEMA, CollectionKind.APPEND_ONLY)
    model: Counter[tuple[Any, ...]] = Counter()
    history: dict[int, Counter[tuple[Any, ...]]] = {}
    writes: list[tuple[list[tuple[int, str | None]], list[int]]] = [
        ([(1, "a"), (2, "b"), (2, "b")], [1, 1, 1]),
        ([(2, "b"), (3, None)], [-1, 1]),
        ([(4, "d")], [1]),
        ([(1, "a")], [-1]),
    ]
    with AppendOnlyCollection.open(catalog, name, batch_interval_ms=0) as writer:
        for rows, diffs in writes:
            receipt = writer.blind_write(rows, diffs=diffs)
            for row, diff in zip(rows, diffs, strict=True):
                model[row] += diff
            assert receipt.time is not None
            history[receipt.time] = +model
    assert set(tick_collections(catalog, namespaces=[ns]).statuses().values()) == {"advanced"}
    table = catalog.load_table(name)
    assert rows_of(table) == +model
    timeline = Timeline.of(table)
    for time, expected in history.items():
        assert rows_of(table, timeline.snapshot_at(time)) == expected
    report = maintain(catalog, [name], SQUEEZE)
    assert not report.errors, report.errors
    assert report.expiry[0].files_deleted > 0  # deleted from the table bucket
    table = catalog.load_table(name)
    assert rows_of(table) == +model
    # What maintenance leaves unreferenced (a file only expired snapshots used
    # can stay; the same on local folders) is the sweep's once the grace passed.
    sweep_staged(table, grace_ms=0)
    assert _files(table) == _live(table)
    io = io_properties(table)
    assert not list(list_manifests(table.location(), table.metadata.properties, io))


def test_a_differential_collection_on_rest_and_s3(
    object_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Desired states and updates, a read-only spell (pending state in the plain bucket), upkeep."""
    catalog, ns = _catalog(object_store)
    name = f"{ns}.state"
    register_collection(catalog, name, SCHEMA, "differential")
    writer = DifferentialCollection.open(catalog, name)
    model = Counter({(1, "a"): 1, (2, "b"): 2})
    first = writer.replace(list(model.elements()))
    assert first.landed and (first.inserted, first.retracted) == (3, 0)
    assert writer.replace([(2, "b"), (1, "a"), (2, "b")]).status == "in-sync"
    assert writer.update(retract=[(2, "b")], insert=[(3, "c")]).landed
    model += Counter({(3, "c"): 1})
    model -= Counter({(2, "b"): 1})
    table = catalog.load_table(name)
    assert rows_of(table) == model
    assert rows_of(table, Timeline.of(table).snapshot_at(first.time)) == Counter(
        {(1, "a"): 1, (2, "b"): 2}
    )

    monkeypatch.setenv("CT_READ_ONLY", "true")
    stated = DifferentialCollection.open(catalog, name)
    assert stated.replace([(5, "e"), (1, "a")]).status == "pending"
    (pending,) = list_pending(catalog.load_table(name))
    assert pending.path.startswith(STAGING_ROOT + "/")  # the table bucket refuses it
    assert rows_of(catalog.load_table(name)) == model  # nothing landed
    monkeypatch.delenv("CT_READ_ONLY")
    report = tick_collections(catalog, namespaces=[ns])
    assert report.outcomes[0].synced == "landed"
    model = Counter({(5, "e"): 1, (1, "a"): 1})
    table = catalog.load_table(name)
    assert rows_of(table) == model and list_pending(table) == []

    upkeep = maintain(catalog, [name], SQUEEZE)
    assert not upkeep.errors, upkeep.errors
    table = catalog.load_table(name)
    assert rows_of(table) == model
    sweep_staged(table, grace_ms=0)
    assert _files(table) == _live(table)
