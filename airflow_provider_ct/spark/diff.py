"""The correction's entry point: diff small sides on the driver, anything else in Spark.

The two paths (:mod:`.driver_diff`, :mod:`.correction`) share their
fingerprints and retraction rule (:mod:`.fingerprints`) and return the same
:class:`~.fingerprints.Correction`, so a caller cannot tell which ran except
by its ``diffed_on``. The choice lives here, not in either path, so neither
path imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_ct.spark.correction import spark_correction
from airflow_provider_ct.spark.driver_diff import driver_correction
from airflow_provider_ct.spark.fingerprints import Correction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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

    :param located: where retracted rows are found (with ``_file``, ``_pos``)
        when ``persisted`` is not the target itself: an incremental tick
        compares the rows its inputs' changes add with those they remove,
        and retracts the latter from the target's head. Every retracted row
        must be found there, else :class:`IncrementalMismatchError`.
    :param on_driver: diff on the driver when both sides are small (see
        :mod:`.driver_diff`); ``inserts`` is then an Arrow table. A side
        past the limit runs the Spark path (:mod:`.correction`).
    :param driver_limit: rows per side the driver diffs (default:
        :func:`~airflow_provider_ct.core.settings.rows_on_driver`).
    """
    if on_driver:
        small = driver_correction(desired, persisted, columns, located=located, limit=driver_limit)
        if small is not None:
            return small
    return spark_correction(desired, persisted, columns, located=located)
