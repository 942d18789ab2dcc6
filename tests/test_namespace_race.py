"""Two tasks creating the first tables of one new namespace at once: both succeed.

The demo's ``ops_service_status`` registers two collections of the new
namespace ``ops`` in parallel; the SQL catalog checks that a namespace is
missing, then inserts it, so the second insert of a race fails in SQLite.
Here the race is made certain: another connection to the same catalog
creates the namespace between the check and the insert.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table

SCHEMA = pa.schema([("id", pa.int64())])


def test_a_namespace_created_meanwhile_is_the_one_wanted(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    rival = sqlite_catalog_config.load()  # another task's connection
    exists = catalog.namespace_exists
    checked: list[Any] = []

    def check_then_lose_the_race(namespace: Any) -> bool:
        answer = exists(namespace)
        if not checked:  # the catalog's own check, inside create_namespace
            checked.append(namespace)
            rival.create_namespace(namespace)  # the rival's insert lands first
        return answer

    catalog.namespace_exists = check_then_lose_the_race  # type: ignore[method-assign]
    table = create_managed_table(catalog, "raced.status", SCHEMA)
    assert checked == ["raced"] and table.name() == ("raced", "status")
    assert rival.load_table("raced.status").schema().column_names == ["id"]
