"""The correction: ``desired - persisted`` as a multiset, computed in Spark.

Rows are compared by a 128-bit fingerprint (two differently seeded
``xxhash64`` over every column plus a null mask, because Spark's hash skips
NULLs: without the mask ``(1, NULL)`` and ``(NULL, 1)`` would collide).

One signed aggregation over the union of fingerprints (desired +1,
persisted -1, grouped by fingerprint, sums != 0) finds every difference with
a single shuffle of 16-byte keys; full rows are pulled only for differing
fingerprints afterwards. Carrying rows or ``_file`` strings through the
aggregation would multiply the shuffle (measured here; see docs/views.md).

* ``m > 0``: insert ``m`` copies of that row (taken from the desired side);
* ``m < 0``: retract ``|m|`` copies, chosen deterministically (lowest
  ``(_file, _pos)``) from the persisted side, as position deletes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_ct.exceptions import IncrementalMismatchError, SchemaMismatchError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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


def check_schema(desired: DataFrame, target: DataFrame, target_name: str) -> None:
    """Refuse a query whose columns no longer match the target's (nullability aside)."""
    want = [(f.name.lower(), f.dataType.simpleString()) for f in target.schema.fields]
    got = [(f.name.lower(), f.dataType.simpleString()) for f in desired.schema.fields]
    if want == got:
        return
    problems = []
    want_d, got_d = dict(want), dict(got)
    for name in got_d.keys() - want_d.keys():
        problems.append(f"query has new column {name} ({got_d[name]})")
    for name in want_d.keys() - got_d.keys():
        problems.append(f"query lacks column {name} ({want_d[name]})")
    for name in want_d.keys() & got_d.keys():
        if want_d[name] != got_d[name]:
            problems.append(
                f"column {name} is {got_d[name]} in the query, {want_d[name]} in the table"
            )
    if not problems:
        problems.append(
            f"column order differs: query {[n for n, _ in got]}, table {[n for n, _ in want]}"
        )
    raise SchemaMismatchError(
        f"the query's schema no longer matches table {target_name}: "
        + "; ".join(sorted(problems))
        + ". The table was left untouched; migrate it explicitly."
    )


def with_fingerprint(df: DataFrame, columns: list[str]) -> DataFrame:
    from pyspark.sql import functions as F

    cols = [F.col(f"`{c}`") for c in columns]
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


def compute_correction(
    desired: DataFrame,
    persisted: DataFrame | None,
    columns: list[str],
    *,
    located: DataFrame | None = None,
    on_driver: bool = False,
    driver_limit: int | None = None,
) -> Correction:
    """Compare ``desired`` with ``persisted`` (read with ``_file`` and ``_pos``).

    The differing fingerprints stay in the JVM (persisted once, broadcast
    into the two pulls); only their total counts and the retracted
    positions (via Arrow) come back to Python.

    :param located: where retracted rows are found (with ``_file``, ``_pos``)
        when ``persisted`` is not the target itself: an incremental tick
        compares the rows its inputs' changes add with those they remove,
        and retracts the latter from the target's head. Every retracted row
        must be found there, else :class:`IncrementalMismatchError`.
    :param on_driver: diff on the driver when both sides are small (see
        :mod:`.driver_diff`); ``inserts`` is then an Arrow table.
    :param driver_limit: rows per side the driver diffs (default: ``rows_on_driver()``).
    """
    if on_driver:
        from airflow_provider_ct.spark.driver_diff import driver_correction

        small = driver_correction(desired, persisted, columns, located=located, limit=driver_limit)
        if small is not None:
            return small
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    select = [F.col(f"`{c}`") for c in columns]
    desired_fp = with_fingerprint(desired.select(*select), columns)
    signed = desired_fp.select(H1, H2, F.lit(1).alias(MULT))
    persisted_fp = None
    if persisted is not None:
        persisted_fp = with_fingerprint(persisted, columns)
        signed = signed.unionByName(persisted_fp.select(H1, H2, F.lit(-1).alias(MULT)))
    diff = (
        signed.groupBy(H1, H2)
        .agg(F.sum(MULT).alias(MULT))
        .where(F.col(MULT) != 0)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    totals = diff.agg(
        F.coalesce(F.sum(F.when(F.col(MULT) > 0, F.col(MULT))), F.lit(0)).alias("ins"),
        F.coalesce(F.sum(F.when(F.col(MULT) < 0, -F.col(MULT))), F.lit(0)).alias("ret"),
    ).collect()[0]
    insert_count, retract_count = int(totals["ins"]), int(totals["ret"])

    if insert_count:
        wanted = F.broadcast(diff.where(F.col(MULT) > 0))
        inserts = (
            desired_fp.join(wanted, [H1, H2])
            .dropDuplicates([H1, H2])
            .withColumn("__ct_copy", F.explode(F.sequence(F.lit(1), F.col(MULT))))
            .select(*select)
        )
    else:
        inserts = desired.select(*select).limit(0)

    retractions: list[tuple[str, int]] = []
    source = persisted_fp if located is None else with_fingerprint(located, columns)
    if retract_count and source is not None:
        unwanted = diff.where(F.col(MULT) < 0).withColumn(MULT, -F.col(MULT))
        retractions = pick_retractions(source, unwanted)
        if len(retractions) != retract_count:
            diff.unpersist()
            raise IncrementalMismatchError(
                f"{retract_count} rows to retract, {len(retractions)} found in the target"
            )
    return Correction(
        inserts=inserts,
        retractions=retractions,
        insert_count=insert_count,
        retract_count=retract_count,
        release=diff.unpersist,
    )


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


def correction_difference(
    full: Correction, other: Correction, persisted: DataFrame, columns: list[str]
) -> int:
    """How many rows ``other`` would have left wrong where ``full`` is right.

    Each correction's net effect is its inserted rows minus the rows at its
    retracted positions; the answer is the size of the multiset difference
    of the two effects (0 when the incremental tick was exact).
    """
    from pyspark.sql import functions as F

    spark = persisted.sparkSession
    select = [F.col(f"`{c}`") for c in columns]
    schema = "file_path string, pos long"

    def retracted(correction: Correction) -> DataFrame:
        at = spark.createDataFrame(correction.retractions or [], schema)
        on = (persisted["_file"] == at["file_path"]) & (persisted["_pos"] == at["pos"])
        return persisted.join(F.broadcast(at), on, "left_semi").select(*select)

    def signed(frame: DataFrame, sign: int) -> DataFrame:
        return with_fingerprint(frame.select(*select), columns).select(
            H1, H2, F.lit(sign).alias(MULT)
        )

    parts = [
        signed(full.inserts, 1),
        signed(retracted(full), -1),
        signed(other.inserts, -1),
        signed(retracted(other), 1),
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    total = (
        union.groupBy(H1, H2)
        .agg(F.sum(MULT).alias(MULT))
        .agg(F.coalesce(F.sum(F.abs(F.col(MULT))), F.lit(0)).alias("n"))
        .collect()[0]["n"]
    )
    return int(total)
