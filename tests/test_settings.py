"""The ``CT_*`` settings that tune refresh and diff decisions: defaults, values, refusals.

Plain Python: no Spark, no Airflow. Each setting is read from the
environment at the moment it is asked for, so ``monkeypatch`` sets it. The
suite's conftest turns the two size rules off for every test
(``CT_FULL_BELOW_ROWS=0``, ``CT_FULL_ABOVE_CHANGE=0``), so the defaults are
checked with the variable removed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_ct.core import settings
from airflow_provider_ct.core.settings import (
    DRIVER_DIFF_ROWS_ENV,
    LARGE_CHANGE_SHARE,
    LARGE_CHANGE_SHARE_ENV,
    NARROW_ROWS_ON_DRIVER,
    NARROW_TARGET_BYTES,
    READ_ONLY_ENV,
    ROWS_ON_DRIVER,
    SMALL_INPUT_ROWS,
    SMALL_INPUT_ROWS_ENV,
    env_number,
    env_row_count,
    full_rows_on_driver,
    read_only,
    rows_on_driver,
)
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.ivm.plan.decision import RefreshSettings
from airflow_provider_ct.ivm.plan.modes import RefreshMode


def _auto() -> RefreshSettings:
    """The thresholds a ``refresh="auto"`` tick runs under, read now."""
    return RefreshSettings.of(RefreshMode.AUTO)


#: (variable, reader with ``auto`` where it takes a refresh mode, default, a valid value
#: as text, that value parsed, the start of the error for a bad value).
NUMBERS: list[tuple[str, Callable[[], float], float, str, float, str]] = [
    (
        SMALL_INPUT_ROWS_ENV,
        lambda: _auto().small_rows,
        SMALL_INPUT_ROWS,
        " 1000 ",
        1000,
        "CT_FULL_BELOW_ROWS must be a number of rows, not negative",
    ),
    (
        LARGE_CHANGE_SHARE_ENV,
        lambda: _auto().large_change,
        LARGE_CHANGE_SHARE,
        "0.25",
        0.25,
        "CT_FULL_ABOVE_CHANGE must be a share of the inputs' rows",
    ),
    (
        DRIVER_DIFF_ROWS_ENV,
        rows_on_driver,
        ROWS_ON_DRIVER,
        "7",
        7,
        "CT_DRIVER_DIFF_ROWS must be a number of rows, not negative",
    ),
]
IDS = [n[0] for n in NUMBERS]


def test_the_variables_keep_their_documented_names() -> None:
    """Deployments set these names; renaming one would silently drop their setting."""
    assert SMALL_INPUT_ROWS_ENV == "CT_FULL_BELOW_ROWS"
    assert LARGE_CHANGE_SHARE_ENV == "CT_FULL_ABOVE_CHANGE"
    assert DRIVER_DIFF_ROWS_ENV == "CT_DRIVER_DIFF_ROWS"
    assert READ_ONLY_ENV == "CT_READ_ONLY"


@pytest.mark.parametrize(("name", "read", "default", "text", "value", "error"), NUMBERS, ids=IDS)
def test_unset_or_blank_is_the_default(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    read: Callable[[], float],
    default: float,
    text: str,
    value: float,
    error: str,
) -> None:
    monkeypatch.delenv(name, raising=False)
    assert read() == default
    monkeypatch.setenv(name, "  ")
    assert read() == default


@pytest.mark.parametrize(("name", "read", "default", "text", "value", "error"), NUMBERS, ids=IDS)
def test_a_valid_value_is_used_and_zero_turns_the_rule_off(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    read: Callable[[], float],
    default: float,
    text: str,
    value: float,
    error: str,
) -> None:
    monkeypatch.setenv(name, text)
    assert read() == value
    monkeypatch.setenv(name, "0")
    assert read() == 0


@pytest.mark.parametrize("bad", ["many", "-5", "nan", "1e3x"])
@pytest.mark.parametrize(("name", "read", "default", "text", "value", "error"), NUMBERS, ids=IDS)
def test_a_bad_value_is_refused_naming_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    read: Callable[[], float],
    default: float,
    text: str,
    value: float,
    error: str,
    bad: str,
) -> None:
    monkeypatch.setenv(name, bad)
    with pytest.raises(ConfigurationError) as raised:
        read()
    message = str(raised.value)
    assert message.startswith(error)
    assert message.endswith(f"got {bad!r}")


def test_row_counts_are_whole_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SMALL_INPUT_ROWS_ENV, "1.5")
    with pytest.raises(ConfigurationError, match="CT_FULL_BELOW_ROWS must be a number of rows"):
        _auto()


@pytest.mark.parametrize("refresh", ["incremental", "full"])
def test_only_auto_chooses_by_size(monkeypatch: pytest.MonkeyPatch, refresh: str) -> None:
    """The size rules are off for the other modes, and a bad value is then not even read."""
    monkeypatch.setenv(SMALL_INPUT_ROWS_ENV, "many")
    monkeypatch.setenv(LARGE_CHANGE_SHARE_ENV, "many")
    thresholds = RefreshSettings.of(RefreshMode.parse(refresh))
    assert thresholds.small_rows == 0
    assert thresholds.large_change == 0.0


def test_a_narrow_targets_full_correction_gets_the_larger_driver_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DRIVER_DIFF_ROWS_ENV, raising=False)
    assert full_rows_on_driver(NARROW_TARGET_BYTES) == NARROW_ROWS_ON_DRIVER
    assert full_rows_on_driver(NARROW_TARGET_BYTES + 1) == ROWS_ON_DRIVER
    monkeypatch.setenv(DRIVER_DIFF_ROWS_ENV, "7")  # a set limit is the limit for every correction
    assert full_rows_on_driver(0) == 7
    monkeypatch.setenv(DRIVER_DIFF_ROWS_ENV, "0")
    assert full_rows_on_driver(0) == 0
    monkeypatch.setenv(DRIVER_DIFF_ROWS_ENV, "-1")
    with pytest.raises(ConfigurationError, match="CT_DRIVER_DIFF_ROWS must be"):
        full_rows_on_driver(0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),  # the default: writes allowed
        ("", False),
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("On", True),
        ("0", False),
        ("false", False),
        ("off", False),
        ("nonsense", False),  # only the listed spellings switch writes off
    ],
)
def test_read_only_switch(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv(READ_ONLY_ENV, raising=False)
    else:
        monkeypatch.setenv(READ_ONLY_ENV, value)
    assert read_only() is expected
    environ = {} if value is None else {READ_ONLY_ENV: value}
    assert read_only(environ) is expected


def test_env_number_reads_a_given_mapping() -> None:
    """Callers that carry their own environment (a job's) are read the same way."""
    assert env_row_count("CT_X", 3, {}) == 3
    assert env_row_count("CT_X", 3, {"CT_X": "12"}) == 12
    assert env_number("CT_X", 0.5, float, "a share", {"CT_X": "0.75"}) == 0.75
    with pytest.raises(ConfigurationError, match=r"^CT_X must be a share, got '-1'$"):
        env_number("CT_X", 0.5, float, "a share", {"CT_X": "-1"})


def test_settings_import_neither_spark_nor_airflow() -> None:
    """The module is read by the operators (Airflow) and the jobs (Spark): it needs neither."""
    source = Path(settings.__file__).read_text(encoding="utf-8")
    assert "pyspark" not in source
    assert "airflow." not in source.replace("airflow_provider_ct.", "")
