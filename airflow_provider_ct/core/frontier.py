"""Timestamps and frontiers.

Times are epoch milliseconds. A *frontier* over this totally ordered time
domain is either a single time ``f`` (every time ``t >= f`` may still change)
or the *empty* frontier (nothing may change any more: the collection is
closed). A table's *upper* is such a frontier: every time ``t`` with
``t < upper`` is sealed and its contents are final.

This mirrors the antichain frontiers of differential dataflow restricted to a
total order, which is all Iceberg snapshot times need.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import re
import time as _time
from dataclasses import dataclass
from typing import Any

from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.exceptions import FrontierError, MalformedSummaryError

#: The smallest time (the Unix epoch). The upper of a table nothing sealed yet.
MIN_TIMESTAMP = 0
#: The largest time we accept: it must fit a signed 64-bit integer, because
#: Iceberg and Spark read our summary values as ``long``.
MAX_TIMESTAMP = 2**63 - 1
#: Digits of MAX_TIMESTAMP: a longer digit string is out of range without
#: parsing it (``int()`` refuses strings beyond 4300 digits with a raw ValueError).
_MAX_DIGITS = len(str(MAX_TIMESTAMP))
_ASCII_DIGITS = re.compile(r"[0-9]+")


def is_ascii_digits(text: Any) -> bool:
    """True for a non-empty string of ASCII digits ``0``-``9`` only.

    ``str.isdigit()`` is not enough: it accepts ``"²"`` or Arabic-Indic digits,
    which ``int()`` then refuses (or, for the latter, silently converts).
    """
    return isinstance(text, str) and _ASCII_DIGITS.fullmatch(text) is not None


def check_timestamp(value: Any, what: str = "timestamp") -> int:
    """Return ``value`` as a timestamp, or raise :class:`FrontierError` naming it.

    Booleans and floats are refused on purpose: ``True`` or ``1.5`` as a time is
    always a bug upstream (a wrongly templated argument, seconds for ms).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrontierError(f"{what} must be an integer of epoch milliseconds, got {value!r}")
    if value < MIN_TIMESTAMP or value > MAX_TIMESTAMP:
        raise FrontierError(
            f"{what} {value} is outside [{MIN_TIMESTAMP}, {MAX_TIMESTAMP}] epoch milliseconds"
        )
    return value


def parse_timestamp(value: Any, what: str = "time") -> int:
    """A time argument (an integer, or decimal text from a template) as epoch ms.

    Rendered templates are strings, so ``"1700000000000"`` is accepted; any
    other text (signs, decimals, exponents, non-ASCII digits) raises
    :class:`FrontierError` naming the value rather than a raw ``ValueError``.
    """
    if isinstance(value, str):
        text = value.strip()
        if not is_ascii_digits(text):
            raise FrontierError(
                f"{what}={value!r:.100} is not an integer of epoch milliseconds (ASCII digits only)"
            )
        if len(text.lstrip("0")) > _MAX_DIGITS:
            raise FrontierError(f"{what}={value!r:.100} is beyond the largest time {MAX_TIMESTAMP}")
        value = int(text)
    return check_timestamp(value, what)


def now_ms() -> int:
    """The wall clock as epoch milliseconds."""
    return _time.time_ns() // 1_000_000


def timestamp_from_datetime(value: _dt.datetime) -> int:
    """Epoch milliseconds of an aware datetime (naive datetimes are refused)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise FrontierError(f"datetime {value!r} has no time zone; pass an aware datetime")
    # Integer arithmetic (no float rounding); works for pendulum DateTimes too.
    utc = value.astimezone(_dt.UTC)
    millis = calendar.timegm(utc.utctimetuple()) * 1000 + utc.microsecond // 1000
    return check_timestamp(millis, "datetime")


def format_timestamp(value: int) -> str:
    """Human-readable UTC rendering of a timestamp, for logs and the demo."""
    seconds, ms = divmod(value, 1000)
    base = _dt.datetime.fromtimestamp(seconds, tz=_dt.UTC)
    return base.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms:03d}Z"


@dataclass(frozen=True, order=False)
class Frontier:
    """A frontier over epoch-millisecond times: one time, or empty.

    ``Frontier(None)`` is the empty frontier. Comparisons follow frontier
    order: the empty frontier is beyond every other, and ``a <= b`` means
    ``b`` is at or past ``a``.
    """

    time: int | None

    def __post_init__(self) -> None:
        if self.time is not None:
            check_timestamp(self.time, "frontier time")

    # -- constructors -------------------------------------------------------
    @classmethod
    def at(cls, time: int) -> Frontier:
        """The frontier whose only element is ``time``."""
        return cls(check_timestamp(time, "frontier time"))

    @classmethod
    def minimum(cls) -> Frontier:
        """The frontier at the smallest time: nothing is sealed."""
        return cls(MIN_TIMESTAMP)

    @classmethod
    def empty(cls) -> Frontier:
        """The empty frontier: everything is sealed, the collection is closed."""
        return cls(None)

    @classmethod
    def sealing(cls, time: int) -> Frontier:
        """The smallest frontier that seals ``time`` (``time + 1``)."""
        check_timestamp(time, "time")
        if time == MAX_TIMESTAMP:
            return cls.empty()
        return cls(time + 1)

    # -- queries ------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return self.time is None

    def less_equal(self, time: int) -> bool:
        """True if ``time`` is not yet sealed (some element of the frontier is <= it)."""
        return self.time is not None and self.time <= time

    def seals(self, time: int) -> bool:
        """True if ``time`` is sealed: ``time < self``."""
        return not self.less_equal(time)

    def _key(self) -> tuple[int, int]:
        return (1, 0) if self.time is None else (0, self.time)

    def __lt__(self, other: Frontier) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Frontier) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Frontier) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Frontier) -> bool:
        return self._key() >= other._key()

    def join(self, other: Frontier) -> Frontier:
        """The later of two frontiers."""
        return self if self >= other else other

    def meet(self, other: Frontier) -> Frontier:
        """The earlier of two frontiers."""
        return self if self <= other else other

    # -- (de)serialisation --------------------------------------------------
    def to_summary(self) -> str:
        """The ``ct.upper`` spelling of this frontier."""
        return SummaryKeys.EMPTY_FRONTIER if self.time is None else str(self.time)

    @classmethod
    def from_summary(cls, value: str, *, key: str = SummaryKeys.UPPER, where: str = "") -> Frontier:
        """Parse a ``ct.upper``-style value; malformed values raise a clear error."""
        if value == SummaryKeys.EMPTY_FRONTIER:
            return cls.empty()
        return cls(parse_summary_timestamp(value, key=key, where=where))

    def to_json(self) -> int | None:
        return self.time

    @classmethod
    def from_json(cls, value: Any) -> Frontier:
        return cls.empty() if value is None else cls.at(value)

    def __str__(self) -> str:
        return "[]" if self.time is None else f"[{self.time}]"


def parse_summary_timestamp(value: str, *, key: str, where: str = "") -> int:
    """Parse a decimal epoch-ms summary value, naming the key and snapshot on failure."""
    location = f" in {where}" if where else ""
    text = value.strip() if isinstance(value, str) else value
    if not is_ascii_digits(text):
        raise MalformedSummaryError(
            f"snapshot-summary key {key!r}{location} has value {value!r:.100}; "
            "expected a non-negative integer of epoch milliseconds"
        )
    # Checked before int(): it refuses very long digit strings with a raw ValueError.
    if len(text.lstrip("0")) > _MAX_DIGITS or int(text) > MAX_TIMESTAMP:
        raise MalformedSummaryError(
            f"snapshot-summary key {key!r}{location} has value {value!r:.100}, beyond the "
            "largest time"
        )
    return int(text)
