"""Continual tasks: an UPSERT, an audit log and a retention window, in SQL.

The definitions are Materialize's syntax (copy them from its docs). A small
feed appends events every ten minutes; each task then processes exactly the
rows inserted since its last tick, so a tick costs what changed, not what
exists. As in Materialize, the events already there at a task's first tick
are processed first (its snapshot; ``WITH (SNAPSHOT = false)`` skips them).
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.sdk import DAG, task

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from airflow_provider_ct import IcebergCatalogHook, continual_task
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.operators._common import tick_time

NAMESPACE = os.environ.get("CT_EXAMPLE_CT_NAMESPACE", "events")
#: ``warm`` in ``make demo``: the three tasks' jobs share one long-lived Spark
#: driver. Unset: the Spark connection decides. See docs/engines.md.
ENGINE = os.environ.get("CT_EXAMPLE_ENGINE") or None
#: ``off`` in ``make demo``: no time schedule, the demo triggers every run.
SCHEDULED = os.environ.get("CT_EXAMPLE_SCHEDULES", "on") != "off"
EVENTS = pa.schema(
    [("key", pa.int32()), ("val", pa.int32()), ("ts", pa.int64()), ("anomaly", pa.bool_())]
)

# [START upsert]
UPSERT = """
CREATE CONTINUAL TASK upsert (key INT, val INT) ON INPUT append_only AS (
    DELETE FROM upsert WHERE key IN (SELECT key FROM append_only);
    INSERT INTO upsert SELECT key, max(val) FROM append_only GROUP BY key;
)
"""
# [END upsert]

# [START audit_log]
AUDIT_LOG = """
CREATE CONTINUAL TASK audit_log (key INT, val INT, ts INT8) ON INPUT append_only AS (
    INSERT INTO audit_log SELECT key, val, ts FROM append_only WHERE anomaly;
)
"""
# [END audit_log]

# [START retention]
# Keep the last hour of events; mz_now() is the input time being processed.
RETENTION = """
CREATE CONTINUAL TASK recent_events (key INT, val INT, ts INT8)
ON INPUT append_only WITH (SNAPSHOT = true) AS (
    DELETE FROM recent_events WHERE ts < mz_now() - 3600000;
    INSERT INTO recent_events SELECT key, val, ts FROM append_only;
)
"""
# [END retention]


def feed_events(catalog: Any, namespace: str, time: int) -> int:
    """Append a deterministic handful of events at ``time`` (idempotent per interval)."""
    table = create_managed_table(catalog, f"{namespace}.append_only", EVENTS)
    timeline = Timeline.of(table)
    batch_id = f"feed-events-{time}"
    if timeline.upper.seals(time) or timeline.find_batch(batch_id) is not None:
        return 0
    rng = random.Random(time)
    rows = [
        {
            "key": rng.randint(1, 20),
            "val": rng.randint(0, 100),
            "ts": time - rng.randint(0, 599_999),
            "anomaly": rng.random() < 0.1,
        }
        for _ in range(rng.randint(3, 12))
    ]
    path = f"{batch_data_dir(table.location(), batch_id)}/part-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create(overwrite=True) as out:
        pq.write_table(pa.Table.from_pylist(rows, EVENTS), out)
    result = compare_and_append(
        table,
        expected_upper=timeline.upper,
        new_upper=Frontier.sealing(time),
        batch_id=batch_id,
        add_files=[path],
        time=time,
    )
    if not result.landed:
        raise RuntimeError(f"feeding {batch_id} lost a race: {result.reason}")
    return len(rows)


with DAG(
    dag_id="continual_tasks",
    schedule=timedelta(minutes=10) if SCHEDULED else None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=10)},
    tags=["ct", "example"],
) as dag:

    @task
    def feed(**context: Any) -> int:
        return feed_events(IcebergCatalogHook().get_catalog(), NAMESPACE, tick_time(context))

    fed = feed()
    for definition in (UPSERT, AUDIT_LOG, RETENTION):
        fed >> continual_task(
            definition=definition, namespace=NAMESPACE, poke_interval=5, engine=ENGINE
        )
