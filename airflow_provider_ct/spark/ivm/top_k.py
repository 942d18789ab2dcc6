"""The top-k operator's tick on Spark: the view's rows with the change applied, cut again.

The rule and why it is exact are :mod:`airflow_provider_ct.ivm.plan.top_k`'s.
Here: the rows below the limit gained (``plus``) and lost (``minus``) by
the delta rules, pairs that cancel removed (an update that leaves a row's
outputs as they were is no loss); one small job decides whether a lost row
sorts at or before the view's last (then the tick is recomputed); else the
new top is sorted from the view's rows and the change, and compared with
the view by the usual diff. The view holds at most ``k`` rows, so every
side here is about as small as the change.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_ct.ivm.plan.decision import Discovery, Fallback
from airflow_provider_ct.ivm.plan.top_k import TopK
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_KEPT = "__ct_top_kept"
_LOST = "__ct_top_lost"
_GAINED = "__ct_top_gained"


def top_k_correction(
    plus: DataFrame,
    minus: DataFrame,
    persisted: DataFrame,
    columns: list[str],
    top: TopK,
    *,
    on_driver: bool,
) -> Correction | Fallback:
    """The view's correction for one tick of ``top``, or a fallback when a kept row was lost.

    :param persisted: the view's head with ``_file`` and ``_pos``.
    """
    names = [f"`{c.replace('`', '``')}`" for c in columns]
    kept = persisted.select(*names)
    gained, lost = plus.exceptAll(minus), minus.exceptAll(plus)
    spark = persisted.sparkSession
    kept.createOrReplaceTempView(_KEPT)
    lost.createOrReplaceTempView(_LOST)
    gained.createOrReplaceTempView(_GAINED)
    held, first_lost, last_kept = _positions(spark, names, top.order_sql(columns))
    if held >= top.limit and first_lost is not None and first_lost < last_kept:
        return Fallback(
            Discovery.NOT_POSSIBLE,
            f"a row the change lost sorts at or before the last of the view's {held} rows "
            f"({top.describe(columns)}): the rows that follow them were never kept",
        )
    listed = ", ".join(names)
    desired = spark.sql(
        f"SELECT {listed} FROM (SELECT {listed} FROM {_KEPT} EXCEPT ALL "
        f"SELECT {listed} FROM {_LOST} UNION ALL SELECT {listed} FROM {_GAINED}) "
        f"ORDER BY {top.order_sql(columns)} LIMIT {top.limit}"
    )
    log.info("top %d kept from the view's %d rows and the change", top.limit, held)
    correction = compute_correction(desired, persisted, columns, on_driver=on_driver)
    correction.notes["top_k"] = {"kept_rows": held, "limit": top.limit}
    return correction


def _positions(spark: SparkSession, names: list[str], order: str) -> tuple[int, int | None, int]:
    """The view's row count, the first lost row's place and the last kept row's, in one sort.

    A lost row tied with a kept one sorts first (``__ct_lost`` 0 before 1):
    the view may hold either of two tied rows.
    """
    listed = ", ".join(names)
    row = spark.sql(
        f"""
        SELECT COUNT(CASE WHEN __ct_kept = 1 THEN 1 END) AS held,
               MIN(CASE WHEN __ct_kept = 0 THEN __ct_at END) AS first_lost,
               MAX(CASE WHEN __ct_kept = 1 THEN __ct_at END) AS last_kept
        FROM (
            SELECT __ct_kept, ROW_NUMBER() OVER (ORDER BY {order}, __ct_kept) AS __ct_at
            FROM (SELECT {listed}, 1 AS __ct_kept FROM {_KEPT}
                  UNION ALL SELECT {listed}, 0 AS __ct_kept FROM {_LOST})
        )
        """
    ).collect()[0]
    return int(row["held"]), row["first_lost"], int(row["last_kept"] or 0)
