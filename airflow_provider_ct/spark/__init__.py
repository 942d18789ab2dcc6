"""Spark side of the package: configuration shared by every Spark entry point."""

from __future__ import annotations
