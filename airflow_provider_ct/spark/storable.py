"""The query's columns as an Iceberg table stores them: the one mapping from Spark's types.

Iceberg has no 8- or 16-bit integers and no fixed-width strings: a table
created from a query whose ``GROUPING(a) + GROUPING(b)`` is ``tinyint``
(TPC-DS q70, q86), or which casts to ``SMALLINT`` or ``CHAR(2)``, stores an
``int`` or a ``string``, and Spark reads it back as such. The query's rows
are therefore cast to the stored types once, where the query's frame is
built, so that every side of a tick (the created table's schema, the schema
check, the correction's fingerprints, the driver's typed values) sees the
same types and the product never refuses a table it created itself.

Types Iceberg cannot store at all (``NULL`` without a type, intervals) are
refused with the column's name and the cast to write, before any table is
created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_ct.exceptions import QueryError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType


def storable_type(kind: DataType, column: str) -> DataType:
    """``kind`` as an Iceberg table stores it (nested types mapped inside)."""
    from pyspark.sql import types as T

    if isinstance(kind, (T.ByteType, T.ShortType)):
        return T.IntegerType()
    if isinstance(kind, (T.CharType, T.VarcharType)):
        return T.StringType()
    if isinstance(kind, T.ArrayType):
        return T.ArrayType(storable_type(kind.elementType, column), kind.containsNull)
    if isinstance(kind, T.MapType):
        return T.MapType(
            storable_type(kind.keyType, column),
            storable_type(kind.valueType, column),
            kind.valueContainsNull,
        )
    if isinstance(kind, T.StructType):
        return T.StructType(
            [
                T.StructField(f.name, storable_type(f.dataType, f"{column}.{f.name}"), f.nullable)
                for f in kind.fields
            ]
        )
    if isinstance(kind, _unstorable()):
        raise QueryError(
            f"column {column} is of type {kind.simpleString()}, which an Iceberg table cannot "
            "store: cast it in the query (a NULL to the type it stands for, an interval to a "
            "number of seconds or days)"
        )
    return kind


def _unstorable() -> tuple[type, ...]:
    from pyspark.sql import types as T

    return (T.NullType, T.AnsiIntervalType)


def storable_schema(schema: StructType) -> StructType:
    """``schema`` with every column's type as the table stores it."""
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField(f.name, storable_type(f.dataType, f.name), f.nullable) for f in schema]
    )


def storable_frame(frame: DataFrame) -> DataFrame:
    """``frame`` with the columns whose type a table stores otherwise cast to that type.

    The frame itself when every column is stored as it is (no projection added).
    """
    from pyspark.sql import functions as F

    fields = frame.schema.fields
    if len({f.name.lower() for f in fields}) != len(fields):
        return frame  # duplicate names: the target's check refuses them by name
    wanted = storable_schema(frame.schema).fields
    if all(f.dataType == w.dataType for f, w in zip(fields, wanted, strict=True)):
        return frame
    return frame.select(
        *[
            F.col(f"`{f.name}`")
            if f.dataType == w.dataType
            else F.col(f"`{f.name}`").cast(w.dataType).alias(f.name)
            for f, w in zip(fields, wanted, strict=True)
        ]
    )
