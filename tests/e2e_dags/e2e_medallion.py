"""The medallion example's Airflow DAGs for tests/e2e/test_asset_pipeline.py.

A copy of ``dags_examples/medallion.py`` in its own namespace, on the warm
engine, paused until the test unpauses it, and without the bronze tick
DAG's schedule: the test's own writes are the only bronze events, so every
downstream run can be accounted for.
"""

from __future__ import annotations

import os
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "dags_examples")
sys.path.insert(0, EXAMPLES)

from medallion_pipeline import medallion_dags  # noqa: E402

NAMESPACE = "e2e_medallion"
PREFIX = "medallion_e2e"
BRONZE, TICKS = f"{PREFIX}_bronze", f"{PREFIX}_bronze_ticks"
#: The downstream layers in order, each with its table.
LAYERS = {
    f"{PREFIX}_silver": f"{NAMESPACE}.orders_latest",
    f"{PREFIX}_gold": f"{NAMESPACE}.revenue_daily",
    f"{PREFIX}_by_day": f"{NAMESPACE}.revenue_by_day",
}
MEDALLION_DAGS = [BRONZE, TICKS, *LAYERS]

globals().update(
    medallion_dags(
        namespace=NAMESPACE,
        prefix=PREFIX,
        engine="warm",
        tick_schedule=None,
        is_paused_upon_creation=True,
    )
)
