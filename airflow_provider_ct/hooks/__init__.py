"""Airflow hooks of airflow-provider-ct."""

from __future__ import annotations
