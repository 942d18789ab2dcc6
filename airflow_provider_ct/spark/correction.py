"""The correction in Spark: ``desired - persisted`` as a multiset, for any size.

Rows are compared by their fingerprints (:mod:`.fingerprints`). One signed
aggregation over the union of fingerprints (desired +1, persisted -1,
grouped by fingerprint, sums != 0) finds every difference with a single
shuffle of 16-byte keys; full rows are pulled only for differing
fingerprints afterwards. Carrying rows or ``_file`` strings through the
aggregation would multiply the shuffle (measured here; see docs/views.md).

* ``m > 0``: insert ``m`` copies of that row (taken from the desired side);
* ``m < 0``: retract ``|m|`` copies, chosen deterministically (lowest
  ``(_file, _pos)``) from the persisted side, as position deletes.

Small sides are diffed on the driver instead (:mod:`.driver_diff`); callers
go through :func:`~.diff.compute_correction`, which chooses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_ct.exceptions import IncrementalMismatchError, SchemaMismatchError
from airflow_provider_ct.spark.fingerprints import (
    H1,
    H2,
    MULT,
    Correction,
    pick_retractions,
    with_fingerprint,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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


def spark_correction(
    desired: DataFrame,
    persisted: DataFrame | None,
    columns: list[str],
    *,
    located: DataFrame | None = None,
) -> Correction:
    """Compare ``desired`` with ``persisted`` (read with ``_file`` and ``_pos``) in Spark.

    The differing fingerprints stay in the JVM (persisted once, broadcast
    into the two pulls); only their total counts and the retracted
    positions (via Arrow) come back to Python. The correction's ``release``
    unpersists them once the inserts are written.

    :param located: where retracted rows are found (with ``_file``, ``_pos``)
        when ``persisted`` is not the target itself (see
        :func:`~.diff.compute_correction`).
    """
    select = _select(columns)
    desired_fp = with_fingerprint(desired.select(*select), columns)
    persisted_fp = None if persisted is None else with_fingerprint(persisted, columns)
    diff = _signed_diff(desired_fp, persisted_fp)
    insert_count, retract_count = _totals(diff)
    inserts = _inserts(desired, desired_fp, diff, columns, insert_count)
    retractions: list[tuple[str, int]] = []
    source = persisted_fp if located is None else with_fingerprint(located, columns)
    if retract_count and source is not None:
        retractions = _retractions(source, diff, retract_count)
    return Correction(
        inserts=inserts,
        retractions=retractions,
        insert_count=insert_count,
        retract_count=retract_count,
        release=diff.unpersist,
    )


def _select(columns: list[str]) -> list[Column]:
    """The target's columns, quoted (names may hold dots or spaces)."""
    from pyspark.sql import functions as F

    return [F.col(f"`{c}`") for c in columns]


def _signed_diff(desired_fp: DataFrame, persisted_fp: DataFrame | None) -> DataFrame:
    """Fingerprints whose count differs: desired copies minus persisted ones (non-zero only).

    Persisted (memory and disk): the totals and both pulls read it.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    signed = desired_fp.select(H1, H2, F.lit(1).alias(MULT))
    if persisted_fp is not None:
        signed = signed.unionByName(persisted_fp.select(H1, H2, F.lit(-1).alias(MULT)))
    return (
        signed.groupBy(H1, H2)
        .agg(F.sum(MULT).alias(MULT))
        .where(F.col(MULT) != 0)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _totals(diff: DataFrame) -> tuple[int, int]:
    """Rows to insert and rows to retract, in one job over the (cached) difference."""
    from pyspark.sql import functions as F

    totals = diff.agg(
        F.coalesce(F.sum(F.when(F.col(MULT) > 0, F.col(MULT))), F.lit(0)).alias("ins"),
        F.coalesce(F.sum(F.when(F.col(MULT) < 0, -F.col(MULT))), F.lit(0)).alias("ret"),
    ).collect()[0]
    return int(totals["ins"]), int(totals["ret"])


def _inserts(
    desired: DataFrame,
    desired_fp: DataFrame,
    diff: DataFrame,
    columns: list[str],
    insert_count: int,
) -> DataFrame:
    """``m`` copies of one desired row per fingerprint with ``m > 0`` (a lazy frame)."""
    from pyspark.sql import functions as F

    select = _select(columns)
    if not insert_count:
        return desired.select(*select).limit(0)
    wanted = F.broadcast(diff.where(F.col(MULT) > 0))
    return (
        desired_fp.join(wanted, [H1, H2])
        .dropDuplicates([H1, H2])
        .withColumn("__ct_copy", F.explode(F.sequence(F.lit(1), F.col(MULT))))
        .select(*select)
    )


def _retractions(source: DataFrame, diff: DataFrame, retract_count: int) -> list[tuple[str, int]]:
    """The positions of the ``|m|`` copies to retract per fingerprint with ``m < 0``.

    Every one must be found in ``source``: a tick that retracts rows its
    target does not hold was computed against another target, so
    :class:`IncrementalMismatchError` (the difference is freed first).
    """
    from pyspark.sql import functions as F

    unwanted = diff.where(F.col(MULT) < 0).withColumn(MULT, -F.col(MULT))
    retractions = pick_retractions(source, unwanted)
    if len(retractions) != retract_count:
        diff.unpersist()
        raise IncrementalMismatchError(
            f"{retract_count} rows to retract, {len(retractions)} found in the target"
        )
    return retractions


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
