"""Exposes the shipped continual-task example DAG to the test Airflow's DAG bundle."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "dags_examples"))

from continual_tasks import dag

__all__ = ["dag"]
