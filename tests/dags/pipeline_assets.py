"""DAGs for tests/test_pipelines.py: collection writes and ticks that announce uppers,
and a mint that ticks at what its inputs sealed (``time="sealed"``)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_ct.assets import SEALED, view_input_assets
from airflow_provider_ct.operators.collections import (
    BlindWriteOperator,
    RegisterCollectionOperator,
)
from airflow_provider_ct.operators.collections_upkeep import TickCollectionsOperator
from airflow_provider_ct.operators.mint import MintOperator

COLUMNS = {"k": "int64", "v": "string"}
START = datetime(2026, 1, 1)
SEALED_SQL = "SELECT a.k, b.v FROM pipe.a AS a JOIN pipe.b AS b ON a.k = b.k"


def _writer(dag_id: str, collection: str, rows: object) -> DAG:
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        register = RegisterCollectionOperator(
            task_id="register", collection=collection, columns=COLUMNS, kind="append-only"
        )
        register >> BlindWriteOperator(task_id="write", collection=collection, rows=rows)
    return dag


write_a = _writer("ct_pipeline_write_a", "pipe.a", [[1, "a"]])
write_b = _writer("ct_pipeline_write_b", "pipe.b", [[1, "b"]])
# +1 and -1 of the same row: nothing to commit, so nothing to announce.
cancelled_a = _writer(
    "ct_pipeline_cancelled_a", "pipe.a", {"rows": [[9, "z"], [9, "z"]], "diffs": [1, -1]}
)

with DAG("ct_pipeline_tick", schedule=None, start_date=START) as tick:
    TickCollectionsOperator(
        task_id="tick", namespaces=["pipe"], time="{{ dag_run.conf['time'] }}", checkpoint_ms=None
    )

with DAG(
    "ct_pipeline_sealed",
    schedule=view_input_assets(SEALED_SQL),
    start_date=START,
    max_active_runs=1,
) as sealed:
    MintOperator(task_id="mint", target="pipe.view", sql=SEALED_SQL, time=SEALED)
