"""Maintenance of managed tables: compaction, snapshot expiry and the staging sweep.

Ticks write a snapshot per collection per interval, and small blind writes
write small files; both make every commit slower (PyIceberg copies the whole
metadata on each change) and every read open more files. Maintenance bounds
them without taking away anything a reader still needs:

* :mod:`.compaction` rewrites the head's small files into fewer ones;
* :mod:`.expiry` drops the snapshots no read hold and no retention keeps;
* :func:`~airflow_provider_ct.core.sweep.sweep_staged` removes what crashed
  writers and lost races left staged.

This module holds what ties them together: one settings object
(:class:`MaintenanceSettings`, shared by :func:`maintain`, the ticker, the
maintain operator and the tick DAG) and :func:`maintain`, which runs the
three in the one order that lets each clean up after the one before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.compaction import (
    DEFAULT_MIN_FILES,
    DEFAULT_SMALL_FILE_BYTES,
    DEFAULT_TARGET_FILE_BYTES,
    CompactionReport,
    compact,
)
from airflow_provider_ct.collections.expiry import (
    DEFAULT_RETENTION_MS,
    ExpiryReport,
    expire_snapshots,
)
from airflow_provider_ct.collections.registry import is_read_only
from airflow_provider_ct.core.sweep import DEFAULT_GRACE_MS, SweepReport, sweep_staged
from airflow_provider_ct.core.tables import load_table_or_none, part_tables, state_table_name
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceSettings:
    """How maintenance treats each table.

    The defaults live beside the step they tune (:mod:`.compaction`,
    :mod:`.expiry`, :mod:`~airflow_provider_ct.core.sweep`); this one frozen
    object carries them all so that :func:`maintain`, the ticker, the
    maintain operator and the tick DAG cannot drift apart field by field.
    """

    retention_ms: int = DEFAULT_RETENTION_MS
    expire: bool = True
    delete_files: bool = True
    compact: bool = True
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES
    min_files: int = DEFAULT_MIN_FILES
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    #: Remove staged leftovers (crashed writers, lost races) after expiry.
    sweep: bool = True
    #: Age before files no manifest accounts for count as debris (see sweep_staged).
    sweep_grace_ms: int = DEFAULT_GRACE_MS

    def __post_init__(self) -> None:
        """Refuse settings that would expire what they should keep.

        A negative retention puts the readable-since time in the future, so
        expiry would drop every snapshot no read hold protects.
        """
        for name, least in (
            ("retention_ms", 0),
            ("small_file_bytes", 0),
            ("min_files", 1),
            ("target_file_bytes", 1),
            ("sweep_grace_ms", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigurationError(
                    f"maintenance setting {name}={value!r:.100} must be an integer >= {least}"
                )


@dataclass(frozen=True)
class MaintenanceReport:
    """What :func:`maintain` did, per step and per table.

    ``errors`` maps a table to the error that stopped its maintenance: one
    table's failure must not stop the others, so it is reported here and the
    caller decides (the maintain operator fails once every table was tried).
    """

    expiry: tuple[ExpiryReport, ...] = ()
    compaction: tuple[CompactionReport, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    sweeps: dict[str, SweepReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "expiry": [r.to_json() for r in self.expiry],
            "compaction": [r.to_json() for r in self.compaction],
            "sweeps": {name: asdict(r) for name, r in self.sweeps.items()},
            "errors": dict(self.errors),
        }


def _sweep_state(catalog: Catalog, name: str, grace_ms: int) -> dict[str, SweepReport]:
    """The sweep of a view's state table, if it keeps one: its writes stage files like batches."""
    state = state_table_name(name)
    table = load_table_or_none(catalog, state)
    if table is None:
        return {}
    return {state: sweep_staged(table, grace_ms=grace_ms)}


def _with_parts(catalog: Catalog, tables: Iterable[str]) -> list[str]:
    """Each table, then the tables of its query's parts (``ivm/plan/compose.py``): they are
    the view's own, ticked with it, so they are compacted, expired and swept with it."""
    names: list[str] = []
    for name in tables:
        names.append(name)
        try:
            names.extend(part_tables(catalog, name))
        except Exception as exc:  # the view's own maintenance still runs
            log.warning("could not list the parts of %s: %s", name, exc)
    return names


def maintain(
    catalog: Catalog,
    tables: Iterable[str],
    settings: MaintenanceSettings | None = None,
    *,
    now: int | None = None,
    read_only: bool | None = None,
) -> MaintenanceReport:
    """Compact, expire, then sweep staged leftovers of each table.

    Compaction goes first so that expiry can drop the snapshots that still
    referenced the small files once no reader needs them; the sweep goes
    last, so files only expired snapshots referenced are gone by then. One
    table's failure does not stop the others. In read-only mode nothing is
    swept either. A view's parts (the tables its query is kept in when no
    rule maintains it whole) are maintained after it, as tables of its own.
    """
    chosen = settings or MaintenanceSettings()
    expiry: list[ExpiryReport] = []
    compaction: list[CompactionReport] = []
    errors: dict[str, str] = {}
    sweeps: dict[str, SweepReport] = {}
    for name in _with_parts(catalog, tables):
        try:
            if chosen.compact:
                compaction.append(
                    compact(
                        catalog,
                        name,
                        small_file_bytes=chosen.small_file_bytes,
                        min_files=chosen.min_files,
                        target_file_bytes=chosen.target_file_bytes,
                        read_only=read_only,
                    )
                )
            if chosen.expire:
                expiry.append(
                    expire_snapshots(
                        catalog,
                        name,
                        retention_ms=chosen.retention_ms,
                        now=now,
                        delete_unreferenced=chosen.delete_files,
                        read_only=read_only,
                    )
                )
            if chosen.sweep:
                table = catalog.load_table(name)
                if not is_read_only(table, read_only):
                    # File ages are wall-clock ages, whatever time the tick is for.
                    sweeps[name] = sweep_staged(table, grace_ms=chosen.sweep_grace_ms)
                    sweeps.update(_sweep_state(catalog, name, chosen.sweep_grace_ms))
        except Exception as exc:
            log.exception("maintenance of %s failed", name)
            errors[name] = f"{type(exc).__name__}: {exc}"
    return MaintenanceReport(tuple(expiry), tuple(compaction), errors, sweeps)
