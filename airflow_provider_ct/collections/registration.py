"""Registering a collection: create the table, adopt the user's, or find ours.

:func:`register` is what :func:`register_collection`
does, and says what that was (a :class:`Registration`: ``created``,
``adopted``, ``registered`` or ``existing``), so that the register operator
can report it and announce an adoption's new upper: a task that wrote
nothing says why. Apart from :mod:`.registry` because adoption
(:mod:`.adoption`) builds on the registry's keys and property commits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.collections.adoption import (
    Adoption,
    adopt_table,
    check_not_owned,
    check_schema_fits,
)
from airflow_provider_ct.collections.registry import (
    CollectionKeys,
    CollectionKind,
    collection_kind,
    deployment_read_only,
    parse_kind,
    set_table_properties,
)
from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.core.layout import TableLayout
from airflow_provider_ct.core.tables import create_managed_table, load_table_or_none
from airflow_provider_ct.core.timeline import is_managed
from airflow_provider_ct.exceptions import NotACollectionError, ReadOnlyError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


#: Registration statuses: what :func:`register` found and did.
CREATED = "created"
ADOPTED = "adopted"
REGISTERED = "registered"
EXISTING = "existing"


@dataclass(frozen=True)
class Registration:
    """What registering a collection did.

    ``created``: the table was created here; ``adopted``: a table without
    our frontier was adopted (``adoption`` says at which time, on which
    snapshot); ``registered``: a managed table became a collection (a
    property commit, no snapshot); ``existing``: it already was this
    collection and nothing was written.
    """

    collection: str
    kind: CollectionKind
    status: str
    table: Table = field(compare=False, repr=False)
    adoption: Adoption | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "kind": self.kind.value,
            "status": self.status,
            "adoption": None if self.adoption is None else self.adoption.to_json(),
        }


def register(
    catalog: Catalog,
    name: str,
    schema: Schema | pa.Schema | None,
    kind: CollectionKind | str,
    *,
    read_only: bool = False,
    location: str | None = None,
    properties: Mapping[str, str] | None = None,
    layout: TableLayout | None = None,
    now: int | None = None,
    deployment_read_only: bool | None = None,
) -> Registration:
    """Create, adopt or find the table ``name`` as a collection of ``kind``; idempotent.

    A missing table is created with ``schema`` and ``layout``. An existing
    one keeps its own layout and properties and must fit ``schema`` when
    one is declared (``None``: take the table as it is); a table without
    our frontier (created with Spark SQL or PyIceberg) is then adopted at
    ``now`` (default the wall clock): its rows are the collection's
    contents at that time (:mod:`.adoption`). A collection of the other
    kind, a table a view or continual task maintains and a schema that does
    not fit are refused before anything is written; so is an adoption in
    read-only mode (``deployment_read_only``, default ``CT_READ_ONLY``).
    """
    wanted = parse_kind(kind)
    props = {CollectionKeys.KIND: wanted.value, **dict(properties or {})}
    if read_only:
        props[CollectionKeys.READ_ONLY] = "true"
    table = _load_existing(catalog, name)
    if table is None:
        if schema is None:
            raise NotACollectionError(
                f"collection {name} does not exist; declare its schema to create it"
            )
        table = create_managed_table(
            catalog, name, schema, location=location, properties=props, layout=layout
        )
        # Checked like any existing table: another process may have created it first.
        found = _register_existing(table, name, schema, wanted, props, now, deployment_read_only)
        return replace(found, status=CREATED) if found.status == EXISTING else found
    if layout is not None and layout != TableLayout():
        log.warning("%s exists: it keeps its own layout (the layout given is not applied)", name)
    return _register_existing(table, name, schema, wanted, props, now, deployment_read_only)


def _load_existing(catalog: Catalog, name: str) -> Table | None:
    return load_table_or_none(catalog, name)  # type: ignore[no-any-return]


def _register_existing(
    table: Table,
    name: str,
    schema: Schema | pa.Schema | None,
    wanted: CollectionKind,
    props: Mapping[str, str],
    now: int | None,
    read_only_mode: bool | None,
) -> Registration:
    """Register a table that exists: check it, adopt it if it has no frontier, mark its kind."""
    current = collection_kind(table)
    if current is not None and current != wanted:
        raise NotACollectionError(
            f"table {name} is already a {current.value} collection, not {wanted.value}"
        )
    check_not_owned(table)
    if schema is not None:
        check_schema_fits(table, schema)
    adoption = None
    if not is_managed(table.metadata):
        if deployment_read_only() if read_only_mode is None else read_only_mode:
            raise ReadOnlyError(
                f"table {name} has no frontier of ours: adopting it as a collection is a commit, "
                "and the deployment is read-only. Nothing was written; register it again once "
                "writes are allowed"
            )
        adoption = adopt_table(table, now=now_ms() if now is None else now)
    if current is None:
        set_table_properties(table, props)
        log.info("registered %s as a %s collection", name, wanted.value)
    if adoption is not None:
        return Registration(name, wanted, ADOPTED, table, adoption)
    status = REGISTERED if current is None else EXISTING
    if status == EXISTING:
        log.info("%s is a %s collection: nothing to register", name, wanted.value)
    return Registration(name, wanted, status, table)


def register_collection(
    catalog: Catalog,
    name: str,
    schema: Schema | pa.Schema | None,
    kind: CollectionKind | str,
    *,
    read_only: bool = False,
    location: str | None = None,
    properties: Mapping[str, str] | None = None,
    layout: TableLayout | None = None,
    now: int | None = None,
    deployment_read_only: bool | None = None,
) -> Table:
    """Create (or adopt) the table ``name`` as a collection of ``kind``.

    See :func:`register`, which also says what it did.
    """
    return register(
        catalog,
        name,
        schema,
        kind,
        read_only=read_only,
        location=location,
        properties=properties,
        layout=layout,
        now=now,
        deployment_read_only=deployment_read_only,
    ).table
