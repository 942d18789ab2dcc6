"""The staging layout: names table buckets accept, a staging root elsewhere, old layouts kept.

Table buckets (SeaweedFS's REST catalog, S3 Tables) accept under ``data/``
only folders named as identifiers or ``identifier=value`` and refuse JSON
beside the table; this checks the names the package stages under, that
``ct.staging-root`` (a catalog connection setting) moves the manifests to
another location, and that batches staged with the old names
(``data/ct-batch=<id>/``, manifests under ``<table>/ct-staging``) are still
landed and swept. Local folders: the same code runs on S3 in
``tests/test_objectstore.py``.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.manifest import (
    StagedBatch,
    StagedFile,
    StagedTime,
    write_manifest,
)
from airflow_provider_ct.core.staging import (
    LEGACY_BATCH_FOLDER,
    batch_data_dir,
    batch_files_live,
    list_manifests,
    manifest_path,
    staging_root,
)
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import StagingError
from tests.conftest import SCHEMA
from tests.helpers import local_path, rows_of

IDENT = "ns.t"
NOW = 1_800_000_000_000
#: A folder name a table bucket accepts under ``data/`` (SeaweedFS 4.48, probed).
_BUCKET_FOLDER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=[^/]+)?")


def _table(config: CatalogConfig) -> Any:
    return create_managed_table(config.load(), IDENT, SCHEMA)


def _legacy_batch(table: Any, batch_id: str, rows: list[tuple[int, str]]) -> tuple[Any, str]:
    """A batch staged as before: ``data/ct-batch=<id>/attempt=<a>/``, manifest in the table."""
    attempt = f"{NOW}-legacy"
    folder = batch_data_dir(table.location(), batch_id, attempt, folder=LEGACY_BATCH_FOLDER)
    path = f"{folder}/part-{uuid.uuid4().hex}.parquet"
    local_path(folder).mkdir(parents=True)
    data = pa.Table.from_pylist([{"k": k, "v": v} for k, v in rows], schema=SCHEMA)
    pq.write_table(data, local_path(path))
    head = table.metadata.current_snapshot()
    batch = StagedBatch(
        batch_id=batch_id,
        target=IDENT,
        lower=Frontier.minimum() if head is None else Frontier.at(10),
        upper=Frontier.at(10) if head is None else Frontier.at(20),
        base_snapshot_id=None if head is None else head.snapshot_id,
        data_dir=folder,
        times=(StagedTime(5, (StagedFile(path, len(rows), 1),)),),
        attempt=attempt,
        created_at_ms=NOW,
    )
    manifest = f"{table.location()}/ct-staging/{batch_id}.attempt-{attempt}.json"
    write_manifest(batch, manifest)
    return batch, manifest


def test_every_staging_folder_under_data_is_one_a_table_bucket_accepts(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = _table(sqlite_catalog_config)
    folder = batch_data_dir(table.location(), "view-1700000000000.x-y", "1700000000000-abcdef")
    below_data = folder.split("/data/", 1)[1].split("/")
    assert below_data == ["ct_batch=view-1700000000000.x-y", "attempt=1700000000000-abcdef"]
    assert all(_BUCKET_FOLDER.fullmatch(part) for part in below_data)


def test_a_batch_staged_in_the_old_layout_still_lands(sqlite_catalog_config: CatalogConfig) -> None:
    table = _table(sqlite_catalog_config)
    _, manifest = _legacy_batch(table, "old", [(1, "a")])
    outcome = land_staged(table, manifest)
    assert outcome.result.landed
    assert rows_of(table) == {(1, "a"): 1}
    assert batch_files_live(table, "old")  # found by its old folder
    assert not local_path(manifest).exists()


def test_old_layout_leftovers_are_swept(sqlite_catalog_config: CatalogConfig) -> None:
    """An outdated old-layout attempt is discarded, its folder's orphans go after the grace."""
    table = _table(sqlite_catalog_config)
    winner, winner_manifest = _legacy_batch(table, "winner", [(1, "a")])
    loser, _ = _legacy_batch(table, "loser", [(2, "b")])
    assert land_staged(table, winner_manifest).result.landed
    orphan = local_path(batch_data_dir(table.location(), "crashed", folder=LEGACY_BATCH_FOLDER))
    orphan.mkdir(parents=True)
    (orphan / "part-x.parquet").write_bytes(b"debris")
    report = sweep_staged(table, grace_ms=0, now=NOW + 1)
    assert report.discarded == ("loser",) and report.orphans_deleted == 1, report
    assert not local_path(loser.staged_files[0]).exists()
    assert local_path(winner.staged_files[0]).exists()
    assert rows_of(table) == {(1, "a"): 1}


def test_a_staging_root_moves_manifests_out_of_the_table(
    sqlite_catalog_config: CatalogConfig, tmp_path: Path
) -> None:
    """``ct.staging-root`` in the connection: manifests there, one folder per table location.

    Manifests staged before the setting (in ``<table>/ct-staging``) are still
    listed, landed and swept.
    """
    before = _table(sqlite_catalog_config)
    _, old_manifest = _legacy_batch(before, "b0", [(1, "a")])
    root = f"file://{tmp_path}/staging-root"
    config = dataclasses.replace(
        sqlite_catalog_config,
        properties={**sqlite_catalog_config.properties, TableKeys.STAGING_ROOT: root},
    )
    table = config.load().load_table(IDENT)
    io = dict(table.io.properties)
    expected = f"{root}/{table.location().split('://', 1)[1].lstrip('/')}"
    assert staging_root(table.location(), table.metadata.properties, io) == expected
    new = manifest_path(table.location(), "b1", table.metadata.properties, "a1", io)
    assert new.startswith(expected + "/")
    listed = set(list_manifests(table.location(), table.metadata.properties, io))
    assert listed == {old_manifest}
    assert land_staged(table, old_manifest).result.landed  # the old root is still accepted
    assert sweep_staged(table, grace_ms=0).files_deleted == 0


@pytest.mark.parametrize("root", ["relative/folder", "s3://bucket/../x", "file:///a/./b", "s3://"])
def test_a_staging_root_that_is_not_an_absolute_location_is_refused(root: str) -> None:
    with pytest.raises(StagingError, match="must be an absolute location"):
        staging_root("s3://lake/ns/t", {}, {TableKeys.STAGING_ROOT: root})


def test_the_tables_own_staging_dir_wins_over_the_connections_root() -> None:
    props = {TableKeys.STAGING_DIR: "mine"}
    io = {TableKeys.STAGING_ROOT: "s3://gp/staging"}
    assert staging_root("s3://lake/ns/t", props, io) == "s3://lake/ns/t/mine"
    assert staging_root("s3://lake/ns/t", {}, io) == "s3://gp/staging/lake/ns/t"
