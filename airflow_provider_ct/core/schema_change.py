"""When a view's query no longer produces its table's columns: evolve, fail or recreate.

Views are edited all the time; the table must follow its definition without
a manual migration, and without ever being half-changed. The rule, per
``on_schema_change``:

* ``evolve`` (default): columns the query gained are added (optional, at the
  end) and types the query widened are promoted, as far as Iceberg's
  promotion rules allow (int to long, float to double, a decimal's
  precision up). A column the query dropped, renamed or narrowed cannot be
  evolved: the tick fails naming ``recreate``.
* ``fail``: any difference fails the tick, naming the option.
* ``recreate``: additionally, columns the query no longer has are dropped
  and columns whose type cannot be promoted are replaced by new ones of the
  query's type (new field ids: old files read them as null, and the full
  correction that follows rewrites every row that differs).

The schema change commits just before the tick's correction, under the same
guard as the append (``main`` must still be the description's base), so a
tick that lost its race changes nothing; the correction then lands with the
append. Column order never matters: rows are compared by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.exceptions import SchemaMismatchError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType


@dataclass(frozen=True)
class SchemaDiff:
    """How a query's columns differ from its table's (by lower-cased name)."""

    added: tuple[str, ...] = ()
    promoted: tuple[tuple[str, str, str], ...] = ()
    dropped: tuple[str, ...] = ()
    changed: tuple[tuple[str, str, str], ...] = ()
    #: The query's column types, by name, for what is added or changed.
    types: dict[str, IcebergType] = field(default_factory=dict, compare=False)

    def __bool__(self) -> bool:
        return bool(self.added or self.promoted or self.dropped or self.changed)

    @property
    def evolvable(self) -> bool:
        """Whether Iceberg schema evolution alone gets the table there (no drops, no narrowing)."""
        return not (self.dropped or self.changed)

    def problems(self) -> list[str]:
        out = [f"query has new column {n} ({self.types[n]})" for n in self.added]
        out += [f"column {n} widened from {old} to {new}" for n, old, new in self.promoted]
        out += [f"query lacks column {n}" for n in self.dropped]
        out += [
            f"column {n} is {new} in the query, {old} in the table" for n, old, new in self.changed
        ]
        return sorted(out)


def diff_schemas(table_schema: Schema, query_schema: pa.Schema) -> SchemaDiff:
    """Compare the query's columns (an Arrow schema) with the table's."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.schema import promote

    query = Catalog._convert_schema_if_needed(query_schema)
    have = {f.name.lower(): f for f in table_schema.fields}
    want = {f.name.lower(): f for f in query.fields}
    types = {f.name: f.field_type for f in query.fields}
    added = tuple(want[n].name for n in want if n not in have)
    dropped = tuple(have[n].name for n in have if n not in want)
    promoted, changed = [], []
    for name in want.keys() & have.keys():
        old, new = have[name].field_type, want[name].field_type
        if old == new:
            continue
        try:
            promote(old, new)
        except ResolveError:
            changed.append((want[name].name, str(old), str(new)))
        else:
            promoted.append((want[name].name, str(old), str(new)))
    return SchemaDiff(added, tuple(sorted(promoted)), dropped, tuple(sorted(changed)), types)


def schema_error(diff: SchemaDiff, table: str, mode: str) -> SchemaMismatchError:
    """The error of a tick whose query does not fit its table under ``mode``."""
    if mode == "fail":
        advice = 'on_schema_change="fail": the table was left untouched'
    else:
        advice = (
            "Iceberg cannot evolve a dropped, renamed or narrowed column: the table was left "
            'untouched; on_schema_change="recreate" replaces those columns'
        )
    return SchemaMismatchError(
        f"the query's schema no longer matches table {table}: "
        + "; ".join(diff.problems())
        + f". {advice}."
    )


def change_schema(
    table: Table, diff: SchemaDiff, query_schema: pa.Schema, mode: str, expected_head: int | None
) -> Table:
    """Make ``table``'s columns the query's under ``mode`` (see the module docstring).

    Commits only if ``main`` is still ``expected_head``; returns the table reloaded.
    """
    from pyiceberg.table import TableProperties

    from airflow_provider_ct.core.commit import commit_once

    name = ".".join(table.name())
    if mode == "fail" or (mode == "evolve" and not diff.evolvable):
        raise schema_error(diff, name, mode)
    tx = table.transaction()
    with tx.update_schema() as update:
        for column in (*diff.dropped, *(n for n, _, _ in diff.changed)):
            update.delete_column(column)
        for column in (*(n for n, _, _ in diff.changed), *diff.added):
            update.add_column(column, diff.types[column])
        for column, _, _ in diff.promoted:
            update.update_column(column, field_type=diff.types[column])
    mapping = table.metadata.properties.get(TableProperties.DEFAULT_NAME_MAPPING)
    if mapping is not None:
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: _mapping_after(mapping, tx)})
    commit_once(table, tx, expected_head)
    return table.refresh()


def _mapping_after(mapping: str, tx: Any) -> str:
    """The name mapping once columns changed: old entries kept, new names added.

    Files written without field ids (by other engines, or by us before ids
    were recorded) are read through this mapping. Their names must keep
    resolving to the fields they were written as, for time travel to old
    snapshots; a replaced column's new field is only found by id (staged
    files carry ids), never by its old name.
    """
    from pyiceberg.table.name_mapping import NameMapping, parse_mapping_from_json

    old = list(parse_mapping_from_json(mapping))
    names = {n.lower() for f in old for n in f.names}
    new = tx.table_metadata.schema().name_mapping
    added = [f for f in new if not names & {n.lower() for n in f.names}]
    return NameMapping([*old, *added]).model_dump_json()
