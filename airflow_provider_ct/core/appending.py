"""Appending a staged batch: check its manifest, compare-and-append it, clean up after.

The append task's core, without Airflow: :func:`land_staged` refuses a
manifest that is incomplete, another table's or another description's
(:func:`check_appendable`), commits it with compare-and-append at its lower
against its base, and then asks :func:`~airflow_provider_ct.core.landing.landing_of`
what happened, deleting this attempt's files whenever they cannot be the
table's.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_ct.core.commit import AppendResult, compare_and_append
from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.landing import Landing, landing_of
from airflow_provider_ct.core.manifest import STATE_STAGED, StagedBatch, read_manifest
from airflow_provider_ct.core.staging import (
    check_batch_paths,
    discard,
    forget,
    inside,
    referenced_files,
    staging_roots,
)
from airflow_provider_ct.core.storage import io_properties
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import StagingError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_ct.core.description import BatchDescription

log = logging.getLogger(__name__)


def check_appendable(
    batch: StagedBatch,
    table: Table,
    *,
    manifest: str | None = None,
    description: BatchDescription | None = None,
    allowed_times: Collection[int] | None = None,
) -> None:
    """Refuse a manifest that is not completely staged, not this table's, or not ``description``'s.

    A manifest still in state ``writing`` belongs to a writer that has not
    finished (or crashed): appending it would seal the time without its
    correction.

    :param allowed_times: the times a batch answering ``description`` may
        stage. ``None`` is a view's rule: at most one time, the description's
        ``time``. A continual task passes its batch's times
        (:func:`~airflow_provider_ct.core.continual.batch_times`): one entry
        per input time, all below the tick's time.
    """
    name = ".".join(table.name())
    if batch.state != STATE_STAGED:
        raise StagingError(
            f"staged batch {batch.batch_id} (attempt {batch.attempt or '-'}) is in state "
            f"{batch.state!r}, not {STATE_STAGED!r}: its writer has not finished (or crashed); "
            "refusing to append an incomplete correction"
        )
    if batch.target != name:
        raise StagingError(f"staged batch {batch.batch_id} is for {batch.target}, not {name}")
    check_batch_paths(
        batch, table.location(), table.metadata.properties, manifest, io_properties(table)
    )
    if description is None:
        return
    if batch.batch_id != description.id or dict(batch.description) != description.to_json():
        raise StagingError(
            f"staged batch {batch.batch_id} does not answer description {description.id}: "
            "the manifest was staged for another description"
        )
    mismatched = [
        what
        for what, ours, theirs in (
            ("lower", batch.lower, description.lower),
            ("upper", batch.upper, description.upper),
            ("base_snapshot_id", batch.base_snapshot_id, description.base_snapshot_id),
            ("inputs", dict(batch.inputs), dict(description.inputs)),
        )
        if ours != theirs
    ]
    if mismatched:
        raise StagingError(
            f"staged batch {batch.batch_id} disagrees with its description on {mismatched}"
        )
    problem = _times_problem(batch, description, allowed_times)
    if problem:
        raise StagingError(
            f"staged batch {batch.batch_id} disagrees with its description on time: {problem}"
        )


def _times_problem(
    batch: StagedBatch, description: BatchDescription, allowed: Collection[int] | None
) -> str | None:
    """What is wrong with the times a manifest stages for ``description``, or None."""
    times = [t.time for t in batch.times]
    if any(b <= a for a, b in itertools.pairwise(times)):
        return f"its times {times[:10]} do not strictly increase"
    outside = [t for t in times if description.lower.seals(t) or not description.upper.seals(t)]
    if outside:
        return (
            f"time {outside[0]} lies outside the batch's [{description.lower.to_summary()}, "
            f"{description.upper.to_summary()})"
        )
    if allowed is None:
        if times and times != [description.time]:
            return f"a view's batch stages only the tick's time {description.time}, not {times}"
        return None
    unknown = [t for t in times if t not in set(allowed)]
    if unknown:
        return (
            f"time {unknown[0]} is not one of the batch's {len(allowed)} input time(s) "
            f"{sorted(allowed)[:10]}"
        )
    return None


def append_batch(table: Table, batch: StagedBatch) -> AppendResult:
    """Compare-and-append a staged batch at its lower, against its base snapshot.

    A batch staged under a new schema commits that schema with its
    snapshots, in the same catalog commit (:mod:`.schema_change`).
    """
    if batch.state != STATE_STAGED:
        raise StagingError(
            f"staged batch {batch.batch_id} is in state {batch.state!r}, not {STATE_STAGED!r}"
        )
    result = compare_and_append(
        table,
        expected_upper=batch.lower,
        new_upper=batch.upper,
        batch_id=batch.batch_id,
        changes=batch.changes(),
        expected_head=batch.base_snapshot_id,
        inputs=batch.inputs,
        extra_summary={
            **batch.summary,
            **({SummaryKeys.ATTEMPT: batch.attempt} if batch.attempt else {}),
        },
        schema_change=batch.schema_change,
    )
    if batch.schema_change is not None and result.landed and not result.already_landed:
        log.info(
            "schema of %s became schema %d in the commit of batch %s",
            batch.target,
            batch.schema_change.schema.schema_id,
            batch.batch_id,
        )
    return result


@dataclass(frozen=True)
class LandResult:
    """What :func:`land_staged` did with one attempt's manifest."""

    result: AppendResult
    batch: StagedBatch
    #: Files of this attempt deleted (a lost race, or another attempt landed).
    files_deleted: int = 0
    #: The attempt that is on the table (``None`` if the batch did not land).
    landed_attempt: str | None = None

    @property
    def landed_by_this_attempt(self) -> bool:
        return self.result.landed and self.landed_attempt == self.batch.attempt


def land_staged(
    table: Table,
    manifest: str,
    *,
    description: BatchDescription | None = None,
    allowed_times: Collection[int] | None = None,
) -> LandResult:
    """Append one attempt's staged batch and clean up after whatever happened.

    * landed (now, or earlier by this same attempt): the manifest is dropped,
      the files are the table's;
    * already landed by *another* attempt of the same batch: this attempt's
      files are deleted (they are referenced by nothing) and the outcome is
      "already landed";
    * lost the race: this attempt's files are deleted; the next tick corrects.

    An unknown commit outcome raises and deletes nothing.
    """
    _check_manifest_path(table, manifest)
    io = io_properties(table)
    batch = read_manifest(manifest, io)
    check_appendable(
        batch, table, manifest=manifest, description=description, allowed_times=allowed_times
    )
    result = append_batch(table, batch)
    live = _LiveFiles(table)
    landed = landing_of(
        Timeline.of(table),
        batch.batch_id,
        attempt=batch.attempt,
        files_live=lambda: live.any_of(batch.staged_files),
    )
    if landed.landing is Landing.MINE:
        forget(manifest, io)
        return LandResult(result, batch, 0, landed.attempt)
    if landed.landing is Landing.FILES_LIVE:
        # This attempt landed earlier and its snapshot has since been
        # expired: its files are the table's. Never delete them.
        forget(manifest, io)
        again = dataclasses.replace(
            result, landed=True, already_landed=True, reason="files already live"
        )
        return LandResult(again, batch, 0, batch.attempt)
    # Lost, or another attempt's files are on the table (ours are in a folder
    # of their own): delete ours, each checked against every kept snapshot.
    location, props = table.location(), table.metadata.properties
    deleted = discard(
        batch, manifest, table_location=location, properties=props, live=live.files, io=io
    )
    if landed.landing is Landing.OTHER_ATTEMPT:
        log.info(
            "batch %s was landed by attempt %s; removed attempt %s's %d staged file(s)",
            batch.batch_id,
            landed.attempt or "-",
            batch.attempt,
            deleted,
        )
        return LandResult(result, batch, deleted, landed.attempt)
    return LandResult(result, batch, deleted)


def _check_manifest_path(table: Table, manifest: str) -> None:
    """Refuse a manifest path (from an XCom) outside the table's staging folder, before reading."""
    roots = staging_roots(table.location(), table.metadata.properties, io_properties(table))
    if not any(inside(manifest, root) for root in roots) or not manifest.endswith(".json"):
        raise StagingError(
            f"manifest path {manifest!r:.200} is not a manifest in {roots[0]}, the staging folder "
            f"of {'.'.join(table.name())}"
        )


class _LiveFiles:
    """The files a table's kept snapshots reference, read once and only when asked."""

    def __init__(self, table: Table) -> None:
        self._table = table
        self._files: set[str] | None = None

    @property
    def files(self) -> set[str]:
        if self._files is None:
            self._files = referenced_files(self._table)
        return self._files

    def any_of(self, paths: Iterable[str]) -> bool:
        return any(p in self.files for p in paths)
