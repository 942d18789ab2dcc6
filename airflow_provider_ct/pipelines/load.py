"""A pipeline folder read, checked and resolved against its catalog (the DAG and the dry run).

One owner for "is this folder a pipeline we can run": the DAG builder calls
it at DAG-parse time (a broken folder is an import error naming file and
line) and the dry run calls it from the command line, so both refuse the
same folders with the same messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.operators._common import catalog_name_of
from airflow_provider_ct.pipelines.graph import Pipeline, build_pipeline
from airflow_provider_ct.pipelines.resolve import Columns, Resolved, resolve, spark_type
from airflow_provider_ct.pipelines.spec import PipelineSpec, load_spec


@dataclass(frozen=True)
class LoadedPipeline:
    spec: PipelineSpec
    pipeline: Pipeline
    resolved: dict[str, Resolved]
    iceberg_conn_id: str

    @property
    def catalog(self) -> str:
        return self.pipeline.catalog


def conn_id_of(spec: PipelineSpec, iceberg_conn_id: str | None) -> str:
    """The catalog connection: the argument, else the spec's ``airflow.iceberg_conn_id``."""
    return str(
        iceberg_conn_id
        or spec.airflow.get("iceberg_conn_id")
        or IcebergCatalogHook.default_conn_name
    )


def catalog_columns(hook: IcebergCatalogHook) -> Callable[[str], Columns | None]:
    """A lookup of a table's columns (Spark SQL types) in the catalog; None: no such table."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    def columns(name: str) -> Columns | None:
        try:
            table = hook.get_catalog().load_table(name)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        return {f.name.lower(): spark_type(f.field_type) for f in table.schema().fields}

    return columns


def load_pipeline(
    folder: str | Path, *, iceberg_conn_id: str | None = None, catalog_name: str | None = None
) -> LoadedPipeline:
    """Read the folder, build its graph, and resolve every name against the catalog.

    Reads the catalog (each external input's schema); writes nothing.
    """
    spec = load_spec(folder)
    conn_id = conn_id_of(spec, iceberg_conn_id)
    catalog = catalog_name or spec.catalog or catalog_name_of(conn_id)
    pipeline = build_pipeline(spec, catalog)
    resolved = resolve(pipeline, catalog_columns(IcebergCatalogHook(conn_id)))
    return LoadedPipeline(spec, pipeline, resolved, conn_id)
