"""A table as of a snapshot, as Spark reads it: the one pinned read of every job.

Views, continual tasks and the inputs' changes all read tables pinned to a
snapshot id (time travel), and an input that had no snapshot at a time as
empty with today's schema. Spelled once so every job reads a pin the same
way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_at(spark: SparkSession, table: str, snapshot: int | None) -> DataFrame:
    """``table`` (catalog-qualified) as of ``snapshot``; ``None``: no rows, today's schema."""
    if snapshot is None:
        return spark.table(table).limit(0)
    return spark.read.option("snapshot-id", str(snapshot)).table(table)
