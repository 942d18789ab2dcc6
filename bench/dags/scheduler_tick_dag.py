"""The Airflow DAG of bench/scheduler_tick_bench.py: the shop's revenue view on the warm engine.

The same DAG as the warm engine's tests (``tests/dags/warm_revenue.py``):
``feed`` commits the shop's inputs at the run's time and seals them, then
the view ticks (sensor poking every second, mint, write, append). No
schedule: the bench triggers one run per tick.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "dags"))

from warm_revenue import build_dag

dag = build_dag("scheduler_tick_bench", "sched_bench", "warm", idle_timeout=600, schedule=None)
