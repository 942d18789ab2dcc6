"""How a managed table is laid out when we create it: partitioning, sort order, properties.

Why here, in one value: views, continual tasks and collections create their
tables in three places (the write job, the continual job, the collection
registry), and users give the layout once, in their DAG, as Spark SQL's
``PARTITIONED BY`` spells it (``day(ts)``, ``bucket(16, id)``...). The
spelling is checked when the DAG is parsed (a typo never reaches a worker);
the columns are checked against the query's schema when the table is created,
with a message naming the column. A table that exists already keeps its own
spec and order: we never repartition a user's table behind their back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Transaction

#: Transform names as Spark SQL and Iceberg spell them, to Iceberg's.
_TIME_TRANSFORMS = {
    "year": "year",
    "years": "year",
    "month": "month",
    "months": "month",
    "day": "day",
    "days": "day",
    "date": "day",
    "hour": "hour",
    "hours": "hour",
    "date_hour": "hour",
}
_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*\(\s*(.*?)\s*\)\s*$")
_NAME = re.compile(r"^`?([A-Za-z_][A-Za-z0-9_]*)`?$")
_SORT = re.compile(
    r"^\s*(?P<expr>.+?)(?:\s+(?P<dir>ASC|DESC))?(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?\s*$",
    re.IGNORECASE,
)
#: Properties a user may not set: ours, and what compare-and-append relies on.
RESERVED_PROPERTIES = ("ct.", "commit.retry.num-retries", "format-version")


@dataclass(frozen=True)
class PartitionField:
    """One partition field: a source column and an Iceberg transform (``identity``, ``day``...)."""

    column: str
    transform: str

    @property
    def name(self) -> str:
        """The partition field's name, as Spark names it (``ts_day``, ``id_bucket``)."""
        base = self.transform.split("[", 1)[0]
        return self.column if base == "identity" else f"{self.column}_{base}"


@dataclass(frozen=True)
class SortField:
    column: str
    transform: str
    descending: bool
    nulls_first: bool


def parse_partition(term: str) -> PartitionField:
    """``day(ts)``, ``bucket(16, id)``, ``truncate(4, name)``, ``country``... as a field."""
    name = _NAME.match(term.strip())
    if name:
        return PartitionField(name.group(1), "identity")
    call = _CALL.match(term)
    if not call:
        raise ConfigurationError(f"partition_by term {term!r} is not a column or transform(...)")
    func, args = call.group(1).lower(), [a.strip() for a in call.group(2).split(",")]
    if func in _TIME_TRANSFORMS or func == "identity":
        if len(args) != 1 or not _NAME.match(args[0]):
            raise ConfigurationError(f"partition_by term {term!r}: {func}() takes one column")
        return PartitionField(_column(args[0]), _TIME_TRANSFORMS.get(func, "identity"))
    if func in ("bucket", "truncate"):
        return _width_transform(term, func, args)
    known = ", ".join(sorted({*_TIME_TRANSFORMS, "identity", "bucket", "truncate"}))
    raise ConfigurationError(f"partition_by term {term!r}: unknown transform {func!r} ({known})")


def _width_transform(term: str, func: str, args: list[str]) -> PartitionField:
    """``bucket(16, id)`` or ``bucket(id, 16)`` (both orders are in use), same for truncate."""
    numbers = [a for a in args if a.isdigit()]
    columns = [a for a in args if _NAME.match(a) and not a.isdigit()]
    if len(args) != 2 or len(numbers) != 1 or len(columns) != 1 or int(numbers[0]) < 1:
        raise ConfigurationError(
            f"partition_by term {term!r}: {func}() takes a positive width and one column"
        )
    return PartitionField(_column(columns[0]), f"{func}[{int(numbers[0])}]")


def _column(text: str) -> str:
    match = _NAME.match(text.strip())
    assert match is not None
    return match.group(1)


def parse_sort(term: str) -> SortField:
    """``ts``, ``ts DESC``, ``day(ts) ASC NULLS FIRST``... as a sort field."""
    match = _SORT.match(term)
    if not match:
        raise ConfigurationError(f"sort_by term {term!r} is not `<column> [ASC|DESC] [NULLS ...]`")
    field_ = parse_partition(match.group("expr"))
    descending = (match.group("dir") or "ASC").upper() == "DESC"
    nulls = match.group("nulls")
    # Iceberg's and Spark's default: nulls first ascending, last descending.
    nulls_first = (nulls.upper() == "FIRST") if nulls else not descending
    return SortField(field_.column, field_.transform, descending, nulls_first)


@dataclass(frozen=True)
class TableLayout:
    """What a managed table is created with, besides its schema (see the module docstring)."""

    partition_by: tuple[PartitionField, ...] = ()
    sort_by: tuple[SortField, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(
        cls,
        partition_by: Iterable[str] | str | None = None,
        sort_by: Iterable[str] | str | None = None,
        table_properties: Mapping[str, Any] | None = None,
    ) -> TableLayout:
        """Check the user's spelling (DAG-parse time); a clear error names the bad term."""
        parts = tuple(parse_partition(t) for t in _terms(partition_by, "partition_by"))
        names = [p.name for p in parts]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"partition_by {names} repeats a field")
        sorts = tuple(parse_sort(t) for t in _terms(sort_by, "sort_by"))
        props = {str(k): str(v) for k, v in (table_properties or {}).items()}
        reserved = [k for k in props if k.startswith(RESERVED_PROPERTIES)]
        if reserved:
            raise ConfigurationError(
                f"table_properties {reserved} are managed by airflow-provider-ct and cannot be set"
            )
        return cls(parts, sorts, props)

    def to_json(self) -> dict[str, Any]:
        """The layout as the job spec carries it (the user's terms, re-spelled)."""
        return {
            "partition_by": [f"{p.transform}({p.column})" for p in self.partition_by],
            "sort_by": [
                f"{s.transform}({s.column}) {'DESC' if s.descending else 'ASC'} "
                f"NULLS {'FIRST' if s.nulls_first else 'LAST'}"
                for s in self.sort_by
            ],
            "table_properties": dict(self.properties),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> TableLayout:
        if not value:
            return cls()
        partition = [_respell(t) for t in value.get("partition_by") or ()]
        sort = [_respell(t) for t in value.get("sort_by") or ()]
        return cls.parse(partition, sort, value.get("table_properties"))

    def check(self, schema: Schema, table: str) -> None:
        """Every column the layout names is in ``schema`` (the table's, at creation)."""
        names = {f.name.lower() for f in schema.fields}
        for column in [p.column for p in self.partition_by] + [s.column for s in self.sort_by]:
            if column.lower() not in names:
                raise ConfigurationError(
                    f"partition_by/sort_by of {table} names column {column!r}, which the query "
                    f"does not produce (its columns: {sorted(names)})"
                )

    def apply(self, tx: Transaction, schema: Schema) -> None:
        """Add the partition spec and sort order to a table being created in ``tx``."""
        from pyiceberg.table.sorting import NullOrder
        from pyiceberg.transforms import parse_transform

        by_lower = {f.name.lower(): f.name for f in schema.fields}
        if self.partition_by:
            with tx.update_spec() as spec:
                for part in self.partition_by:
                    column = by_lower[part.column.lower()]
                    spec.add_field(column, parse_transform(part.transform), part.name)
        if self.sort_by:
            with tx.update_sort_order() as order:
                for sort in self.sort_by:
                    nulls = NullOrder.NULLS_FIRST if sort.nulls_first else NullOrder.NULLS_LAST
                    add = order.desc if sort.descending else order.asc
                    add(by_lower[sort.column.lower()], parse_transform(sort.transform), nulls)


def _terms(value: Iterable[str] | str | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    terms = tuple(value)
    if not all(isinstance(t, str) for t in terms):
        raise ConfigurationError(f"{what} takes strings such as 'day(ts)', got {terms!r}")
    return terms


def _respell(term: str) -> str:
    """``bucket[16](id)`` (our JSON) back into ``bucket(16, id)``."""
    match = re.match(r"^(\w+)\[(\d+)\]\((\w+)\)(.*)$", term)
    if match:
        return f"{match.group(1)}({match.group(2)}, {match.group(3)}){match.group(4)}"
    return term


#: ``on_schema_change`` modes (see docs/views.md, "Definitions that change").
SCHEMA_CHANGES = ("evolve", "fail", "recreate")


@dataclass(frozen=True)
class TargetSettings:
    """What a job needs to know of its target beyond the description: one JSON field of its spec.

    :param layout: how to create the table (ignored when it exists).
    :param on_schema_change: what to do when the query's columns no longer
        match the table's (``evolve``, ``fail``, ``recreate``).
    """

    layout: TableLayout = field(default_factory=TableLayout)
    on_schema_change: str = "evolve"

    def __post_init__(self) -> None:
        if self.on_schema_change not in SCHEMA_CHANGES:
            raise ConfigurationError(
                f"on_schema_change={self.on_schema_change!r}: expected one of "
                + ", ".join(SCHEMA_CHANGES)
            )

    def to_json(self) -> dict[str, Any]:
        return {"layout": self.layout.to_json(), "on_schema_change": self.on_schema_change}

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> TargetSettings:
        if not value:
            return cls()
        return cls(
            TableLayout.from_json(value.get("layout")),
            str(value.get("on_schema_change") or "evolve"),
        )
