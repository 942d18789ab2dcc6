"""The SDP-format folder ``tests/pipelines/shop`` as a DAG, for tests/test_sql_pipeline_ticks.py.

Built only when the test sets ``CT_TEST_SQL_PIPELINE`` (after creating the
folder's input tables): the folder is resolved against the catalog at parse
time, and other tests' ``dag.test()`` parse this bundle with other catalogs.
Each run ticks at ``dag_run.conf["time"]`` (a time the test knows is sealed).
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_provider_ct import sql_pipeline

if os.environ.get("CT_TEST_SQL_PIPELINE"):
    dag = sql_pipeline(
        Path(__file__).resolve().parent.parent / "pipelines" / "shop",
        dag_id="ct_sql_pipeline_shop",
        time="{{ dag_run.conf['time'] }}",
        factory_kwargs={"engine": "warm", "deferrable": False, "poke_interval": 1},
    )
