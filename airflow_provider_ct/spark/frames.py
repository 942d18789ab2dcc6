"""Arrow tables into Spark DataFrames, exactly and fast: through one Parquet file.

PySpark 3.5 has no ``createDataFrame(pyarrow.Table)``. The ways it has were
measured here for 10^6 rows of (bigint, string, nullable int, decimal(18,2),
date, timestamp, boolean), local[2] Spark with a 1 GB driver heap, on a busy
2-core machine (so the absolute times are loose, their order is not):

* a list of Python rows: exact, but a Python object per value (not tried at
  this size: minutes);
* ``createDataFrame`` of a pandas frame with ``ArrowDtype`` columns and Arrow
  enabled: exact in this test, 52 s;
* the Arrow batches handed to the JVM like PySpark's pandas path does
  internally (``_serialize_to_jvm`` + ``PythonSQLUtils.toDataFrame``): 80 s,
  and the driver ran out of heap on a second run (the rows live in the
  driver's JVM as a parallelized collection);
* writing the Arrow table as one Parquet file and ``spark.read.parquet`` with
  the schema: 17 s, exact, and no copy of the rows in the driver's JVM.

Parquet it is: Arrow and Spark agree on its types exactly (INT64/INT32 with
NULLs, DECIMAL, DATE, TIMESTAMP(MICROS) with ``isAdjustedToUTC`` for Spark's
``timestamp`` and without for ``timestamp_ntz``).
"""

from __future__ import annotations

import atexit
import logging
import posixpath
import shutil
import tempfile
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_ct.exceptions import SchemaMismatchError

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def changes_to_spark(
    spark: SparkSession,
    changes_table: pa.Table,
    schema: StructType,
    *,
    folder: str | None = None,
    io: FileIO | None = None,
) -> DataFrame:
    """A DataFrame with ``schema`` holding exactly the rows of ``changes_table``.

    Columns are matched by position and renamed to ``schema``'s names; each is
    cast to the Arrow type Spark uses for its Spark type (a safe cast: a value
    that does not fit raises :class:`SchemaMismatchError` instead of changing).

    The rows are written as one Parquet file into ``folder`` and read back
    lazily, so the file must stay until the DataFrame is no longer used: the
    caller owns ``folder`` and removes the file (its path is the DataFrame's
    only input file, ``df.inputFiles()``). Without a ``folder`` a local
    temporary folder is used and removed when the Python process exits: that
    works in local mode only. In cluster mode the executors read the file, so
    ``folder`` must be on storage they can read (e.g. a folder under the
    table's location, written with the table's ``io``), with a URI scheme
    Spark's Hadoop file systems know.
    """
    arrow = _to_spark_arrow(changes_table, schema)
    if folder is None:
        folder = tempfile.mkdtemp(prefix="ct-changes-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = posixpath.join(folder.rstrip("/"), f"changes-{uuid.uuid4().hex}.parquet")
    if io is not None:
        with io.new_output(path).create(overwrite=True) as out:
            pq.write_table(arrow, out)
    else:
        pq.write_table(arrow, path)
    log.debug("%d changed rows staged for Spark in %s", arrow.num_rows, path)
    return spark.read.schema(schema).parquet(path)


def _to_spark_arrow(table: pa.Table, schema: StructType) -> pa.Table:
    """``table`` renamed to ``schema``'s names and cast to the Arrow types Spark expects."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if table.num_columns != len(schema.fields):
        raise SchemaMismatchError(
            f"the Arrow table has {table.num_columns} columns {table.column_names}, the Spark "
            f"schema {len(schema.fields)} {schema.fieldNames()}"
        )
    target = to_arrow_schema(schema)
    renamed = table.rename_columns(schema.fieldNames())
    try:
        return renamed.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(
            f"the Arrow table's types {table.schema.types} do not convert exactly to the Spark "
            f"schema {schema.simpleString()}: {exc}"
        ) from None
