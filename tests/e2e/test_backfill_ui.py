"""A backfill started from the Airflow web UI in headless Chromium.

Logs in, opens the DAG, clicks Trigger, chooses Backfill, types the date range
into the date pickers, checks the dialog's "<INTERVALS> runs will be triggered", and
clicks Run Backfill, as a person would. Screenshots of the filled dialog and
of the finished runs are saved under ``test-artifacts/``. The view's table
must then hold one snapshot per interval, equal to DuckDB's result.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from devtools.devbrowser import chromium, log_in, wait_until
from tests.e2e.checks import FROM_DATE, INTERVALS, TO_DATE
from tests.e2e.conftest import Stack

pytestmark = [
    pytest.mark.timeout(2400),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.ui,
]

DAG_ID = "revenue_backfill_ui"


def _visible(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return [e for e in driver.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]


def _pick(driver: Any, index: int, day: str, hour_minute: str) -> None:
    """Types a date and time into the index-th date picker of the dialog."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_elements(By.CSS_SELECTOR, "[data-testid=datetime-input]")[index].click()
    popover = wait_until(
        lambda: _visible(driver, "[data-scope=popover][data-part=content]"), what="date picker"
    )[0]
    for placeholder, text in (("YYYY/MM/DD", day), ("HH:mm", hour_minute)):
        field = popover.find_element(By.CSS_SELECTOR, f"input[placeholder='{placeholder}']")
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(text)
    field.send_keys(Keys.ENTER)
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    wait_until(
        lambda: not _visible(driver, "[data-scope=popover][data-part=content]"),
        what="the date picker to close",
    )


def test_ui_backfill_in_headless_chromium(stack: Stack, artifacts: Path) -> None:
    from selenium.webdriver.common.by import By

    airflow = stack.airflow
    with chromium(1600, 1250) as driver:  # tall enough to show the whole dialog
        log_in(driver, airflow.url, airflow.username, airflow.password)
        driver.get(f"{airflow.url}/dags/{DAG_ID}")
        wait_until(
            lambda: driver.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-button]"),
            what="the Trigger button",
        ).click()
        wait_until(
            lambda: driver.find_element(
                By.XPATH, "//label[contains(., 'Run this Dag for a range of dates')]"
            ),
            what="the Backfill choice",
        ).click()
        wait_until(lambda: _visible(driver, "[data-testid=datetime-input]"), what="date range")
        _pick(driver, 0, FROM_DATE.strftime("%Y/%m/%d"), FROM_DATE.strftime("%H:%M"))
        _pick(driver, 1, TO_DATE.strftime("%Y/%m/%d"), TO_DATE.strftime("%H:%M"))
        dialog = wait_until(
            lambda: [d for d in _visible(driver, "[role=dialog]") if "Run Backfill" in d.text],
            what="the backfill dialog",
        )[0]
        wait_until(
            lambda: f"{INTERVALS} runs will be triggered" in dialog.text,
            what=f"the dialog to announce {INTERVALS} runs",
        )
        unpause = dialog.find_element(
            By.XPATH, f".//label[contains(., 'Unpause {DAG_ID} on trigger')]//input"
        )
        assert unpause.is_selected()  # the UI unpauses the DAG so the runs can start
        driver.save_screenshot(str(artifacts / "ui-backfill-dialog.png"))
        dialog.find_element(By.XPATH, ".//button[normalize-space()='Run Backfill']").click()

        runs = stack.api.wait_for_runs(DAG_ID, INTERVALS, timeout=1800)
        driver.get(f"{airflow.url}/dags/{DAG_ID}/runs")
        time.sleep(5)  # let the runs list render
        driver.save_screenshot(str(artifacts / "ui-backfill-runs.png"))
    stack.check_view(runs, DAG_ID)
