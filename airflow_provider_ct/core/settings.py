"""The ``CT_*`` environment settings that tune refresh and diff decisions.

Every such setting is read here, so its name, default, meaning and the
error a bad value raises are in one place, and each can be tested without
Spark or Airflow. They are read at the moment a decision is made (not at
import), so a job's environment, or a test's ``monkeypatch``, wins.

* ``CT_FULL_BELOW_ROWS``: inputs this small run ``refresh="auto"`` in full.
* ``CT_FULL_ABOVE_CHANGE``: a ``group`` tick whose change is a larger share
  of its inputs runs in full.
* ``CT_DRIVER_DIFF_ROWS``: rows per side a correction may diff on the driver.
* ``CT_READ_ONLY``: the deployment-wide read-only switch.
* ``CT_STORE_TIMEOUT_S``, ``CT_STORE_RETRIES``, ``CT_CATALOG_TIMEOUT_S``:
  how long a request to the object store or the catalog may wait, and how
  often a failed store request is retried (``core/outages.py``).

A number that does not parse, is negative or NaN is a
:class:`~airflow_provider_ct.exceptions.ConfigurationError` naming the
variable: a typo must not silently fall back to the default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from airflow_provider_ct.exceptions import ConfigurationError

#: ``refresh="auto"`` runs the full correction when the inputs hold at most
#: this many rows in all (docs/decisions.md: below it a full correction
#: costs less than an incremental one, whatever changed).
SMALL_INPUT_ROWS = 250_000
#: Overrides :data:`SMALL_INPUT_ROWS` in the job's environment; 0 turns the rule off.
SMALL_INPUT_ROWS_ENV = "CT_FULL_BELOW_ROWS"

#: ``refresh="auto"`` runs a ``group`` tick in full when the inputs' change
#: (by snapshot summaries) is more than this share of their rows: it then
#: touches most groups, and recomputing them costs more than the query
#: once (measured in docs/decisions.md).
LARGE_CHANGE_SHARE = 0.10
#: Overrides :data:`LARGE_CHANGE_SHARE` in the job's environment; 0 turns the rule off.
LARGE_CHANGE_SHARE_ENV = "CT_FULL_ABOVE_CHANGE"

#: ``refresh="auto"`` runs a ``group`` tick in full when its restricted reads
#: would still cover this share of the inputs' bytes (Iceberg's scan planning
#: over the pinned snapshots: ``ivm/plan/read_estimate``) and its result is small.
FULL_READ_SHARE = 0.5
#: Overrides :data:`FULL_READ_SHARE` in the job's environment; 0 turns the rule off.
FULL_READ_SHARE_ENV = "CT_FULL_ABOVE_READ_SHARE"
#: A view result this small (rows) costs its full correction little beyond the
#: scan (the diff runs on the driver): the read estimate's rule applies only then.
SMALL_RESULT_ROWS = 200_000

#: ``refresh="auto"`` runs in full while the view's own incremental batches
#: cost more than its full ones (``ivm/plan/refresh.history_reason``), and tries
#: incremental again after this many batches in full.
RETRY_INCREMENTAL_AFTER = 8
#: Overrides :data:`RETRY_INCREMENTAL_AFTER` in the job's environment; 0 turns the rule off.
RETRY_INCREMENTAL_AFTER_ENV = "CT_RETRY_INCREMENTAL_AFTER"

#: Most groups an in-place view's kept state may hold: the driver holds it as
#: Arrow (a tick turns only the groups its change touches into Python objects,
#: and reads and writes the state table whole). Past it the view runs its
#: fallback plan (``group``, ``partition`` or ``full``).
STATE_GROUPS_ON_DRIVER = 2_000_000
#: Overrides :data:`STATE_GROUPS_ON_DRIVER` in the job's environment.
STATE_GROUPS_ENV = "CT_STATE_GROUPS_ON_DRIVER"

#: Rows a side may have for the driver to diff it (each pull stops one row later).
ROWS_ON_DRIVER = 200_000
#: Overrides :data:`ROWS_ON_DRIVER` in the job's environment; 0 turns the driver's diff off.
DRIVER_DIFF_ROWS_ENV = "CT_DRIVER_DIFF_ROWS"
#: A full correction whose target's files hold at most this many bytes (snapshot
#: summary) may diff up to :data:`NARROW_ROWS_ON_DRIVER` rows on the driver.
NARROW_TARGET_BYTES = 32 * 2**20
NARROW_ROWS_ON_DRIVER = 1_000_000

#: Deployment-wide read-only switch (0dt upgrades, incident response).
READ_ONLY_ENV = "CT_READ_ONLY"
#: Spellings of ``CT_READ_ONLY`` that switch writes off (case and spaces aside).
TRUE_VALUES = ("1", "true", "yes", "on")

#: Seconds one request to the object store may wait to connect, and then for
#: each answer, before it counts as failed (S3A, pyarrow, PyIceberg's FileIO).
STORE_TIMEOUT_S = 10.0
STORE_TIMEOUT_ENV = "CT_STORE_TIMEOUT_S"
#: Retries of a failed store request (S3A's, pyarrow's; the AWS SDK's own are off).
STORE_RETRIES = 1
STORE_RETRIES_ENV = "CT_STORE_RETRIES"
#: Seconds one request to the catalog (REST, the JDBC database) may wait.
CATALOG_TIMEOUT_S = 10.0
CATALOG_TIMEOUT_ENV = "CT_CATALOG_TIMEOUT_S"

#: An environment variable's number: a row count or a share.
_N = TypeVar("_N", int, float)


def env_number(
    name: str,
    default: _N,
    parse: Callable[[str], _N],
    what: str,
    environ: Mapping[str, str] | None = None,
) -> _N:
    """The number set in the environment variable ``name``, at least 0, else ``default``.

    Unset or blank means ``default``. A value ``parse`` refuses, a negative
    one or NaN is a :class:`ConfigurationError` that says ``name must be
    <what>`` and quotes the value.

    :param environ: where to read (default: ``os.environ``).
    """
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        number = parse(value)
    except ValueError:
        number = None
    if number is None or not number >= 0:  # also NaN
        raise ConfigurationError(f"{name} must be {what}, got {value!r}")
    return number


def env_row_count(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """A row count set in the environment variable ``name`` (a bad value is an error)."""
    return env_number(name, default, int, "a number of rows, not negative", environ)


def retry_incremental_after() -> int:
    """Batches in full after which a view that lost incrementally tries again (0: rule off).

    Which refresh modes learn from a view's history is decided with the
    other rules (``ivm/plan/decision.RefreshSettings``); this only reads the number.
    """
    return env_row_count(RETRY_INCREMENTAL_AFTER_ENV, RETRY_INCREMENTAL_AFTER)


def small_input_rows() -> int:
    """Inputs this small (in rows) run in full, where the refresh mode chooses by size."""
    return env_row_count(SMALL_INPUT_ROWS_ENV, SMALL_INPUT_ROWS)


def large_change_share() -> float:
    """The change share above which a group tick runs in full (0: never).

    A bad value in the environment is a :class:`ConfigurationError`.
    """
    what = "a share of the inputs' rows (0 turns the rule off)"
    return env_number(LARGE_CHANGE_SHARE_ENV, LARGE_CHANGE_SHARE, float, what)


def full_read_share() -> float:
    """The share of the inputs' bytes above which a group tick runs in full (0: never)."""
    what = "a share of the inputs' bytes (0 turns the rule off)"
    return env_number(FULL_READ_SHARE_ENV, FULL_READ_SHARE, float, what)


def state_groups_on_driver() -> int:
    """Most groups of a kept in-place state: ``CT_STATE_GROUPS_ON_DRIVER`` when set."""
    return env_row_count(STATE_GROUPS_ENV, STATE_GROUPS_ON_DRIVER)


def rows_on_driver() -> int:
    """The limit in force: ``CT_DRIVER_DIFF_ROWS`` when set (a bad value is an error)."""
    return env_row_count(DRIVER_DIFF_ROWS_ENV, ROWS_ON_DRIVER)


def full_rows_on_driver(target_bytes: int) -> int:
    """The limit for a full correction whose target's files hold ``target_bytes``.

    Why larger than :func:`rows_on_driver`: a full correction's sides are the
    whole query and the whole target, and on a 500k-row view the Spark path's
    tick took 8.8-9.9 s where the driver's took 6.2-6.6 s (bench/view_bench.py,
    5M orders; docs/decisions.md). Its sizes are known before the pulls (the
    target's summary), so a narrow target (few bytes per row) gets the
    larger limit; a wide one, or a set ``CT_DRIVER_DIFF_ROWS``, the usual one.
    """
    limit = rows_on_driver()
    if limit == 0 or os.environ.get(DRIVER_DIFF_ROWS_ENV, "").strip():
        return limit
    return max(limit, NARROW_ROWS_ON_DRIVER) if target_bytes <= NARROW_TARGET_BYTES else limit


def read_only(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``CT_READ_ONLY`` switches the whole deployment to read-only.

    One parser for every reader (the view operators and the collections), so
    they can never disagree on whether a spelling means "on". Anything but
    :data:`TRUE_VALUES` (unset included) means writes are allowed.

    :param environ: where to read (default: ``os.environ``).
    """
    env = os.environ if environ is None else environ
    return env.get(READ_ONLY_ENV, "").strip().lower() in TRUE_VALUES


def _positive_seconds(name: str, default: float, environ: Mapping[str, str] | None) -> float:
    what = "a number of seconds above 0"
    value = env_number(name, default, float, what, environ)
    if value <= 0:
        raise ConfigurationError(f"{name} must be {what}, got {value!r}")
    return value


def store_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a store request may wait (``CT_STORE_TIMEOUT_S``; a bad value is an error)."""
    return _positive_seconds(STORE_TIMEOUT_ENV, STORE_TIMEOUT_S, environ)


def store_retries(environ: Mapping[str, str] | None = None) -> int:
    """Retries of a failed store request (``CT_STORE_RETRIES``)."""
    return env_number(STORE_RETRIES_ENV, STORE_RETRIES, int, "a count, not negative", environ)


def catalog_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a catalog request may wait (``CT_CATALOG_TIMEOUT_S``)."""
    return _positive_seconds(CATALOG_TIMEOUT_ENV, CATALOG_TIMEOUT_S, environ)
