"""Exposes the shipped managed-collections example DAGs to the test Airflow's DAG bundle."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "dags_examples"))

from managed_collections import status_dag, tick_dag

__all__ = ["status_dag", "tick_dag"]
