"""The sweep never removes a live file, even while appends land next to it.

Real SQLite catalog, real threads: a writer stages attempts exactly as the
write job does (write-ahead manifest, Parquet in the attempt's folder,
manifest marked staged) and lands them with the append's own code path,
leaving losers, abandoned attempts and half-written ones behind, while a
sweeper with no grace period at all runs in a loop. After every landing
every file of every kept snapshot must exist; at the end the table equals
the test's own model and nothing but referenced files remains.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_ct.core.appending import land_staged
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.manifest import StagedFile, StagedTime
from airflow_provider_ct.core.staging import (
    begin_batch,
    finish_batch,
    list_manifests,
    referenced_files,
)
from airflow_provider_ct.core.sweep import sweep_staged
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import ManifestMissingError
from tests.conftest import SCHEMA
from tests.helpers import local_path, rows_of

pytestmark = pytest.mark.faults

IDENT = "ns.swept"
ROUNDS = int(os.environ.get("CT_SWEEP_ROUNDS", "25"))


def _stage(table: Any, desc: BatchDescription, rows: list[tuple[int, str]]) -> str:
    batch, manifest = begin_batch(table, desc)
    path = f"{batch.data_dir}/part-0.parquet"
    local_path(path).parent.mkdir(parents=True, exist_ok=True)
    data = pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows]}, SCHEMA)
    pq.write_table(data, local_path(path))
    finish_batch(batch, manifest, [StagedTime(desc.time, (StagedFile(path, len(rows), 1),))])
    return manifest


def _all_referenced_exist(table: Any) -> list[str]:
    return [f for f in referenced_files(table) if not local_path(f).exists()]


def _writer(config: CatalogConfig, model: Counter[tuple[int, str]], log: list[str]) -> None:
    """Land ROUNDS batches; each round also leaves a loser and an abandoned attempt."""
    rng = random.Random(7)
    table = config.load().load_table(IDENT)
    for round_ in range(ROUNDS):
        table.refresh()
        timeline = Timeline.of(table)
        time_ms = 10 * (round_ + 1)
        desc = BatchDescription(
            target=IDENT,
            lower=timeline.upper,
            upper=Frontier.at(time_ms + 1),
            time=time_ms,
            base_snapshot_id=timeline.head_snapshot_id,
        )
        rows = [(rng.randint(0, 50), f"r{round_}") for _ in range(rng.randint(1, 4))]
        first = _stage(table, desc, rows)
        second = _stage(table, desc, rows)  # a duplicate attempt of the same tick
        _stage(table, desc, rows)  # an attempt that crashed before its append
        outcome = land_staged(table, first, description=desc)
        assert outcome.landed_by_this_attempt, outcome
        model.update(rows)
        missing = _all_referenced_exist(table)
        assert not missing, f"round {round_}: live files removed: {missing[:3]}"
        try:
            again = land_staged(table, second, description=desc)
        except ManifestMissingError:
            log.append(f"round {round_}: the sweeper discarded the duplicate first")
        else:
            assert again.result.already_landed and not again.landed_by_this_attempt
        log.append(f"round {round_} landed")


def test_a_sweep_without_grace_never_removes_a_live_file_under_concurrent_appends(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    table = create_managed_table(sqlite_catalog_config.load(), IDENT, SCHEMA)
    model: Counter[tuple[int, str]] = Counter()
    log: list[str] = []
    errors: list[BaseException] = []
    done = threading.Event()
    sweeps = Counter[str]()

    def sweeper() -> None:
        own = sqlite_catalog_config.load().load_table(IDENT)
        while not done.is_set():
            try:
                report = sweep_staged(own, grace_ms=0)
            except BaseException as exc:  # reported below; the loop must not die silently
                errors.append(exc)
                return
            sweeps["runs"] += 1
            sweeps["discarded"] += len(report.discarded)
            sweeps["landed"] += len(report.landed)
            time.sleep(0.01)

    thread = threading.Thread(target=sweeper)
    thread.start()
    try:
        _writer(sqlite_catalog_config, model, log)
    finally:
        done.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert sum(1 for x in log if x.endswith(" landed")) == ROUNDS and sweeps["runs"] >= 1
    # Quiescent: a last sweep leaves exactly the referenced files and no manifest.
    table.refresh()
    final = sweep_staged(table, grace_ms=0)
    files = {f"file://{p}" for p in Path(local_path(table.location())).joinpath("data").rglob("*")}
    files = {f for f in files if Path(local_path(f)).is_file()}
    assert files == referenced_files(table), final
    assert list(list_manifests(table.location(), table.metadata.properties)) == []
    assert rows_of(table) == model
    # Time travel: every kept snapshot reads.
    for snapshot in table.metadata.snapshots:
        rows_of(table, snapshot.snapshot_id)
    print(
        f"sweep under concurrent appends: {ROUNDS} rounds, {sweeps['runs']} sweeps, "
        f"{sweeps['discarded']} attempts discarded concurrently, 0 live files removed"
    )
