"""Upper policies for external inputs, spelled as strings (JSON- and XCom-friendly).

* ``wallclock`` or ``wallclock:<allowance ms>``: :class:`WallClockUpper`;
* ``summary:<key>``: :class:`SummaryKeyUpper` reading the producer's watermark.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_provider_ct.core.timeline import (
    DEFAULT_LATE_COMMIT_ALLOWANCE_MS,
    SummaryKeyUpper,
    UpperPolicy,
    WallClockUpper,
)
from airflow_provider_ct.exceptions import ConfigurationError


def parse_policy(spec: str) -> UpperPolicy:
    kind, _, arg = spec.partition(":")
    if kind == "wallclock":
        if not arg:
            return WallClockUpper(DEFAULT_LATE_COMMIT_ALLOWANCE_MS)
        if not arg.isdigit():
            raise ConfigurationError(f"upper policy {spec!r}: allowance must be milliseconds")
        return WallClockUpper(int(arg))
    if kind == "summary" and arg:
        return SummaryKeyUpper(arg)
    raise ConfigurationError(
        f"unknown upper policy {spec!r}; use 'wallclock[:<ms>]' or 'summary:<key>'"
    )


def parse_policies(specs: Mapping[str, str] | None) -> dict[str, UpperPolicy]:
    return {name: parse_policy(spec) for name, spec in (specs or {}).items()}
