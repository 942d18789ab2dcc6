"""The "Continual tables" page (the provider's Airflow plugin) on the session's real Airflow.

* ``airflow plugins`` in a fresh ``AIRFLOW_HOME`` lists the plugin;
* in headless Chromium: log in, open the page from the UI's navigation, find
  every managed table of the stack's embedded catalog with the upper and lag
  that PyIceberg and the clock give independently, open one table's history
  and find its batches and plot; screenshots go to ``test-artifacts/``;
* without a login (or with a forged token) the page and its API answer
  401/403 and show no table.

The stack's DAGs may not have written anything yet (when this file runs
alone), so the test writes one managed table of its own, ``e2e_page.ticks``,
with the core's compare-and-append at times it chooses; the views the
backfill tests wrote are checked too when they exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.collections import CollectionKind, register_collection
from airflow_provider_ct.collections.expiry import expire_snapshots
from airflow_provider_ct.collections.holds import register_reader
from airflow_provider_ct.core.deletes import write_position_deletes
from airflow_provider_ct.core.frontier import format_timestamp, now_ms
from airflow_provider_ct.core.producers import TimedChange
from airflow_provider_ct.core.staging import batch_data_dir
from airflow_provider_ct.core.tables import create_managed_table
from devtools.devbrowser import chromium, log_in, wait_until
from tests.conftest import SCHEMA
from tests.e2e.conftest import Stack
from tests.e2e_dags.e2e_dags import EMBEDDED, VIEWS
from tests.helpers import append_between, live_data_files, stage_rows

pytestmark = [pytest.mark.timeout(900), pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
TABLE, EVENTS = "e2e_page.ticks", "e2e_page.events"
MINUTE = 60_000
#: (batch id, rows inserted, rows retracted, drift rows) of each batch the test writes.
BATCHES = [("p1", 3, 0, 0), ("p2", 2, 0, 0), ("p3", 1, 2, 2), ("p4", 0, 0, 0), ("p5", 0, 1, 0)]


_append = append_between


def _write_ticks(catalog: Any, base: int) -> int:
    """``TABLE`` with the batches of ``BATCHES``, one minute apart from ``base``; its upper."""
    table = create_managed_table(catalog, TABLE, SCHEMA)
    full, incremental = {"ct.refresh": "full"}, {"ct.refresh": "incremental"}
    files = stage_rows(table, "p1", [(1, "a"), (2, "b"), (3, "c")])
    _append(table, 0, base + 1, "p1", add_files=files, extra_summary=full)
    files = stage_rows(table, "p2", [(4, "d"), (5, "e")])
    _append(table, base + 1, base + MINUTE + 1, "p2", add_files=files, extra_summary=incremental)
    mine = set(live_data_files(table))
    table.append(pa.table({"k": [8, 9], "v": ["x", "y"]}, schema=SCHEMA))  # drift: 2 rows
    foreign = sorted(set(live_data_files(table)) - mine)
    files = stage_rows(table, "p3", [(6, "f")])
    _append(
        table,
        base + MINUTE + 1,
        base + 2 * MINUTE + 1,
        "p3",
        add_files=files,
        remove_files=foreign,
        extra_summary=incremental,
    )
    _append(table, base + 2 * MINUTE + 1, base + 3 * MINUTE + 1, "p4")  # frontier only
    delete = batch_data_dir(table.location(), "p5") + f"/del-{uuid.uuid4().hex}.parquet"
    write_position_deletes(table.io, delete, [(sorted(live_data_files(table))[0], 0)])
    upper = base + 4 * MINUTE + 1
    change = TimedChange(base + 4 * MINUTE, delete_files=(delete,))
    _append(table, base + 3 * MINUTE + 1, upper, "p5", changes=[change], extra_summary=full)
    return upper


def _write_events(catalog: Any, base: int) -> None:
    """``EVENTS``, a collection ``TABLE`` reads, expired down to ``TABLE``'s hold.

    Three writes (30 s, 90 s, 150 s after ``base``) and a tick to 5 min; the
    hold of ``TABLE`` (a table reader: its upper - 1 = ``base`` + 4 min) then
    lets expiry (retention 0) drop the snapshots before the one holding the
    contents at that time.
    """
    events = register_collection(catalog, EVENTS, SCHEMA, CollectionKind.APPEND_ONLY)
    lower = 0
    for i, second in enumerate((30, 90, 150)):
        time = base + second * 1000
        files = stage_rows(events, f"e{i}", [(i, "event")])
        _append(events, lower, time + 1, f"e{i}", add_files=files)
        lower = time + 1
    _append(events, lower, base + 5 * MINUTE, "tick")
    register_reader(catalog, TABLE, [EVENTS], since=base)
    report = expire_snapshots(catalog, EVENTS, retention_ms=0)
    assert report.status == "expired", report


def _independent_uppers(catalog: Any) -> dict[str, int | None]:
    """Every managed table's upper, read with plain PyIceberg (not with the provider's Timeline).

    Managed: the ``ct.managed`` property, or a ``ct.upper`` on main. Upper:
    the ``ct.upper`` of the newest snapshot on main's parent chain that has one.
    """
    uppers: dict[str, int | None] = {}
    for namespace in catalog.list_namespaces():
        for identifier in catalog.list_tables(namespace):
            table = catalog.load_table(identifier)
            chain, snapshot = [], table.metadata.current_snapshot()
            while snapshot is not None:
                chain.append(snapshot.summary.additional_properties if snapshot.summary else {})
                parent = snapshot.parent_snapshot_id
                snapshot = None if parent is None else table.metadata.snapshot_by_id(parent)
            values = [s["ct.upper"] for s in chain if "ct.upper" in s]
            if table.metadata.properties.get("ct.managed") == "true" or values:
                upper = values[0] if values else "0"
                uppers[".".join(identifier)] = None if upper == "empty" else int(upper)
    return uppers


def _rows(driver: Any) -> dict[str, dict[str, str]]:
    from selenium.webdriver.common.by import By

    found = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "tr[data-table]"):
        attrs = ("data-table", "data-upper", "data-lag-ms", "data-snapshots", "class")
        found[row.get_attribute("data-table")] = {a: row.get_attribute(a) or "" for a in attrs}
        found[row.get_attribute("data-table")]["text"] = row.text
    return found


def _open_page_from_navigation(driver: Any, url: str) -> None:
    """Browse -> Continual tables in the UI's navigation, then into the page's iframe."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    wait_until(
        lambda: driver.find_element(By.XPATH, "//button[normalize-space()='Browse']"),
        what="the Browse menu",
    ).click()
    wait_until(
        lambda: driver.find_element(
            By.XPATH, "//*[@role='menuitem'][contains(., 'Continual tables')]"
        ),
        what="the Continual tables menu item",
    ).click()
    wait_until(lambda: "/plugin/continual-tables" in driver.current_url, what="the plugin route")
    frame = wait_until(lambda: driver.find_element(By.TAG_NAME, "iframe"), what="the iframe")
    driver.switch_to.frame(frame)


@pytest.mark.ui
def test_continual_tables_page_in_headless_chromium(stack: Stack, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    writer = stack.embedded.load()
    base = (now_ms() // MINUTE - 10) * MINUTE
    upper = _write_ticks(writer, base)
    _write_events(writer, base)
    airflow = stack.airflow
    before, uppers_before = now_ms(), _independent_uppers(writer)
    with chromium(1600, 1000) as driver:
        log_in(driver, airflow.url, airflow.username, airflow.password)
        _open_page_from_navigation(driver, airflow.url)
        rows = wait_until(lambda: _rows(driver), what="the tables of the page")
        page_now = int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-now-ms"))
        after, uppers_after = now_ms(), _independent_uppers(writer)
        driver.switch_to.default_content()
        driver.save_screenshot(str(artifacts / "continual-tables.png"))

        assert set(rows) == set(uppers_before) == set(uppers_after), (rows, uppers_after)
        assert before <= page_now <= after
        for name, row in rows.items():
            assert "error" not in row["class"], row
            low, high = uppers_before[name], uppers_after[name]
            assert low is not None and high is not None  # no test table is closed
            shown = int(row["data-upper"])
            assert low <= shown <= high, (name, row, low, high)  # the upper may move meanwhile
            lag = int(row["data-lag-ms"])
            assert max(0, before - high) <= lag <= max(0, after - low), (name, lag)
        assert int(rows[TABLE]["data-upper"]) == upper
        hold = format_timestamp(upper - 1)  # TABLE's hold on EVENTS, and so EVENTS's ct.since
        assert f"{TABLE} {hold}" in rows[EVENTS]["text"], rows[EVENTS]
        assert rows[EVENTS]["text"].count(hold) == 2, rows[EVENTS]  # the hold and ct.since
        assert int(rows[EVENTS]["data-upper"]) == base + 5 * MINUTE
        assert rows[EVENTS]["data-snapshots"] == "2"  # the write at 150 s and the tick
        for dag_id, (namespace, conn_id, _) in VIEWS.items():
            view = f"{namespace}.revenue"
            if conn_id == EMBEDDED and view in rows:  # written by an earlier backfill test
                assert dag_id in rows[view]["text"], rows[view]  # "Produced by" its DAG

        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
        driver.find_element(By.LINK_TEXT, TABLE).click()
        plot = wait_until(lambda: driver.find_element(By.ID, "lag-plot"), what="the plot")
        assert plot.get_attribute("data-ticks") == str(len(BATCHES))
        cells = [
            [c.text for c in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, "#batches tbody tr")
        ]
        got = [(c[8], int(c[3]), int(c[4]), c[6].split(" ")[0]) for c in reversed(cells)]
        assert got == [(b, i, r, str(d) if d else "none") for b, i, r, d in BATCHES]
        driver.switch_to.default_content()
        driver.save_screenshot(str(artifacts / "continual-tables-history.png"))


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_continual_tables_page_refuses_anonymous_requests(stack: Stack) -> None:
    writer = stack.embedded.load()
    if TABLE not in {
        ".".join(i) for ns in writer.list_namespaces() for i in writer.list_tables(ns)
    }:
        _write_ticks(writer, (now_ms() // MINUTE - 10) * MINUTE)
    url = stack.airflow.url
    paths = ["/ct/", "/ct/api/tables", f"/ct/tables/{TABLE}", f"/ct/api/tables/{TABLE}"]
    for path in paths:
        status, body = _get(url + path)
        assert status == 401, (path, status, body)
        assert TABLE not in body
        status, body = _get(url + path, {"Cookie": "_token=forged"})
        assert status in (401, 403), (path, status, body)
        assert TABLE not in body
    status, body = _get(url + "/ct/api/tables", {"Authorization": f"Bearer {stack.api.token()}"})
    assert status == 200, body  # the same request with a login's token is served
    tables = {t["name"] for c in json.loads(body)["catalogs"] for t in c["tables"]}
    assert TABLE in tables
    token = {"Authorization": f"Bearer {stack.api.token()}"}
    for path in ("/ct/tables/e2e_page.nope", "/ct/api/tables/e2e_page.nope"):
        status, body = _get(url + path, token)
        assert status == 404 and "does not exist" in body, (path, status, body)


def test_airflow_plugins_lists_the_provider_plugin(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    out = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "plugins", "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    plugin = plugins["continual_tables"]
    assert "airflow-provider-ct" in plugin["source"]  # loaded from the package's entry point
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/ct"]
    assert [(v["name"], v["href"], v["url_route"]) for v in plugin["external_views"]] == [
        ("Continual tables", "ct/", "continual-tables")
    ]
