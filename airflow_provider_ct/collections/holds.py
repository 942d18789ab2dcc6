"""Read holds: which snapshots of a table some registered reader still needs.

A reader (a materialized view, a continual task, or any task that reads a
table at a time) registers on each of its inputs. The hold is a table
property on the *input*, ``ct.read-hold.<reader>`` = JSON
``{"since": <ms or null>, "table": <bool>}``, so whoever expires the input's
snapshots sees every hold on it without knowing the readers' DAGs.

The hold's time is decided when expiry runs, not when it is registered:

* a reader that is a table (a view's or task's target) needs its inputs at
  and after ``its upper - 1``: the next tick of a view reads its inputs at a
  time ``>= upper``, and a continual task also reads the input's snapshot at
  ``upper - 1`` to find what was inserted since. So the hold follows the
  reader's upper as it ticks, and a closed reader holds nothing;
* before the reader's table exists (its first tick is still to run), and
  for readers that are not tables, the registered ``since`` is the hold
  (``null``: the whole history).

Property updates touch only the reader's own key and are applied by the
catalog to the current metadata, so registrations of different readers never
overwrite each other.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.registry import CollectionKeys, set_table_properties
from airflow_provider_ct.core.frontier import check_timestamp
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadHold:
    """One reader's hold on one input table."""

    input: str
    reader: str
    #: Static hold time (epoch ms), used until the reader's table has an upper;
    #: ``None`` holds the whole history.
    since: int | None = None
    #: True when ``reader`` names a managed table whose upper moves the hold.
    reader_is_table: bool = True

    @property
    def key(self) -> str:
        return CollectionKeys.READ_HOLD_PREFIX + self.reader

    def to_property(self) -> str:
        return json.dumps({"since": self.since, "table": self.reader_is_table}, sort_keys=True)


@dataclass(frozen=True)
class HoldTime:
    """A hold resolved at some moment: the earliest time the reader may still read.

    ``time is None`` means the hold is released (the reader is closed).
    """

    hold: ReadHold
    time: int | None
    why: str


def _parse(input_name: str, key: str, value: str) -> ReadHold:
    reader = key[len(CollectionKeys.READ_HOLD_PREFIX) :]
    try:
        data: Any = json.loads(value)
        since = data.get("since")
        if since is not None:
            check_timestamp(since, "read-hold since")
        return ReadHold(input_name, reader, since, bool(data.get("table", True)))
    except (ValueError, AttributeError, TypeError) as exc:
        # Unreadable: hold everything rather than risk expiring what it protects.
        log.warning(
            "read hold %s on %s is malformed (%s); holding all history", key, input_name, exc
        )
        return ReadHold(input_name, reader, 0, False)


def read_holds(table: Table) -> list[ReadHold]:
    """Every hold registered on ``table``, sorted by reader."""
    name = ".".join(table.name())
    props = table.metadata.properties
    return sorted(
        (
            _parse(name, key, value)
            for key, value in props.items()
            if key.startswith(CollectionKeys.READ_HOLD_PREFIX)
        ),
        key=lambda h: h.reader,
    )


def register_reader(
    catalog: Catalog,
    reader: str,
    inputs: Iterable[str],
    *,
    since: int | None = None,
    reader_is_table: bool = True,
) -> list[ReadHold]:
    """Register ``reader`` on each of ``inputs``; re-registering replaces the hold.

    :param reader: the reader's name; for a view or continual task its target
        table ``namespace.table`` (then ``reader_is_table`` stays true).
    :param since: the earliest time the reader will read before its table has
        an upper (e.g. the first tick of a backfill); ``None`` keeps all history.
    """
    from pyiceberg.exceptions import NoSuchTableError

    if since is not None:
        check_timestamp(since, "since")
    if not isinstance(reader, str) or not reader.strip():
        raise ConfigurationError(f"a reader needs a name, got {reader!r:.100}")
    if isinstance(inputs, str):
        raise ConfigurationError(f"inputs must be a list of tables, got the string {inputs!r:.100}")
    names = list(inputs)
    tables: list[Table] = []
    for name in names:  # all of them first: a missing one must leave the others unchanged
        try:
            tables.append(catalog.load_table(name))
        except NoSuchTableError:
            raise ConfigurationError(
                f"input {name!r} of reader {reader!r} does not exist"
            ) from None
    holds: list[ReadHold] = []
    for name, table in zip(names, tables, strict=True):
        hold = ReadHold(".".join(table.name()), reader, since, reader_is_table)
        set_table_properties(table, {hold.key: hold.to_property()})
        log.info("registered read hold of %s on %s (since %s)", reader, name, since)
        holds.append(hold)
    return holds


def hold_collection_inputs(
    catalog: Catalog, reader: str, inputs: Iterable[str], *, since: int
) -> list[str]:
    """Register ``reader`` on each input that is a managed collection, once.

    Views and continual tasks call this when they mint, before pinning their
    inputs, so collection expiry never drops a snapshot they still have to
    read. Only collections get holds: their snapshots are what this package
    expires, and other tables are not ours to change. An input that already
    holds for ``reader`` is left alone (no metadata commit per tick).
    Returns the inputs newly registered on.
    """
    from airflow_provider_ct.collections.registry import collection_kind

    check_timestamp(since, "since")
    key = CollectionKeys.READ_HOLD_PREFIX + reader
    registered = []
    for name in inputs:
        if name == reader:
            continue
        table = catalog.load_table(name)
        if collection_kind(table) is None or key in table.metadata.properties:
            continue
        register_reader(catalog, reader, [name], since=since)
        registered.append(name)
    return registered


def release_reader(catalog: Catalog, reader: str, inputs: Iterable[str]) -> None:
    """Drop ``reader``'s holds on ``inputs`` (missing inputs are ignored)."""
    from pyiceberg.exceptions import NoSuchTableError

    key = CollectionKeys.READ_HOLD_PREFIX + reader
    for name in inputs:
        try:
            table = catalog.load_table(name)
        except NoSuchTableError:
            continue
        set_table_properties(table, removals=[key])
        log.info("released read hold of %s on %s", reader, name)


def hold_time(catalog: Catalog, hold: ReadHold) -> HoldTime:
    """The earliest time ``hold``'s reader may still read its input, as of now."""
    from pyiceberg.exceptions import NoSuchTableError

    fallback = 0 if hold.since is None else hold.since
    if not hold.reader_is_table:
        return HoldTime(hold, fallback, "registered since")
    try:
        reader_table = catalog.load_table(hold.reader)
    except NoSuchTableError:
        return HoldTime(hold, fallback, "reader table not created yet")
    timeline = Timeline.of(reader_table)
    if not timeline.managed:
        return HoldTime(hold, fallback, "reader table has no frontier yet")
    upper = timeline.upper
    if upper.is_empty:
        return HoldTime(hold, None, "reader is closed")
    if upper.time is None or upper.time == 0:
        return HoldTime(hold, fallback, "reader has sealed nothing yet")
    return HoldTime(hold, upper.time - 1, f"reader upper {upper.time} - 1")
