"""The SQL-and-Python folders ``tests/pipelines/mixed`` and ``sdp_init`` as DAGs.

For tests/test_sql_pipeline_python.py; built only when the test sets
``CT_TEST_SQL_PIPELINE_MIXED`` (after creating the folder's inputs: the
folder is resolved against the catalog at parse time). Each run ticks at
``dag_run.conf["time"]``.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_provider_ct import sql_pipeline

FOLDERS = Path(__file__).resolve().parent.parent / "pipelines"
KWARGS = {"engine": "warm", "deferrable": False, "poke_interval": 1}

if os.environ.get("CT_TEST_SQL_PIPELINE_MIXED") == "mixed":
    dag = sql_pipeline(
        FOLDERS / "mixed",
        dag_id="ct_sql_pipeline_mixed",
        time="{{ dag_run.conf['time'] }}",
        factory_kwargs=KWARGS,
    )
if os.environ.get("CT_TEST_SQL_PIPELINE_MIXED") == "init":
    dag = sql_pipeline(
        FOLDERS / "sdp_init",
        dag_id="ct_sql_pipeline_sdp_init",
        time="{{ dag_run.conf['time'] }}",
        factory_kwargs=KWARGS,
    )
