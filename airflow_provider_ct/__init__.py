"""airflow-provider-ct: Materialize-style continual tables on Spark + Apache Iceberg.

The frontier and commit core lives in :mod:`airflow_provider_ct.core` and does
not import Airflow; Airflow-facing pieces (hooks, operators) live beside it.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
