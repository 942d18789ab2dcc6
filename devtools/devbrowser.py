"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium.

For the end-to-end UI test and the demo's screenshot; Selenium is a dev dependency.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1600, height: int = 1000) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver") or CHROMEDRIVER
    options = Options()
    options.binary_location = shutil.which("chromium") or CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # runs as root in CI containers
        "--disable-dev-shm-usage",
        "--disable-gpu",
        # No network here beyond localhost: without these Chromium keeps
        # dialling Google's services and logs refused connections.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Polls ``check`` until it returns something truthy (UI renders asynchronously)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what or check}: {last}")


def log_in(driver: Any, url: str, username: str, password: str) -> None:
    """Signs in through the simple auth manager's login form, as a person would."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    wait_until(lambda: driver.find_element(By.NAME, "username"), what="the login form")
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_until(lambda: "/auth/login" not in driver.current_url, what="the login to finish")
