"""The view's query over its pinned inputs, bound and analyzed by Spark only when asked.

A write job used to register every input as a temp view (an Iceberg table
load in the job's own session each) and analyze the query before deciding
anything: some 20 ms per tick, which a tick kept in place on the driver
never needed once its types were known. Here the views are registered on
first use (:class:`PinnedViews`), and the query's schema comes from the
driver's analysis cache (:mod:`.analysis_cache`) under the key the in-place
tick uses too: the query, each input's identity and pinned schema, and the
type settings. A miss (a first tick, a ``spark-submit`` job, an input the
catalog cannot load) asks Spark, which then also reports a bad query or a
missing table as before.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.query import INPUT_VIEW_PREFIX, ParsedQuery
from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.spark.ivm.analysis_cache import analysis_key, analyzed
from airflow_provider_ct.spark.ivm.input_changes import read_pinned
from airflow_provider_ct.spark.storable import storable_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


class PinnedViews(Mapping[str, str]):
    """Input name -> the temp view of its pinned snapshot, registered on first lookup."""

    def __init__(
        self,
        spark: SparkSession,
        config: CatalogConfig,
        desc: BatchDescription,
        inputs: tuple[str, ...],
    ) -> None:
        missing = [name for name in inputs if name not in desc.inputs]
        if missing:
            raise CTError(f"description {desc.id} does not pin input {missing[0]}")
        self._spark, self._config, self._desc = spark, config, desc
        self._names = {name: f"{INPUT_VIEW_PREFIX}{i}" for i, name in enumerate(inputs)}
        self._registered = False

    def _views(self) -> dict[str, str]:
        if not self._registered:
            for name, view in self._names.items():
                frame = read_pinned(self._spark, self._config, name, self._desc.inputs[name])
                frame.createOrReplaceTempView(view)
            self._registered = True
        return self._names

    def __getitem__(self, name: str) -> str:
        return self._views()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views())

    def __len__(self) -> int:
        return len(self._names)


class PinnedQuery:
    """The query over ``views``: its frame built once on first use, its schema kept per key."""

    def __init__(
        self,
        spark: SparkSession,
        sql: str,
        parsed: ParsedQuery,
        views: PinnedViews,
        tables: dict[str, Any] | None,
        pins: Mapping[str, int | None],
    ) -> None:
        self._spark, self._parsed, self.views = spark, parsed, views
        #: The inputs' PyIceberg tables (None: one did not load; Spark says why).
        self.tables = tables
        self.key = analysis_key(spark, sql, tables, pins) if tables is not None else None

    @functools.cached_property
    def frame(self) -> DataFrame:
        """The query's rows (Spark binds the inputs and analyzes the query here), in the
        types the target stores (:mod:`.storable`)."""
        return storable_frame(self._spark.sql(self._parsed.pinned_sql(self.views)))

    @property
    def schema(self) -> StructType:
        """The query's columns and Spark types (kept by the driver for its key)."""
        return analyzed(self.key, "query schema", lambda: self.frame.schema)


def input_columns(tables: Mapping[str, Any] | None) -> dict[str, list[str]] | None:
    """Each input's column names (its current schema), for the planner to place bare columns."""
    if tables is None:
        return None
    return {name: [f.name for f in t.schema().fields] for name, t in tables.items()}


def input_tables(catalog: Any, names: tuple[str, ...]) -> dict[str, Any] | None:
    """Each input's PyIceberg table, or None if one does not load (Spark then reports it)."""
    try:
        return {name: catalog.load_table(name) for name in names}
    except Exception:
        return None
