"""OpenLineage for a tick: pinned inputs, the output's new snapshot, column lineage.

The operators call :func:`tick_lineage` from ``get_openlineage_facets_on_complete``;
everything OpenLineage-specific lives here, imported lazily, so the provider
runs without ``apache-airflow-providers-openlineage`` (the ``openlineage``
extra). Lineage is a report about a tick that already succeeded: any failure
while building it is logged and an empty ``OperatorLineage`` (or ``None``
without the OpenLineage provider) is returned, never raised into the task.

Naming follows OpenLineage's Spark integration for Iceberg tables, so our
events join those of any Spark job reading the same tables: a dataset is named
by the path ``<warehouse>/<namespace.table>`` (``file`` + path, ``s3://bucket``
+ key, ...), its version is the Iceberg snapshot id, and it carries a
``symlinks`` facet with the catalog's table name (``namespace.table``, type
``TABLE``) and a ``catalog`` facet. See docs/lineage.md.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from airflow_provider_ct.core.catalog import CatalogConfig
    from airflow_provider_ct.core.description import BatchDescription

log = logging.getLogger(__name__)

#: Name of our own dataset facet (``ct``) in the events.
CT_FACET = "ct"
#: The ``_schemaURL`` of the ``ct`` facet: its description in docs/lineage.md.
_CT_FACET_SCHEMA = "airflow-provider-ct:docs/lineage.md#the-ct-facet"


@dataclass(frozen=True)
class TableRef:
    """One Iceberg table as lineage names it: catalog name and location."""

    table: str  # namespace.table
    location: str  # ``<warehouse>/<namespace.table>``, as OpenLineage's Spark integration


@dataclass(frozen=True)
class CatalogRef:
    """The catalog the tables live in (no secrets: URIs are stripped of credentials)."""

    name: str
    kind: str
    uri: str
    warehouse: str


@dataclass(frozen=True)
class TickLineage:
    """What one operator knows about a tick, in plain values (no OpenLineage types).

    :param inputs: each input with the snapshot id pinned for the tick (``None``:
        the input was empty at the tick's time).
    :param output: the target.
    :param output_facts: values for the output's ``ct`` facet (batch id, time,
        lower, upper, snapshot ids...); ``snapshotId`` also becomes its version.
    :param column_lineage: output column -> input (table, column) pairs.
    :param rows_inserted: the output statistics' row count, when known.
    """

    catalog: CatalogRef
    inputs: Sequence[tuple[TableRef, int | None]]
    output: TableRef
    output_facts: Mapping[str, Any] = field(default_factory=dict)
    column_lineage: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    rows_inserted: int | None = None


def strip_credentials(uri: str) -> str:
    """``scheme://user:pw@host/x`` -> ``scheme://host/x``: events are not for secrets."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def location_name(location: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a storage location.

    ``file:///w/ns/t`` -> ``("file", "/w/ns/t")``; ``s3://bucket/w/ns/t`` ->
    ``("s3://bucket", "w/ns/t")``; ``hdfs://nn:8020/w`` -> ``("hdfs://nn:8020", "/w")``.
    """
    parts = urlsplit(location)
    if not parts.scheme or parts.scheme == "file":
        return "file", parts.path or location
    authority = f"{parts.scheme}://{parts.hostname or ''}" + (
        f":{parts.port}" if parts.port else ""
    )
    path = parts.path
    if parts.scheme in ("s3", "s3a", "s3n", "gs", "wasbs", "abfss"):
        path = path.lstrip("/")
    return authority, path


def catalog_namespace(catalog: CatalogRef) -> str:
    """The symlink namespace of a catalog's tables: its endpoint, else its warehouse."""
    return strip_credentials(catalog.uri or catalog.warehouse)


def column_lineage(
    sql: str, inputs: Sequence[str], catalog_name: str
) -> dict[str, list[tuple[str, str]]]:
    """Output column -> the input columns it is computed from, as sqlglot traces them.

    Only for a query whose output columns sqlglot can name (no ``*``); a column
    it cannot trace is left out rather than guessed. Without the tables'
    schemas sqlglot resolves unqualified columns only in single-table queries.
    """
    from sqlglot import exp
    from sqlglot.lineage import lineage

    from airflow_provider_ct.core.query import normalize_table_name, parse_query

    parsed = parse_query(sql, catalog_name=catalog_name)
    tree = parsed.expression
    if not isinstance(tree, exp.Select) or any(e.is_star for e in tree.expressions):
        return {}
    result: dict[str, list[tuple[str, str]]] = {}
    for column in tree.named_selects:
        try:
            node = lineage(column, tree, {}, dialect="spark")
        except Exception as exc:  # sqlglot raises several kinds for what it cannot trace
            log.debug("no column lineage for %s: %s", column, exc)
            continue
        sources: list[tuple[str, str]] = []
        for leaf in node.walk():
            if leaf.downstream or not isinstance(leaf.expression, exp.Table):
                continue
            table = leaf.expression
            name = ".".join(p for p in (table.catalog, table.db, table.name) if p)
            try:
                table_name = normalize_table_name(name, catalog_name)
            except Exception:  # a CTE or subquery alias, not a catalog table
                continue
            pair = (table_name, leaf.name.split(".")[-1])
            if table_name in inputs and pair not in sources:
                sources.append(pair)
        if sources:
            result[column] = sources
    return result


@functools.cache
def _ct_facet_class() -> Any:
    """Our ``ct`` dataset facet, defined on first use (OpenLineage is optional)."""
    import attr
    from openlineage.client.generated.base import DatasetFacet

    @attr.define
    class CtDatasetFacet(DatasetFacet):  # type: ignore[misc]
        """Continual-table facts of a dataset in one tick (docs/lineage.md)."""

        table: str
        snapshotId: int | None = attr.field(default=None)
        facts: dict[str, Any] = attr.field(factory=dict)

        @staticmethod
        def _get_schema() -> str:
            return _CT_FACET_SCHEMA

    return CtDatasetFacet


def _dataset(
    kind: Any, catalog: CatalogRef, ref: TableRef, facets: dict[str, Any], **extra: Any
) -> Any:
    """An Input/OutputDataset named by warehouse path, with symlink and catalog facets."""
    from openlineage.client.generated.catalog_dataset import CatalogDatasetFacet
    from openlineage.client.generated.symlinks_dataset import Identifier, SymlinksDatasetFacet

    namespace, name = location_name(ref.location)
    facets = {
        "symlinks": SymlinksDatasetFacet(
            identifiers=[
                Identifier(namespace=catalog_namespace(catalog), name=ref.table, type="TABLE")
            ]
        ),
        "catalog": CatalogDatasetFacet(
            framework="iceberg",
            type=catalog.kind,
            name=catalog.name,
            metadataUri=strip_credentials(catalog.uri) or None,
            warehouseUri=strip_credentials(catalog.warehouse) or None,
            source="airflow-provider-ct",
        ),
        **facets,
    }
    return kind(namespace=namespace, name=name, facets=facets, **extra)


def _versioned(ref: TableRef, snapshot_id: int | None, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The ``version`` and ``ct`` facets of a table at one snapshot."""
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

    facets: dict[str, Any] = {
        CT_FACET: _ct_facet_class()(table=ref.table, snapshotId=snapshot_id, facts=dict(facts))
    }
    if snapshot_id is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(snapshot_id))
    return facets


def _column_lineage_facet(tick: TickLineage) -> Any:
    from openlineage.client.generated.column_lineage_dataset import (
        ColumnLineageDatasetFacet,
        Fields,
        InputField,
    )

    by_table = {ref.table: ref for ref, _ in tick.inputs}
    fields = {}
    for column, sources in tick.column_lineage.items():
        fields[column] = Fields(
            inputFields=[
                InputField(*location_name(by_table[table].location), field=name)
                for table, name in sources
                if table in by_table
            ],
        )
    return ColumnLineageDatasetFacet(fields=fields)


def operator_lineage(tick: TickLineage) -> Any:
    """The provider's ``OperatorLineage`` for one tick (needs the OpenLineage provider)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.generated.base import InputDataset, OutputDataset
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )

    inputs = [
        _dataset(InputDataset, tick.catalog, ref, _versioned(ref, snapshot, {}))
        for ref, snapshot in tick.inputs
    ]
    facets = _versioned(tick.output, tick.output_facts.get("snapshotId"), tick.output_facts)
    if tick.column_lineage:
        facets["columnLineage"] = _column_lineage_facet(tick)
    statistics = {}
    if tick.rows_inserted is not None:
        statistics["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
            rowCount=tick.rows_inserted
        )
    output = _dataset(OutputDataset, tick.catalog, tick.output, facets, outputFacets=statistics)
    return OperatorLineage(inputs=inputs, outputs=[output])


def safe_lineage(what: str, build: Callable[[], TickLineage | None]) -> Any:
    """``operator_lineage(build())``, or empty lineage when anything fails.

    Lineage runs after the tick succeeded; a catalog hiccup or a query sqlglot
    cannot trace must not turn it into a failure. Without the OpenLineage
    provider installed there is nothing to return (``None``), and nothing
    calls this anyway.
    """
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    try:
        tick = build()
        return OperatorLineage() if tick is None else operator_lineage(tick)
    except Exception:  # lineage must never fail the task; the log says why
        log.warning("no OpenLineage facets for %s", what, exc_info=True)
        return OperatorLineage()


def description_facts(description: BatchDescription) -> dict[str, Any]:
    """The ``ct`` facts every operator of a tick knows: batch id, time, lower, upper."""
    return {
        "batchId": description.id,
        "time": description.time,
        "lower": description.lower.to_summary(),
        "upper": description.upper.to_summary(),
        "baseSnapshotId": description.base_snapshot_id,
    }


def describe_tick(
    config: CatalogConfig,
    description: BatchDescription,
    *,
    sql: str | None = None,
    output_facts: Mapping[str, Any] | None = None,
    rows_inserted: int | None = None,
) -> TickLineage:
    """A tick's lineage from its description: inputs at their pinned snapshots.

    ``sql`` (a view's query) adds column lineage where sqlglot traces it; a
    query it cannot trace only loses that facet. Nothing is read from the
    catalog: the names come from its configuration.
    """
    catalog = CatalogRef(config.name, config.kind, config.uri, config.warehouse)
    inputs = [
        (table_ref(catalog, name), snapshot)
        for name, snapshot in sorted(description.inputs.items())
    ]
    columns: dict[str, list[tuple[str, str]]] = {}
    if sql is not None:
        try:
            columns = column_lineage(sql, list(description.inputs), config.name)
        except Exception as exc:  # column lineage is a best effort (see column_lineage)
            log.info("no column lineage for %s: %s", description.target, exc)
    return TickLineage(
        catalog=catalog,
        inputs=inputs,
        output=table_ref(catalog, description.target),
        output_facts={**description_facts(description), **(output_facts or {})},
        column_lineage=columns,
        rows_inserted=rows_inserted,
    )


def table_ref(catalog: CatalogRef, name: str) -> TableRef:
    """A table as OpenLineage's Spark integration names an Iceberg table: warehouse path."""
    warehouse = strip_credentials(catalog.warehouse or catalog.uri).rstrip("/")
    return TableRef(name, f"{warehouse}/{name}")
