"""Upper policies for external inputs, spelled as strings (JSON- and XCom-friendly).

* ``wallclock`` or ``wallclock:<allowance ms>``: :class:`WallClockUpper`;
* ``summary:<key>``: :class:`SummaryKeyUpper` reading the producer's watermark.

Policies are keyed by input table. Keys are normalized like table names in a
query (``ct.ns.t``, ``NS.T`` and ``ns.t`` are one input) and a key naming no
input is refused: a typo would otherwise leave the input on the 1 s
wall-clock default without a word, and the view would read an external
table its producer has not finished writing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_ct.core.frontier import MAX_TIMESTAMP, is_ascii_digits
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.core.timeline import (
    DEFAULT_LATE_COMMIT_ALLOWANCE_MS,
    SummaryKeyUpper,
    UpperPolicy,
    WallClockUpper,
)
from airflow_provider_ct.exceptions import ConfigurationError, QueryError


def parse_policy(spec: Any) -> UpperPolicy:
    """One policy from its spelling; anything else raises :class:`ConfigurationError`."""
    if not isinstance(spec, str):
        raise ConfigurationError(
            f"upper policy {spec!r:.100} must be a string: 'wallclock[:<ms>]' or 'summary:<key>'"
        )
    kind, _, arg = spec.partition(":")
    if kind == "wallclock":
        if not arg:
            return WallClockUpper(DEFAULT_LATE_COMMIT_ALLOWANCE_MS)
        if not is_ascii_digits(arg):
            raise ConfigurationError(
                f"upper policy {spec!r:.100}: the allowance must be milliseconds (ASCII digits)"
            )
        # Length first: int() refuses very long digit strings with a raw ValueError.
        if len(arg.lstrip("0")) > len(str(MAX_TIMESTAMP)) or int(arg) > MAX_TIMESTAMP:
            raise ConfigurationError(
                f"upper policy {spec!r:.100}: an allowance beyond {MAX_TIMESTAMP} ms would "
                "never seal anything"
            )
        return WallClockUpper(int(arg))
    if kind == "summary" and arg.strip():
        return SummaryKeyUpper(arg)
    raise ConfigurationError(
        f"unknown upper policy {spec!r:.100}; use 'wallclock[:<ms>]' or 'summary:<key>'"
    )


def parse_policies(
    specs: Mapping[str, str] | None,
    inputs: Iterable[str],
    catalog_name: str,
) -> dict[str, UpperPolicy]:
    """Policies keyed by normalized input name, refusing keys that name no input.

    :param inputs: the view's or task's input tables (any spelling).
    :param catalog_name: the catalog prefix keys may carry (``ct.ns.t``).
    """
    if not specs:
        return {}
    if not isinstance(specs, Mapping):
        raise ConfigurationError(
            "input_upper_policies must map input tables to policies, got "
            f"{type(specs).__name__}: {specs!r:.100}"
        )
    names = sorted({normalize_table_name(t, catalog_name) for t in inputs})
    out: dict[str, UpperPolicy] = {}
    spelled: dict[str, str] = {}
    for key, spec in specs.items():
        name = _policy_key(key, catalog_name, names)
        if name in spelled:
            raise ConfigurationError(
                f"input_upper_policies names input {name} twice ({spelled[name]!r} and {key!r})"
            )
        spelled[name] = key
        out[name] = parse_policy(spec)
    return out


def _policy_key(key: Any, catalog_name: str, inputs: list[str]) -> str:
    if not isinstance(key, str):
        raise ConfigurationError(f"input_upper_policies key {key!r:.100} must be a table name")
    try:
        name = normalize_table_name(key, catalog_name)
    except QueryError as exc:
        raise ConfigurationError(f"input_upper_policies key {key!r:.100}: {exc}") from None
    if name not in inputs:
        raise ConfigurationError(
            f"input_upper_policies key {key!r:.100} names {name}, which is not an input; "
            f"the inputs are {inputs}"
        )
    return name
