"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-ct",
        "name": "Continual tables (CT) for Spark and Apache Iceberg",
        "description": "Self-correcting materialized views, continual tasks and managed "
        "collections on Apache Iceberg tables with ticking frontiers.",
        "versions": ["0.1.0"],
        "hook-class-names": ["airflow_provider_ct.hooks.iceberg.IcebergCatalogHook"],
        "connection-types": [
            {
                "connection-type": "iceberg_catalog",
                "hook-class-name": "airflow_provider_ct.hooks.iceberg.IcebergCatalogHook",
            }
        ],
        "hooks": [
            {
                "integration-name": "Apache Iceberg",
                "python-modules": ["airflow_provider_ct.hooks.iceberg"],
            }
        ],
    }
