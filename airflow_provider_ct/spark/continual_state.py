"""A continual task's output as a batch changes it, and the names its statements read.

Shared by the job (:mod:`.continual_job`), which runs the statements time by
time, and the checks before it (:mod:`.continual_checks`), which analyse
them over the same views, empty: both bind the tables and the output under
these names, so a statement is analysed exactly as it will run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.continual import ContinualTaskDef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SELF_VIEW, INPUT_VIEW, REF_VIEW = "__ct_self", "__ct_input", "__ct_ref_"
#: The output so far without the row addresses: what an INSERT's SELECT reads
#: (``SELECT * FROM output`` gives the output's columns, nothing internal).
SELF_ROWS = "__ct_self_rows"
FILE_COL, POS_COL = "__ct_file", "__ct_pos"


@dataclass
class State:
    """The output as the batch has changed it so far."""

    base: DataFrame | None  # output at the base snapshot, with FILE_COL/POS_COL
    written: list[dict[str, Any]] = field(default_factory=list)  # rows staged this batch
    deleted: set[tuple[str, int]] = field(default_factory=set)


def state_frame(spark: SparkSession, task: ContinualTaskDef, state: State) -> DataFrame:
    """The output as ``state`` holds it, with each row's address (``FILE_COL``, ``POS_COL``)."""
    from pyspark.sql import functions as F

    ddl = f"{task.spark_schema_ddl()}, `{FILE_COL}` string, `{POS_COL}` long"
    frames = []
    if state.base is not None:
        base = state.base
        if state.deleted:
            gone = spark.createDataFrame(
                sorted(state.deleted), f"`{FILE_COL}` string, `{POS_COL}` long"
            )
            base = base.join(F.broadcast(gone), [FILE_COL, POS_COL], "left_anti")
        frames.append(base)
    if state.written:
        live = [r for r in state.written if (r[FILE_COL], r[POS_COL]) not in state.deleted]
        if live:
            frames.append(spark.createDataFrame(live, ddl))
    if not frames:
        return spark.createDataFrame([], ddl)
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
