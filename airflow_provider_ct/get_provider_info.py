"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

The shapes follow Airflow's ``provider.yaml`` schema (``integrations``,
``operators``, ``sensors``, ``triggers``, ``hooks`` with ``integration-name``
and ``python-modules``; ``connection-types``), so ``airflow providers get``
and the UI's provider pages list what the package offers. ``plugins`` names
the "Continual tables" UI page (docs/ui.md); Airflow loads it through the
``airflow.plugins`` entry point, and from here only when providers are not
discovered lazily (``[core] lazy_discover_providers = False``).
``tests/test_provider.py`` checks that every module named here imports and
that every operator, sensor, trigger and hook class of the package is named.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_ct import __version__

INTEGRATION = "Continual tables (Apache Iceberg)"
HOOK_CLASS = "airflow_provider_ct.hooks.iceberg.IcebergCatalogHook"


def _group(*modules: str) -> list[dict[str, Any]]:
    return [{"integration-name": INTEGRATION, "python-modules": list(modules)}]


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-ct",
        "name": "Continual tables (CT) for Spark and Apache Iceberg",
        "description": "Self-correcting materialized views, continual tasks and managed "
        "collections on Apache Iceberg tables with ticking frontiers.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://iceberg.apache.org/",
                "tags": ["software"],
            }
        ],
        "operators": _group(
            "airflow_provider_ct.operators.mint",
            "airflow_provider_ct.operators.write",
            "airflow_provider_ct.operators.waiting_mint",
            "airflow_provider_ct.operators.append",
            "airflow_provider_ct.operators.tick",
            "airflow_provider_ct.operators.continual",
            "airflow_provider_ct.operators.collections",
            "airflow_provider_ct.operators.collections_upkeep",
            "airflow_provider_ct.pipelines.constant_task",
        ),
        "sensors": _group("airflow_provider_ct.sensors.frontier"),
        "triggers": _group("airflow_provider_ct.triggers.frontier"),
        "hooks": _group("airflow_provider_ct.hooks.iceberg", "airflow_provider_ct.hooks.spark_job"),
        "hook-class-names": [HOOK_CLASS],
        "connection-types": [{"connection-type": "iceberg_catalog", "hook-class-name": HOOK_CLASS}],
        "plugins": [
            {
                "name": "continual_tables",
                "plugin-class": "airflow_provider_ct.ui.plugin.ContinualTablesPlugin",
            }
        ],
    }
