"""airflow-provider-ct: Materialize-style continual tables on Spark + Apache Iceberg.

The frontier and commit core lives in :mod:`airflow_provider_ct.core` and does
not import Airflow. The Airflow-facing API is re-exported here lazily, so
importing the package (e.g. in a Spark driver) does not import Airflow.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "FrontierSensor": "airflow_provider_ct.sensors.frontier",
    "FrontierTrigger": "airflow_provider_ct.triggers.frontier",
    "MintOperator": "airflow_provider_ct.operators.mint",
    "WriteOperator": "airflow_provider_ct.operators.write",
    "AppendOperator": "airflow_provider_ct.operators.append",
    "ViewTickOperator": "airflow_provider_ct.operators.tick",
    "IcebergCatalogHook": "airflow_provider_ct.hooks.iceberg",
    "materialized_view": "airflow_provider_ct.views",
    "continual_task": "airflow_provider_ct.continual",
    "sql_pipeline": "airflow_provider_ct.pipelines.dag",
    "ContinualMintOperator": "airflow_provider_ct.operators.continual",
    "ContinualWriteOperator": "airflow_provider_ct.operators.continual",
    "ContinualAppendOperator": "airflow_provider_ct.operators.continual",
    "view_asset": "airflow_provider_ct.views",
    "table_asset": "airflow_provider_ct.assets",
    "view_input_assets": "airflow_provider_ct.assets",
    "continual_task_input_assets": "airflow_provider_ct.assets",
    "SEALED": "airflow_provider_ct.assets",
    "RegisterCollectionOperator": "airflow_provider_ct.operators.collections",
    "BlindWriteOperator": "airflow_provider_ct.operators.collections",
    "DifferentialWriteOperator": "airflow_provider_ct.operators.collections",
    "TickCollectionsOperator": "airflow_provider_ct.operators.collections_upkeep",
    "MaintainTablesOperator": "airflow_provider_ct.operators.collections_upkeep",
    "CloseCollectionOperator": "airflow_provider_ct.operators.collections",
    "RegisterReaderOperator": "airflow_provider_ct.operators.collections_upkeep",
    "collections_dag": "airflow_provider_ct.tick_dag",
    "SparkSettings": "airflow_provider_ct.factory_settings",
    "WaitSettings": "airflow_provider_ct.factory_settings",
    "SparkJobHook": "airflow_provider_ct.hooks.spark_job",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_provider_ct' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
