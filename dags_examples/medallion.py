"""The medallion example's Airflow DAGs: bronze -> silver -> gold -> a view over gold.

Trigger ``medallion_bronze`` (optionally with ``{"rows": [...]}`` as conf)
to blind-write order events; every downstream layer then ticks on its input's
asset event, at exactly the time its input sealed, with no sensor and no
schedule of its own. ``medallion_bronze_ticks`` moves the bronze frontier
every five minutes when nobody writes, and the layers follow it. See
``medallion_pipeline.py`` for the definitions and docs/pipelines.md for the
semantics.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from medallion_pipeline import medallion_dags

#: ``warm`` in ``make demo``: every layer's job runs on one long-lived Spark
#: driver. Unset: the Spark connection decides. See docs/engines.md.
ENGINE = os.environ.get("CT_EXAMPLE_ENGINE") or None

NAMESPACE = os.environ.get("CT_EXAMPLE_MEDALLION_NAMESPACE", "medallion")
#: ``off`` in ``make demo``: the bronze tick DAG has no time schedule.
SCHEDULED = os.environ.get("CT_EXAMPLE_SCHEDULES", "on") != "off"

globals().update(
    medallion_dags(
        namespace=NAMESPACE,
        engine=ENGINE,
        **({} if SCHEDULED else {"tick_schedule": None}),
    )
)
