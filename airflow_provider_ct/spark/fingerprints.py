"""What both diff paths share: row fingerprints, the rule for retractions, the result.

A correction is computed either in Spark (:mod:`.correction`) or, for small
sides, on the driver (:mod:`.driver_diff`). The two must agree exactly on
which rows are equal and which copies are retracted, or a tick's result
would depend on its size; so both use the pieces defined once here:

* rows are compared by a 128-bit fingerprint (:func:`with_fingerprint`: two
  differently seeded ``xxhash64`` over every column plus a null mask,
  because Spark's hash skips NULLs: without the mask ``(1, NULL)`` and
  ``(NULL, 1)`` would collide);
* of the copies of a row to retract, the lowest ``(_file, _pos)`` are chosen
  (:func:`pick_retractions`), so a retried tick retracts the same rows;
* the result is a :class:`Correction`.

Neither path imports the other; :mod:`.diff` chooses between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

H1, H2, MULT = "__ct_h1", "__ct_h2", "__ct_m"
#: Salt that makes the second hash independent of the first (Spark's seed is fixed at 42).
SECOND_HASH_SALT = 0x5BD1E9955BD1E995 & 0x7FFFFFFFFFFFFFFF


@dataclass
class Correction:
    """What must change: rows to insert and (file, position) pairs to retract."""

    #: A Spark frame, or an Arrow table when the driver computed the difference.
    inserts: DataFrame | pa.Table
    retractions: list[tuple[str, int]]
    insert_count: int
    retract_count: int
    #: Frees the cached differences once the inserts have been written.
    release: Callable[..., object] | None = None
    #: Where the difference was computed: ``spark`` or ``driver`` (reported).
    diffed_on: str = "spark"
    #: What else the strategy reports (such as the days its reads were restricted to).
    notes: dict[str, Any] = field(default_factory=dict)


def with_fingerprint(df: DataFrame, columns: list[str]) -> DataFrame:
    """``df`` with the columns :data:`H1` and :data:`H2`: the fingerprint of ``columns``.

    The null mask holds one bit per column, 62 columns to a ``long`` (the
    sum stays positive), so a wide table gets several masks.
    """
    from pyspark.sql import functions as F

    kinds = {f.name: f.dataType for f in df.schema.fields}
    cols = [_hashable(F.col(f"`{c}`"), kinds.get(c)) for c in columns]
    masks = []
    for start in range(0, len(columns), 62):
        chunk = columns[start : start + 62]
        mask = F.lit(0).cast("long")
        for bit, name in enumerate(chunk):
            mask = mask + F.when(F.col(f"`{name}`").isNull(), F.lit(1 << bit)).otherwise(F.lit(0))
        masks.append(mask)
    return df.withColumn(H1, F.xxhash64(*cols, *masks)).withColumn(
        H2, F.xxhash64(F.lit(SECOND_HASH_SALT), *cols, *masks)
    )


def _hashable(column: Column, kind: Any) -> Column:
    """``column`` in a form Spark hashes: a map as its entries sorted by key.

    Spark refuses to hash maps (equal maps may hash apart); a map's entries
    sorted by key are the same for equal maps. A map nested in an array or
    a struct is hashed as its JSON text, in its entries' order: two equal
    rows whose maps were built in another order then differ, and the tick
    retracts one and inserts the other, which leaves the same rows.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not isinstance(kind, (T.MapType, T.ArrayType, T.StructType)):
        return column
    nested = kind.simpleString().removeprefix("map<")
    if isinstance(kind, T.MapType) and "map<" not in nested:
        return F.array_sort(F.map_entries(column))
    if "map<" in nested or isinstance(kind, T.MapType):
        return F.to_json(column)
    return column


def pick_retractions(source: DataFrame, unwanted: DataFrame) -> list[tuple[str, int]]:
    """The lowest ``(_file, _pos)`` ``m`` rows of ``source`` per fingerprint of ``unwanted``.

    :param source: rows with fingerprints, ``_file`` and ``_pos``.
    :param unwanted: fingerprints with the count ``m > 0`` of copies to retract.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy(H1, H2).orderBy("_file", "_pos")
    picked = (
        source.join(F.broadcast(unwanted), [H1, H2])
        .withColumn("__ct_rank", F.row_number().over(order))
        .where(F.col("__ct_rank") <= F.col(MULT))
        .select(F.col("_file").alias("file_path"), F.col("_pos").alias("pos"))
    )
    return _collect_positions(picked)


def _collect_positions(df: DataFrame) -> list[tuple[str, int]]:
    """(file_path, pos) pairs to the driver, through Arrow when available (fast)."""
    try:
        frame: Any = df.toPandas()  # Arrow-backed (spark.sql.execution.arrow.pyspark.enabled)
        return list(
            zip(frame["file_path"].tolist(), frame["pos"].astype("int64").tolist(), strict=True)
        )
    except ImportError:  # no pandas on the driver: plain rows
        return [(str(r["file_path"]), int(r["pos"])) for r in df.collect()]
