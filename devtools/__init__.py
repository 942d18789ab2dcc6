"""Development tooling (not packaged): a local Airflow stack and a headless browser.

Used by ``scripts/demo.py`` and the end-to-end tests only. It lives outside
``airflow_provider_ct`` so that the provider's wheel holds the provider alone:
no subprocess control of Airflow, no ``/proc`` scans, no Selenium.
"""

from __future__ import annotations
