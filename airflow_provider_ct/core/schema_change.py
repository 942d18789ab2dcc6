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

The schema change and the tick's correction land in ONE commit: a reader
never sees the new schema over the old rows, and a crash never leaves a
table whose schema changed while its frontier did not. The write job
computes the new schema without committing it (:func:`plan_schema_change`:
field ids assigned ahead, from the table's last assigned id), stages the
batch's files against it (:func:`pending_table`: the files carry the new
field ids) and records it in the staged batch's manifest. The append then
puts it into the batch's own transaction ahead of its snapshots
(:func:`apply_schema_change`), so the snapshots are written with the new
schema's id, and the one catalog commit asserts ``main``'s head (the
description's base) and the schema the change was planned against (its id
and the last assigned field id). Either the schema and the batch land
together or neither does: a lost race changes nothing, the schema included.
Snapshots before the change keep their schema, so time travel to them reads
the old columns. Column order never matters: rows are compared by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.exceptions import CommitError, SchemaMismatchError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
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
        if same_type(old, new):
            continue
        try:
            promote(old, new)
        except ResolveError:
            changed.append((want[name].name, str(old), str(new)))
        else:
            promoted.append((want[name].name, str(old), str(new)))
    return SchemaDiff(added, tuple(sorted(promoted)), dropped, tuple(sorted(changed)), types)


def same_type(old: IcebergType, new: IcebergType) -> bool:
    """Whether two Iceberg types are the same shape, whatever their field ids and nullability.

    The query's schema is converted from Arrow with placeholder ids (-1) for
    the fields of lists, maps and structs, and Spark's nullability of nested
    fields shifts with plans: neither makes the table another type.
    """
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(old, ListType) and isinstance(new, ListType):
        return same_type(old.element_type, new.element_type)
    if isinstance(old, MapType) and isinstance(new, MapType):
        return same_type(old.key_type, new.key_type) and same_type(old.value_type, new.value_type)
    if isinstance(old, StructType) and isinstance(new, StructType):
        return len(old.fields) == len(new.fields) and all(
            a.name == b.name and same_type(a.field_type, b.field_type)
            for a, b in zip(old.fields, new.fields, strict=True)
        )
    return bool(old == new)


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


@dataclass(frozen=True)
class SchemaChange:
    """The schema a batch's files were staged under, committed by the append with the batch.

    Recorded in the staged batch's manifest (:meth:`to_json`): the append
    runs in another process than the write job, and must commit exactly the
    field ids the staged files carry.
    """

    #: The table's current schema id and last assigned field id when planned:
    #: the commit asserts both, so field ids assigned ahead stay unique.
    base_schema_id: int
    base_last_column_id: int
    #: The new schema, with its schema id and field ids.
    schema: Schema
    #: The table's name mapping under the new schema (old names on old fields).
    name_mapping: str

    def carried_columns(self, old: Schema) -> frozenset[str]:
        """Names of the new schema's columns that read the old schema's values (same field id).

        Every other column is new to old files: added, or a replaced column
        (``recreate``), which old files read as null.
        """
        old_ids = {f.field_id for f in old.fields}
        return frozenset(f.name for f in self.schema.fields if f.field_id in old_ids)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_schema_id": self.base_schema_id,
            "base_last_column_id": self.base_last_column_id,
            "schema": json.loads(self.schema.model_dump_json()),
            "name_mapping": self.name_mapping,
        }

    @classmethod
    def from_json(cls, data: Any) -> SchemaChange:
        """Parse a manifest's ``schema_change``; ``TypeError``/``ValueError`` if malformed."""
        from pyiceberg.schema import Schema
        from pyiceberg.table.name_mapping import parse_mapping_from_json

        if not isinstance(data, dict):
            raise TypeError(f"schema_change must be an object, got {data!r:.80}")
        ids = [data["base_schema_id"], data["base_last_column_id"]]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in ids):
            raise TypeError(f"schema_change's base ids must be integers, got {ids!r:.80}")
        mapping = data["name_mapping"]
        if not isinstance(mapping, str):
            raise TypeError("schema_change's name_mapping must be a JSON string")
        parse_mapping_from_json(mapping)
        if not isinstance(data["schema"], dict) or "schema-id" not in data["schema"]:
            raise ValueError("schema_change's schema must be an Iceberg schema with a schema-id")
        schema = Schema.model_validate(data["schema"])
        if not schema.fields:
            raise ValueError("schema_change's schema has no columns")
        return cls(ids[0], ids[1], schema, mapping)


def plan_schema_change(
    table: Table, diff: SchemaDiff, query_schema: pa.Schema, mode: str
) -> SchemaChange:
    """The schema that makes ``table``'s columns the query's under ``mode``; nothing is committed.

    Field ids are assigned as Iceberg would assign them now; the append
    commits the change only if the table's schema is still the one planned
    against (see the module docstring).
    """
    from pyiceberg.table import TableProperties

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
    schema = tx.table_metadata.schema()
    left = diff_schemas(schema, query_schema)
    if left:
        raise SchemaMismatchError(
            f"the query's schema cannot be given to table {name}: after the change "
            + "; ".join(left.problems())
            + ". The table was left untouched."
        )
    metadata = table.metadata
    mapping = metadata.properties.get(TableProperties.DEFAULT_NAME_MAPPING)
    if mapping is None:  # files without ids resolve names as the old schema has them
        mapping = metadata.schema().name_mapping.model_dump_json()
    return SchemaChange(
        base_schema_id=metadata.current_schema_id,
        base_last_column_id=metadata.last_column_id,
        schema=schema,
        name_mapping=_mapping_after(mapping, schema),
    )


def pending_table(table: Table, change: SchemaChange) -> Table:
    """``table`` as it will be once ``change`` commits, its snapshots unchanged.

    What the write job stages a batch's files against (their field ids, the
    name mapping) and checks its history on (a head written under another
    schema: no incremental tick). Nothing is committed; the object is never
    committed through either.
    """
    from pyiceberg.table import Table as IcebergTable
    from pyiceberg.table.update import update_table_metadata

    metadata = update_table_metadata(table.metadata, _updates(table.metadata, change))
    return IcebergTable(
        table.name(), metadata, table.metadata_location, table.io, table.catalog, table.config
    )


def schema_conflict(metadata: TableMetadata, change: SchemaChange) -> str | None:
    """Why ``change`` can no longer be committed on ``metadata`` (another schema change won)."""
    if metadata.current_schema_id != change.base_schema_id:
        return (
            f"schema is {metadata.current_schema_id}, the batch's schema change was planned "
            f"against schema {change.base_schema_id}"
        )
    if metadata.last_column_id != change.base_last_column_id:
        return (
            f"the last assigned field id is {metadata.last_column_id}, the batch's schema "
            f"change was planned against {change.base_last_column_id}"
        )
    known = metadata.schema_by_id(change.schema.schema_id)
    if known is not None and known != change.schema:
        return f"schema id {change.schema.schema_id} was given to another schema"
    return None


def apply_schema_change(tx: Transaction, change: SchemaChange) -> None:
    """Stage ``change`` into ``tx`` before its snapshots, asserting the schema it was planned on.

    The snapshots a transaction builds afterwards record the new schema's id
    and check their files against it; the requirements travel with the
    transaction's one catalog commit
    (:func:`~airflow_provider_ct.core.commit.commit_once`).
    """
    from pyiceberg.table.update import AssertCurrentSchemaId, AssertLastAssignedFieldId

    metadata = tx.table_metadata
    conflict = schema_conflict(metadata, change)
    if conflict is not None:
        raise CommitError(f"cannot apply the batch's schema change: {conflict}")
    requirements = (
        AssertCurrentSchemaId(current_schema_id=change.base_schema_id),  # type: ignore[call-arg]
        AssertLastAssignedFieldId(  # type: ignore[call-arg]
            last_assigned_field_id=change.base_last_column_id
        ),
    )
    tx._apply(_updates(metadata, change), requirements)
    if tx.table_metadata.current_schema_id != change.schema.schema_id:
        raise CommitError(  # pragma: no cover - PyIceberg renumbered the schema
            f"the batch's schema {change.schema.schema_id} did not become the current one "
            f"({tx.table_metadata.current_schema_id})"
        )


def _updates(metadata: TableMetadata, change: SchemaChange) -> tuple[Any, ...]:
    """The metadata updates of ``change``: its schema (added unless known), current; the mapping."""
    from pyiceberg.table import TableProperties
    from pyiceberg.table.update import AddSchemaUpdate, SetCurrentSchemaUpdate, SetPropertiesUpdate

    mapping = SetPropertiesUpdate(
        updates={TableProperties.DEFAULT_NAME_MAPPING: change.name_mapping}
    )
    schema_id = change.schema.schema_id
    if metadata.schema_by_id(schema_id) is not None:
        return SetCurrentSchemaUpdate(schema_id=schema_id), mapping  # type: ignore[call-arg]
    current = SetCurrentSchemaUpdate(schema_id=-1)  # type: ignore[call-arg]
    return AddSchemaUpdate(schema=change.schema), current, mapping


def _mapping_after(mapping: str, schema: Schema) -> str:
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
    added = [f for f in schema.name_mapping if not names & {n.lower() for n in f.names}]
    return NameMapping([*old, *added]).model_dump_json()
