"""Small corrections diffed on the driver: two pulls instead of four Spark jobs.

The Spark path (:func:`~.correction.spark_correction`) costs a signed
aggregation (a shuffle), its totals, a pull of the rows to insert and a pull
of the retracted positions, then the inserts are computed a second time when
they are written. Each is a Spark job of 0.1-0.9 s on two cores, whatever
the size, so a correction of ten rows cost seconds.

When both sides are small, the driver pulls them once through Arrow, each
row with the same 128-bit fingerprint the Spark path uses (so the two paths
agree on which rows are equal, NULLs and floats included), and diffs them
with pyarrow: the inserts come back as an Arrow table ready to be written,
and the retracted positions are picked by the same rule (lowest
``(_file, _pos)`` per fingerprint). A side larger than the limit is never
held: each pull stops at ``limit + 1`` rows, and the caller then runs the
Spark path. The limits are settings
(:func:`~airflow_provider_ct.core.settings.rows_on_driver`,
:func:`~airflow_provider_ct.core.settings.full_rows_on_driver`), and
:func:`~.diff.compute_correction` chooses between the two paths.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_ct.core.settings import rows_on_driver
from airflow_provider_ct.exceptions import IncrementalMismatchError
from airflow_provider_ct.spark.fingerprints import (
    H1,
    H2,
    MULT,
    Correction,
    pick_retractions,
    with_fingerprint,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

_INDEX = "__ct_i"
_KEYS = [H1, H2]


def driver_correction(
    desired: DataFrame,
    persisted: DataFrame | None,
    columns: list[str],
    *,
    located: DataFrame | None = None,
    limit: int | None = None,
) -> Correction | None:
    """The correction diffed on the driver, or None when a side has more than ``limit`` rows.

    Same contract as :func:`~.diff.compute_correction`, except that
    ``inserts`` is an Arrow table. With ``located``, the retracted rows are
    looked up there in Spark (it is the target, maybe large); otherwise they
    are picked from ``persisted``'s pulled positions.

    :param limit: rows per side; default :func:`rows_on_driver` (0: None at once).
    """
    from pyspark.sql import functions as F

    limit = rows_on_driver() if limit is None else limit
    if limit == 0:
        return None
    select = [F.col(f"`{c}`") for c in columns]
    want = _pull(with_fingerprint(desired.select(*select), columns), limit)
    if want is None:
        return None
    have = None
    if persisted is not None:
        keep = _KEYS if located is not None else [*_KEYS, "_file", "_pos"]
        have = _pull(with_fingerprint(persisted, columns).select(*keep), limit)
        if have is None:
            return None
    diff = _signed_counts(want, have)
    m = diff[MULT].to_numpy()
    insert_count, retract_count = int(m[m > 0].sum()), int(-m[m < 0].sum())
    inserts = _insert_rows(want, diff.filter(pc.greater(diff[MULT], 0)), columns)
    unwanted = diff.filter(pc.less(diff[MULT], 0))
    retractions: list[tuple[str, int]] = []
    if retract_count and located is None:
        assert have is not None
        retractions = _picked_positions(have, unwanted)
    elif retract_count and located is not None:
        spark = desired.sparkSession
        counts = zip(*(unwanted[c].to_pylist() for c in (H1, H2, MULT)), strict=True)
        rows = [(h1, h2, -n) for h1, h2, n in counts]
        keys = spark.createDataFrame(rows, f"{H1} long, {H2} long, {MULT} long")
        retractions = pick_retractions(with_fingerprint(located, columns), keys)
    if len(retractions) != retract_count:
        raise IncrementalMismatchError(
            f"{retract_count} rows to retract, {len(retractions)} found in the target"
        )
    log.info("diffed on the driver: %d and %d rows", want.num_rows, have.num_rows if have else 0)
    return Correction(inserts, retractions, insert_count, retract_count, diffed_on="driver")


def _pull(frame: DataFrame, limit: int) -> pa.Table | None:
    """``frame``'s rows through Arrow, or None past ``limit`` rows (never more than one extra)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = to_arrow_schema(frame.schema)
    except TypeError:  # a type Arrow cannot carry from this Spark: the Spark path
        return None
    batches = frame.limit(limit + 1)._collect_as_arrow()
    table = pa.Table.from_batches(batches) if batches else schema.empty_table()
    return None if table.num_rows > limit else table


def _signed_counts(want: pa.Table, have: pa.Table | None) -> pa.Table:
    """Fingerprints whose count differs: desired copies minus persisted copies (non-zero only)."""
    parts = [_signed(want, 1)]
    if have is not None:
        parts.append(_signed(have, -1))
    summed = pa.concat_tables(parts).group_by(_KEYS).aggregate([(MULT, "sum")])
    summed = summed.rename_columns([MULT if n == f"{MULT}_sum" else n for n in summed.column_names])
    return summed.filter(pc.not_equal(summed[MULT], 0))


def _signed(table: pa.Table, sign: int) -> pa.Table:
    keys = table.select(_KEYS)
    return keys.append_column(MULT, pa.array(np.full(table.num_rows, sign, dtype=np.int64)))


def _insert_rows(want: pa.Table, wanted: pa.Table, columns: list[str]) -> pa.Table:
    """``m`` copies of one desired row per fingerprint with ``m > 0``."""
    rows = want.select(columns)
    if wanted.num_rows == 0:
        return rows.slice(0, 0)
    indexed = want.select(_KEYS).append_column(_INDEX, pa.array(np.arange(want.num_rows)))
    first = indexed.group_by(_KEYS).aggregate([(_INDEX, "min")])
    joined = first.join(wanted, _KEYS, join_type="inner")
    index = joined[f"{_INDEX}_min"].to_numpy()
    copies = joined[MULT].to_numpy()
    return rows.take(pa.array(np.repeat(index, copies)))


def _picked_positions(have: pa.Table, unwanted: pa.Table) -> list[tuple[str, int]]:
    """The lowest ``(_file, _pos)`` ``|m|`` rows of each fingerprint with ``m < 0``."""
    joined = have.join(unwanted, _KEYS, join_type="inner").sort_by(
        [(H1, "ascending"), (H2, "ascending"), ("_file", "ascending"), ("_pos", "ascending")]
    )
    n = joined.num_rows
    if n == 0:
        return []
    h1, h2 = joined[H1].to_numpy(), joined[H2].to_numpy()
    starts = np.r_[True, (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])]
    at = np.arange(n)
    rank = at - np.maximum.accumulate(np.where(starts, at, 0))
    keep = rank < -joined[MULT].to_numpy()
    files: Any = joined["_file"].to_numpy(zero_copy_only=False)[keep]
    positions = joined["_pos"].to_numpy()[keep]
    return list(zip(files.tolist(), positions.astype(np.int64).tolist(), strict=True))
