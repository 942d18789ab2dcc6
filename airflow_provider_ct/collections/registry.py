"""Which tables are managed collections, of what kind, and whether they may be written.

The registry is the tables themselves: a collection is a managed table
(:func:`~airflow_provider_ct.core.tables.create_managed_table`) whose table
property ``ct.collection.kind`` says ``append-only`` or ``differential``.
Read-only mode for one collection is the property
``ct.collection.read-only=true``; for the whole deployment it is the
``CT_READ_ONLY`` environment variable (the switch the view operators read).

Why table properties and not a registry document of our own (see
docs/collections.md): a property commit is atomic in every Iceberg catalog,
travels with the table (dropping the table unregisters it), needs no second
store with its own concurrency story, and any engine can see it with
``SHOW TBLPROPERTIES``. The price is that listing collections loads every
table of the namespaces searched; ticks take a ``namespaces`` argument to keep
that small.
"""

from __future__ import annotations

import enum
import logging
import random
import time as _time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.settings import TRUE_VALUES, read_only
from airflow_provider_ct.core.tables import iter_tables
from airflow_provider_ct.core.timeline import Timeline, is_managed
from airflow_provider_ct.exceptions import (
    CollectionError,
    CommitError,
    NotACollectionError,
    ReadOnlyError,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


class CollectionKeys:
    """Table properties and snapshot-summary keys of managed collections."""

    #: Table property: ``append-only`` or ``differential``.
    KIND = TableKeys.COLLECTION_KIND
    #: Table property: ``true`` makes this one collection read-only.
    READ_ONLY = "ct.collection.read-only"
    #: Table property prefix: ``ct.read-hold.<reader>`` is one reader's hold
    #: on this table (see :mod:`.holds`).
    READ_HOLD_PREFIX = "ct.read-hold."
    #: Table property written by snapshot expiry: the earliest time whose
    #: contents are still readable (epoch ms).
    SINCE = "ct.since"
    #: Snapshot-summary key on maintenance snapshots (``compaction``).
    MAINTENANCE = "ct.maintenance"
    #: Snapshot-summary key of an adoption (:mod:`.adoption`): the id of the
    #: snapshot whose contents were adopted, or ``none`` for an empty table.
    ADOPTED = "ct.collection.adopted"


class CollectionKind(enum.StrEnum):
    """The two kinds of storage-managed collections (docs/collections.md)."""

    #: Only blind writes: rows with diffs that land at any time >= the upper.
    APPEND_ONLY = "append-only"
    #: Contents mirror a small desired state; corrected to match it.
    DIFFERENTIAL = "differential"


def parse_kind(kind: Any) -> CollectionKind:
    """A collection kind from its spelling; anything else is refused naming the kinds."""
    try:
        return CollectionKind(kind)
    except ValueError:
        raise CollectionError(
            f"collection kind {kind!r:.100} is not one of {[k.value for k in CollectionKind]}"
        ) from None


def deployment_read_only(environ: Mapping[str, str] | None = None) -> bool:
    """True when the ``CT_READ_ONLY`` environment variable switches the deployment off."""
    return read_only(environ)


def collection_kind(table: Table) -> CollectionKind | None:
    """The kind a table is registered as, or ``None`` for any other table."""
    value = table.metadata.properties.get(CollectionKeys.KIND)
    if value is None:
        return None
    try:
        return CollectionKind(value)
    except ValueError:
        raise NotACollectionError(
            f"table {'.'.join(table.name())} has {CollectionKeys.KIND}={value!r}; expected one "
            f"of {[k.value for k in CollectionKind]}"
        ) from None


def collection_read_only(table: Table) -> bool:
    """True when this one collection is switched to read-only (its table property)."""
    return table.metadata.properties.get(CollectionKeys.READ_ONLY, "").lower() in TRUE_VALUES


def is_read_only(table: Table, deployment: bool | None = None) -> bool:
    """Whether writes to ``table`` are off: the deployment's switch or the collection's.

    :param deployment: the deployment's mode; ``None`` reads ``CT_READ_ONLY``.
    """
    mode = deployment_read_only() if deployment is None else deployment
    return mode or collection_read_only(table)


@dataclass(frozen=True)
class CollectionInfo:
    """A registered collection as the registry sees it."""

    name: str
    kind: CollectionKind
    read_only: bool
    table: Table = field(compare=False, repr=False)

    def timeline(self) -> Timeline:
        return Timeline.of(self.table)


def table_name(table: Table) -> str:
    """``namespace.table`` of a loaded table (without the catalog name)."""
    return ".".join(table.name())


def load_collection(catalog: Catalog, name: str, kind: CollectionKind | None = None) -> Table:
    """Load a registered collection, refusing other tables with a clear error."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = catalog.load_table(name)
    except NoSuchTableError:
        raise NotACollectionError(f"collection {name} does not exist") from None
    current = collection_kind(table)
    if current is None:
        raise NotACollectionError(
            f"table {name} is not a registered collection (no {CollectionKeys.KIND} property); "
            "register it with register_collection()"
        )
    if kind is not None and current != kind:
        raise NotACollectionError(f"{name} is a {current.value} collection, not {kind.value}")
    if not is_managed(table.metadata):
        # Marked by hand (the property set with Spark or PyIceberg): writing it
        # would meet an external table whose upper is the wall clock.
        raise NotACollectionError(
            f"table {name} has {CollectionKeys.KIND}={current.value} but no frontier of ours "
            "yet (the property was set outside register_collection()): nothing was written. "
            "register_collection() adopts it, and so does the next tick of the collections"
        )
    return table


def _explicit_namespaces(catalog: Catalog, roots: Iterable[str]) -> list[tuple[str, ...]]:
    """Namespaces a caller named, each of which must exist.

    A typo (``opz`` for ``ops``) would otherwise tick or maintain nothing and
    report success; a plain string would be iterated as one-letter namespaces.
    """
    if isinstance(roots, str | bytes):
        raise CollectionError(f"namespaces must be a list of names, got the string {roots!r:.100}")
    out: list[tuple[str, ...]] = []
    for root in roots:
        parts = tuple(root.split(".")) if isinstance(root, str) else ()
        if not parts or not all(p.strip() for p in parts):
            raise CollectionError(f"namespace {root!r:.100} is not a namespace name")
        if not catalog.namespace_exists(parts):
            known = sorted(".".join(n) for n in catalog.list_namespaces())
            raise CollectionError(
                f"namespace {root!r} does not exist in the catalog; its namespaces are {known}"
            )
        if parts not in out:  # naming one twice must not tick it twice
            out.append(parts)
    return out


def _namespaces(catalog: Catalog, roots: Iterable[str] | None) -> list[tuple[str, ...]]:
    if roots is not None:
        return _explicit_namespaces(catalog, roots)
    found: list[tuple[str, ...]] = []
    pending: list[tuple[str, ...]] = [tuple(n) for n in catalog.list_namespaces()]
    while pending:
        namespace = pending.pop(0)
        if namespace in found:
            continue
        found.append(namespace)
        try:
            children = [tuple(n) for n in catalog.list_namespaces(namespace)]
        except Exception:  # catalogs without nested namespaces refuse the question
            children = []
        pending += [c for c in children if c != namespace and c not in found]
    return found


def list_collections(
    catalog: Catalog,
    namespaces: Iterable[str] | None = None,
    *,
    deployment_read_only: bool | None = None,
) -> list[CollectionInfo]:
    """Every registered collection in ``namespaces`` (default: all), sorted by name.

    A namespace named in ``namespaces`` must exist and hold at least one
    registered collection, else :class:`CollectionError` names it: a tick or
    maintenance over a mistyped namespace would otherwise do nothing and
    succeed. Without ``namespaces`` every namespace is searched, and finding
    no collection is fine.
    """
    out: list[CollectionInfo] = []
    for namespace in _namespaces(catalog, namespaces):
        found = _collections_in(catalog, namespace, deployment_read_only)
        if namespaces is not None and not found:
            raise CollectionError(
                f"namespace {'.'.join(namespace)!r} holds no registered collection; "
                "register one with register_collection(), or drop the namespace from the list"
            )
        out += found
    return sorted(out, key=lambda c: c.name)


def _collections_in(
    catalog: Catalog, namespace: tuple[str, ...], deployment_read_only: bool | None
) -> list[CollectionInfo]:
    out: list[CollectionInfo] = []
    for name, table in iter_tables(catalog, [namespace]):
        try:
            kind = collection_kind(table)
        except NotACollectionError as exc:
            log.warning("skipping %s: %s", name, exc)
            continue
        if kind is not None:
            out.append(CollectionInfo(name, kind, is_read_only(table, deployment_read_only), table))
    return out


def set_read_only(catalog: Catalog, name: str, read_only: bool) -> None:
    """Switch one collection's read-only mode (a table property, effective for every process)."""
    table = load_collection(catalog, name)
    if read_only:
        set_table_properties(table, {CollectionKeys.READ_ONLY: "true"})
    else:
        set_table_properties(table, removals=[CollectionKeys.READ_ONLY])
    log.info("collection %s is now %s", name, "read-only" if read_only else "writable")


def close_collection(
    catalog: Catalog,
    name: str,
    *,
    read_only: bool | None = None,
    max_attempts: int = 50,
) -> Frontier:
    """Close a collection: its upper becomes the empty frontier, for good.

    Every time is then sealed; blind and differential writes are refused with
    :class:`~airflow_provider_ct.exceptions.CollectionClosedError`, ticks skip
    it. Contention only means another writer got in first: we retry at the
    new upper. Closing is a write, so read-only mode refuses it.
    """
    table = load_collection(catalog, name)
    for attempt in range(1, max_attempts + 1):
        table.refresh()
        if is_read_only(table, read_only):
            raise ReadOnlyError(f"collection {name} is read-only: cannot close it")
        upper = Timeline.of(table).upper
        if upper.is_empty:
            return upper
        result = compare_and_append(
            table,
            expected_upper=upper,
            new_upper=Frontier.empty(),
            batch_id=f"close-{uuid.uuid4().hex}",
        )
        if result.landed:
            log.info("closed collection %s (upper was %s)", name, upper.to_summary())
            return result.upper
        backoff(attempt)
    raise CommitError(f"could not close {name} in {max_attempts} attempts (constant contention)")


def backoff(attempt: int, *, base_s: float = 0.005, cap_s: float = 0.5) -> None:
    """Sleep a jittered, growing while before retrying after contention."""
    _time.sleep(random.uniform(0, min(cap_s, base_s * 2 ** min(attempt, 10))))


def set_table_properties(
    table: Table,
    updates: Mapping[str, str] | None = None,
    removals: Sequence[str] = (),
    *,
    attempts: int = 20,
) -> None:
    """Set and remove table properties in one catalog commit, retrying on contention.

    The commit asserts only the table's identity, not ``main``: properties are
    independent of the data, and catalogs apply property updates to the
    current metadata, so concurrent changes of other keys are kept. A commit
    that collides with another (the catalog's optimistic check) is retried.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import (
        AssertTableUUID,
        RemovePropertiesUpdate,
        SetPropertiesUpdate,
    )

    for attempt in range(1, attempts + 1):
        table.refresh()
        current = table.metadata.properties
        changes: list[SetPropertiesUpdate | RemovePropertiesUpdate] = []
        wanted = {k: v for k, v in (updates or {}).items() if current.get(k) != v}
        if wanted:
            changes.append(SetPropertiesUpdate(updates=wanted))
        present = [k for k in removals if k in current]
        if present:
            changes.append(RemovePropertiesUpdate(removals=present))
        if not changes:
            return
        try:
            table.catalog.commit_table(
                table, (AssertTableUUID(uuid=table.metadata.table_uuid),), tuple(changes)
            )
        except CommitFailedException:
            backoff(attempt)
            continue
        table.refresh()
        return
    raise CommitError(
        f"could not update properties of {table_name(table)} in {attempts} attempts (contention)"
    )
