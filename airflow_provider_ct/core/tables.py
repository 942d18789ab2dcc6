"""Creating and loading the tables this package manages."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.layout import TableLayout
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Properties every managed table gets. Merge-on-read because corrections are
#: small and spread out (measured here, see docs/views.md); format v2 for position deletes.
MANAGED_TABLE_PROPERTIES: dict[str, str] = {
    TableKeys.MANAGED: "true",
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    # Our commits are compare-and-append: never let a writer rebase them.
    "commit.retry.num-retries": "0",
}


#: A view's in-place aggregate state lives in ``<target>__ct_state`` (``ivm/state/table.py``):
#: a table the product keeps for itself, swept with its view (``collections/maintenance``).
STATE_TABLE_SUFFIX = "__ct_state"


def state_table_name(target: str) -> str:
    """The state table of view ``target`` (same namespace)."""
    return f"{target}{STATE_TABLE_SUFFIX}"


#: A part of a view's query kept apart (``ivm/plan/compose.py``) lives in
#: ``<target>__ct_part_<digest of its SQL>``, in the view's namespace.
PART_TABLE_INFIX = "__ct_part_"


def part_table_name(target: str, digest: str) -> str:
    """The table of the part of view ``target`` whose SQL has ``digest``."""
    return f"{target}{PART_TABLE_INFIX}{digest}"


def is_part_of(name: str, target: str) -> bool:
    """Whether table ``name`` (``namespace.table``) keeps a part of view ``target``'s query
    (a part's own part included), not a state table."""
    lowered = name.lower()
    return lowered.startswith(part_table_name(target, "").lower()) and not lowered.endswith(
        STATE_TABLE_SUFFIX
    )


def part_tables(catalog: Any, target: str) -> list[str]:
    """The tables of view ``target``'s parts (not their own state tables), by name."""
    namespace = target.rpartition(".")[0]
    found = (f"{namespace}.{t[-1]}" for t in catalog.list_tables(namespace))
    return sorted(n for n in found if is_part_of(n, target))


def load_table_or_none(catalog: Any, name: str) -> Any:
    """The table ``name``, or None when it does not exist (before a first tick, an optional
    companion table): the one place a missing table is not an error."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def split_identifier(identifier: str) -> tuple[str, str]:
    """``namespace.table`` -> (namespace, table); refuses anything else."""
    parts = identifier.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigurationError(
            f"table identifier {identifier!r} must be 'namespace.table' (catalog name excluded)"
        )
    return ".".join(parts[:-1]), parts[-1]


def create_managed_table(
    catalog: Catalog,
    identifier: str,
    schema: Schema | pa.Schema,
    *,
    location: str | None = None,
    properties: dict[str, str] | None = None,
    layout: TableLayout | None = None,
) -> Table:
    """Create a managed table, or return it if it already exists.

    The table gets a default name mapping, so Parquet files written without
    Iceberg field ids (e.g. staged by plain Spark) are read by column name.
    ``layout`` (partitioning, sort order, the user's properties) applies to
    a table created here only: one that exists keeps its own.
    """
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

    namespace, _ = split_identifier(identifier)
    _ensure_namespace(catalog, namespace)
    layout = layout or TableLayout()
    props = {**layout.properties, **MANAGED_TABLE_PROPERTIES, **(properties or {})}
    try:
        if catalog.table_exists(identifier):
            raise TableAlreadyExistsError(identifier)
        with catalog.create_table_transaction(
            identifier, schema=schema, location=location, properties=props
        ) as tx:
            created = tx.table_metadata.schema()
            layout.check(created, identifier)
            layout.apply(tx, created)
        table = catalog.load_table(identifier)
        log.info("created managed table %s at %s", identifier, table.location())
    except (TableAlreadyExistsError, CommitFailedException):
        if not catalog.table_exists(identifier):
            raise  # a failed commit of a table that does not exist: not a lost race
        table = catalog.load_table(identifier)  # created concurrently: theirs is ours too
    ensure_name_mapping(table)
    return table


def _ensure_namespace(catalog: Any, namespace: str) -> None:
    """Create ``namespace`` unless it exists, also when another task creates it meanwhile.

    Two tasks registering tables of one new namespace race: the loser's
    insert fails in the catalog's database (the SQL catalog raises its
    driver's integrity error, not ``NamespaceAlreadyExistsError``). A
    namespace that exists afterwards is what both wanted.
    """
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        return
    except Exception:
        if catalog.namespace_exists(namespace):
            log.info("namespace %s was created concurrently", namespace)
            return
        raise


def ensure_name_mapping(table: Table) -> None:
    """Set ``schema.name-mapping.default`` if missing (needed to read id-less Parquet)."""
    from pyiceberg.table import TableProperties

    if TableProperties.DEFAULT_NAME_MAPPING in table.metadata.properties:
        return
    mapping = table.metadata.schema().name_mapping.model_dump_json()
    with table.transaction() as tx:
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})


def iter_tables(
    catalog: Catalog, namespaces: Iterable[tuple[str, ...]]
) -> Iterator[tuple[str, Table]]:
    """``(name, table)`` for every table in ``namespaces``, sorted by name per namespace.

    Namespaces that do not exist (yet) and tables dropped while listing are
    skipped: callers list while other processes create and drop. So are the
    state tables of in-place views (``ivm/state/table.py``).
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    for namespace in namespaces:
        try:
            identifiers = sorted(catalog.list_tables(namespace))
        except NoSuchNamespaceError:
            continue
        for identifier in identifiers:
            try:
                table = catalog.load_table(identifier)
            except NoSuchTableError:
                continue
            if TableKeys.STATE_OF in table.properties:
                continue  # a view's aggregate state: its cache, not a table of the lake
            yield ".".join(identifier), table


#: Rows of a snapshot whose summary lacks the totals: "too many to guess small".
UNKNOWN_ROWS = 1 << 62


def live_rows(table: Table, snapshot_id: int | None) -> int:
    """Rows of ``snapshot_id`` (default: the head) per its summary: records minus deletes.

    An upper bound when equality deletes overlap, :data:`UNKNOWN_ROWS` when a
    writer left the totals out; 0 for a table without snapshots.
    """
    records = _summary_total(table, snapshot_id, "total-records")
    deletes = _summary_total(table, snapshot_id, "total-position-deletes", absent=0)
    if records is None or deletes is None:
        return UNKNOWN_ROWS
    return max(0, records - deletes)


def live_bytes(table: Table, snapshot_id: int | None) -> int:
    """Bytes of ``snapshot_id``'s files (data and deletes) per its summary.

    :data:`UNKNOWN_ROWS` (as a byte count) when the summary lacks the total;
    0 for a table without snapshots.
    """
    size = _summary_total(table, snapshot_id, "total-files-size")
    return UNKNOWN_ROWS if size is None else size


def _summary_total(
    table: Table, snapshot_id: int | None, key: str, absent: int | None = None
) -> int | None:
    """A total of the snapshot's summary; ``absent`` when the key is missing, None if unknown.

    A table without snapshots has 0 of everything; an unknown snapshot or a
    summary that is not a number is unknown.
    """
    snapshot = (
        table.metadata.current_snapshot()
        if snapshot_id is None
        else table.metadata.snapshot_by_id(snapshot_id)
    )
    if snapshot is None:
        return 0 if snapshot_id is None else None
    summary = snapshot.summary
    if summary is None:
        return None
    value = summary.get(key)
    if value is None or value == "":
        return absent
    try:
        return int(str(value))
    except ValueError:
        return None


def table_asset_uri(catalog_name: str, name: str) -> str:
    """The URI naming table ``name`` (``namespace.table``) as an Airflow Asset.

    Here, with no Airflow import, so the UI's status module (which knows
    nothing of Airflow) and ``assets.table_asset`` spell it the same way.
    """
    return f"iceberg://{catalog_name}/{name.replace('.', '/')}"
