"""OpenLineage: the facet module, and the events a real view tick emits.

The end-to-end test runs the example view's DAG through ``dag.test()`` in a
fresh Python process with the OpenLineage provider's file transport
configured, as a deployment would: the provider's plugin registers its
listener only when a transport is configured at import time, so a process of
its own is what makes the real listener run (this pytest process may have
loaded Airflow's plugins long before, without a transport).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier, timestamp_from_datetime
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.lineage import (
    CatalogRef,
    TableRef,
    TickLineage,
    column_lineage,
    describe_tick,
    location_name,
    operator_lineage,
    safe_lineage,
    strip_credentials,
)
from tests.conftest import SCHEMA
from tests.helpers import advance, fed_snapshots, replace_contents

ROOT = Path(__file__).resolve().parent.parent
REVENUE_COLUMNS = {
    "customer_id": [("shop.customers", "id")],
    "name": [("shop.customers", "name")],
    "country": [("shop.customers", "country")],
    "revenue_cents": [("shop.orders", "amount_cents")],
}


def _revenue_sql() -> str:
    sys.path.insert(0, str(ROOT / "dags_examples"))
    from revenue_per_customer import REVENUE_SQL

    return str(REVENUE_SQL)


def test_location_names_follow_the_storage_scheme() -> None:
    assert location_name("file:///w/shop/orders") == ("file", "/w/shop/orders")
    assert location_name("/w/shop/orders") == ("file", "/w/shop/orders")
    assert location_name("s3://bucket/w/shop/orders") == ("s3://bucket", "w/shop/orders")
    assert location_name("hdfs://nn:8020/w/t") == ("hdfs://nn:8020", "/w/t")


def test_credentials_never_reach_an_event() -> None:
    uri = "postgresql+psycopg2://ct:s3cret@db.example:5432/catalog"
    assert strip_credentials(uri) == "postgresql+psycopg2://db.example:5432/catalog"
    assert strip_credentials("sqlite:////tmp/catalog.db") == "sqlite:////tmp/catalog.db"


def test_column_lineage_of_the_example_view_and_of_a_single_table_query() -> None:
    inputs = ["shop.orders", "shop.customers"]
    # COUNT(*) reads no column: ``orders`` has no input field and is left out.
    assert column_lineage(_revenue_sql(), inputs, "ct") == REVENUE_COLUMNS
    single = "SELECT id, amount * 2 AS doubled FROM ct.shop.orders WHERE amount > 0"
    assert column_lineage(single, ["shop.orders"], "ct") == {
        "id": [("shop.orders", "id")],
        "doubled": [("shop.orders", "amount")],
    }
    assert column_lineage("SELECT * FROM shop.orders", ["shop.orders"], "ct") == {}


def _tick() -> TickLineage:
    catalog = CatalogRef("ct", "sql", "postgresql://u:pw@db:5432/c", "s3://lake/w")
    orders = TableRef("shop.orders", "s3://lake/w/shop/orders")
    return TickLineage(
        catalog=catalog,
        inputs=[(orders, 11), (TableRef("shop.empty", "s3://lake/w/shop/empty"), None)],
        output=TableRef("shop.revenue", "s3://lake/w/shop/revenue"),
        output_facts={"snapshotId": 42, "batchId": "b-1"},
        column_lineage={"revenue": [("shop.orders", "amount")]},
        rows_inserted=3,
    )


def test_operator_lineage_carries_versions_symlinks_ct_facet_and_columns() -> None:
    lineage = operator_lineage(_tick())
    orders, empty = lineage.inputs
    assert (orders.namespace, orders.name) == ("s3://lake", "w/shop/orders")
    assert orders.facets["version"].datasetVersion == "11"
    assert orders.facets["ct"].snapshotId == 11
    assert "version" not in empty.facets  # an input empty at the tick has no snapshot
    link = orders.facets["symlinks"].identifiers[0]
    assert (link.namespace, link.name, link.type) == (
        "postgresql://db:5432/c",
        "shop.orders",
        "TABLE",
    )
    assert orders.facets["catalog"].framework == "iceberg"
    (output,) = lineage.outputs
    assert output.facets["version"].datasetVersion == "42"
    assert output.facets["ct"].facts["batchId"] == "b-1"
    assert output.outputFacets["outputStatistics"].rowCount == 3
    field = output.facets["columnLineage"].fields["revenue"].inputFields[0]
    assert (field.namespace, field.name, field.field) == ("s3://lake", "w/shop/orders", "amount")


def test_safe_lineage_turns_a_failure_into_empty_lineage(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> TickLineage:
        raise RuntimeError("catalog unreachable")

    with caplog.at_level("WARNING"):
        lineage = safe_lineage("view.append", broken)
    assert (lineage.inputs, lineage.outputs) == ([], [])
    assert "no OpenLineage facets for view.append" in caplog.text
    assert safe_lineage("view.mint", lambda: None).outputs == []


def test_without_the_openlineage_provider_operators_report_nothing_and_still_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ``openlineage`` extra is optional: no import of it at module level."""
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)
    script = (
        "import sys; sys.modules['openlineage'] = None; "
        "sys.modules['airflow.providers.openlineage.extractors'] = None; "
        "import airflow_provider_ct.operators.append, airflow_provider_ct.operators.continual, "
        "airflow_provider_ct.views; print('imported')"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0 and "imported" in out.stdout, out.stderr[-2000:]
    assert safe_lineage("view.append", _tick) is None


def test_describe_tick_names_tables_by_warehouse_path_and_pins_the_description(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    orders = create_managed_table(catalog, "shop.orders", SCHEMA)
    advance(orders, 100)
    pinned = catalog.load_table("shop.orders").metadata.current_snapshot_id
    desc = BatchDescription(
        target="shop.view",  # not created yet: its name needs no table
        lower=Frontier.minimum(),
        upper=Frontier.sealing(99),
        time=99,
        base_snapshot_id=None,
        inputs={"shop.orders": pinned},
    )
    tick = describe_tick(
        sqlite_catalog_config,
        desc,
        sql="SELECT id FROM shop.orders",
        output_facts={"snapshotId": 7},
    )
    ((ref, snapshot),) = tick.inputs
    warehouse = sqlite_catalog_config.warehouse.rstrip("/")
    assert ref.location == f"{warehouse}/shop.orders"
    assert snapshot == pinned
    assert tick.output.location == f"{warehouse}/shop.view"
    assert tick.output_facts["batchId"] == desc.id
    assert tick.output_facts["snapshotId"] == 7
    assert tick.column_lineage == {"id": [("shop.orders", "id")]}
    # A definition sqlglot cannot trace loses only the column lineage.
    untraced = describe_tick(sqlite_catalog_config, desc, sql="CREATE x")
    assert untraced.column_lineage == {} and untraced.inputs == tick.inputs


# -- a real tick ---------------------------------------------------------------

_RUN_TICK = """
import sys
from datetime import datetime
sys.path.insert(0, {dags!r})
import example_revenue
run = example_revenue.dag.test(logical_date=datetime.fromisoformat({logical!r}))
sys.exit(0 if run.state == "success" else 1)
"""


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _complete(events: list[dict[str, Any]], task: str) -> dict[str, Any]:
    done = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(f".{task}")
    ]
    assert len(done) == 1, [e["job"]["name"] for e in events]
    return done[0]


def _by_table(datasets: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["facets"]["symlinks"]["identifiers"][0]["name"]: d for d in datasets}


@pytest.mark.e2e
@pytest.mark.spark
@pytest.mark.slow
def test_lineage_events_of_a_real_view_tick_pin_ct_inputs_and_the_new_snapshot(
    airflow_db: None, default_catalog: CatalogConfig, tmp_path: Path
) -> None:
    """One tick of the example view through Airflow's task runner and the real listener."""
    events_file = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "ct-tests",
    }
    logical = datetime(2026, 5, 1, 3, tzinfo=UTC)
    code = _RUN_TICK.format(dags=str(ROOT / "tests" / "dags"), logical=logical.isoformat())
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, timeout=600)

    catalog = default_catalog.load()
    view = catalog.load_table("shop.revenue_per_customer")
    head = view.metadata.current_snapshot()
    summary = head.summary.additional_properties
    ct_inputs = {k: int(v) for k, v in json.loads(summary["ct.inputs"]).items()}
    fed = fed_snapshots(catalog, "shop", timestamp_from_datetime(logical))
    assert ct_inputs == fed  # the view pinned what the feed wrote

    events = _events(events_file)
    append = _complete(events, "view_shop_revenue_per_customer.append")
    inputs = _by_table(append["inputs"])
    assert set(inputs) == set(fed)
    for table, snapshot in fed.items():
        assert inputs[table]["facets"]["version"]["datasetVersion"] == str(snapshot)
        assert inputs[table]["facets"]["ct"]["snapshotId"] == ct_inputs[table]
        path = f"{default_catalog.warehouse.rstrip('/')}/{table}"
        assert (inputs[table]["namespace"], inputs[table]["name"]) == location_name(path)
    (output,) = append["outputs"]
    assert output["facets"]["symlinks"]["identifiers"][0]["name"] == "shop.revenue_per_customer"
    assert output["facets"]["version"]["datasetVersion"] == str(head.snapshot_id)
    assert output["facets"]["ct"]["facts"]["batchId"] == summary["ct.batch-id"]
    assert output["facets"]["ct"]["facts"]["time"] == timestamp_from_datetime(logical)
    names = {
        (d["namespace"], d["name"]): table for table, d in inputs.items()
    }  # column lineage names inputs by location
    columns = {
        column: [(names[(f["namespace"], f["name"])], f["field"]) for f in spec["inputFields"]]
        for column, spec in output["facets"]["columnLineage"]["fields"].items()
    }
    assert columns == REVENUE_COLUMNS
    # The mint reported the same pins before anything was written.
    mint = _complete(events, "view_shop_revenue_per_customer.mint")
    minted = _by_table(mint["inputs"])
    assert {t: d["facets"]["ct"]["snapshotId"] for t, d in minted.items()} == ct_inputs
    assert "version" not in mint["outputs"][0]["facets"]


@pytest.mark.airflow
def test_continual_mint_reports_its_pins_without_column_lineage_and_a_skip_reports_nothing(
    airflow_db: None, default_catalog: CatalogConfig
) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_provider_ct.operators.continual import ContinualMintOperator

    catalog = default_catalog.load()
    events = create_managed_table(catalog, "ev.append_only", SCHEMA)
    data = pa.table({"k": [1, 2], "v": ["a", "b"]}, schema=SCHEMA)
    recorded = replace_contents(events, 3, data)  # the test's own record of the pin
    advance(catalog.load_table("ev.append_only"), 20)
    definition = (
        "CREATE CONTINUAL TASK upsert (k BIGINT, v STRING) ON INPUT append_only AS ("
        " INSERT INTO upsert SELECT k, v FROM append_only; )"
    )
    mint = ContinualMintOperator(task_id="m", definition=definition, namespace="ev", time=5)
    minted = mint.execute({})
    lineage = mint.get_openlineage_facets_on_complete(None)
    ((source,),) = [lineage.inputs]
    assert source.facets["symlinks"].identifiers[0].name == "ev.append_only"
    assert source.facets["version"].datasetVersion == str(recorded)
    assert minted["inputs"] == {"ev.append_only": recorded}
    (target,) = lineage.outputs
    assert target.facets["ct"].facts["batchId"] == minted["id"]
    assert "columnLineage" not in target.facets and "version" not in target.facets

    skipped = ContinualMintOperator(
        task_id="r", definition=definition, namespace="ev", time=5, read_only=True
    )
    with pytest.raises(AirflowSkipException):
        skipped.execute({})
    assert skipped.get_openlineage_facets_on_complete(None).outputs == []
