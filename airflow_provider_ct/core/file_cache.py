"""What a long-lived driver keeps of immutable files between ticks (columns, deletes, manifests).

An incremental tick reads the rows its inputs' changes deleted from the data
files that held them, and a merge-on-read delete touches many files (TPC-H's
RF2 deletes 0.1% of the line items, spread over every data file). Reading
those files' columns again on every tick is most of what a small tick costs.

Iceberg never rewrites a file in place: a data file, a delete file and a
manifest are immutable once committed, and a rewrite gets a new path. So what
was decoded from one can be kept and reused by the next tick in the same
process (the warm driver runs for hours), and never goes stale. Keys still
carry what the decoded value depends on besides the bytes: the file's size
(a cheap guard against a reused path), the field's id and type (type
promotion changes the decoded array), and the table's name mapping (files
without field ids are read by name).

One process-wide cache, bounded in bytes (``CT_DRIVER_FILE_CACHE_MB``;
0 turns it off; a warm driver defaults it to its driver memory, other
processes to 1024), least recently used first out. A
``spark-submit`` job runs in a fresh process, so it only ever misses.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_provider_ct.exceptions import ConfigurationError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The cache's budget in MiB (0: no cache).
CACHE_MB_ENV = "CT_DRIVER_FILE_CACHE_MB"
DEFAULT_CACHE_MB = 1024
#: What a manifest entry is taken to weigh (its Python objects; an estimate).
ENTRY_BYTES = 2048


@dataclass
class CacheStats:
    """Counts since the process started (reports and tests read them)."""

    hits: int = 0
    misses: int = 0
    evicted: int = 0


class FileCache:
    """A byte-bounded least-recently-used map, safe for the driver's concurrent jobs."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.held = 0
        self.stats = CacheStats()
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.stats.misses += 1
                return None
            self._items.move_to_end(key)
            self.stats.hits += 1
            return item[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Keep ``value`` (weighing ``size`` bytes) unless it alone exceeds the budget."""
        if size > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.held -= old[1]
            self._items[key] = (value, size)
            self.held += size
            while self.held > self.budget:
                _, (_, dropped) = self._items.popitem(last=False)
                self.held -= dropped
                self.stats.evicted += 1

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.held = 0


_lock = threading.Lock()
_cache: FileCache | None = None
_budget: int | None = None


def budget_bytes() -> int:
    """The configured budget; a value that is not a non-negative integer is refused."""
    raw = os.environ.get(CACHE_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_CACHE_MB * 1024 * 1024
    try:
        mib = int(raw)
    except ValueError:
        mib = -1
    if mib < 0:
        raise ConfigurationError(f"{CACHE_MB_ENV}={raw!r}: expected a whole number of MiB >= 0")
    return mib * 1024 * 1024


def file_cache() -> FileCache | None:
    """The process's cache (None when its budget is 0); a changed budget starts a new one."""
    global _cache, _budget
    budget = budget_bytes()
    with _lock:
        if budget != _budget:
            _cache = FileCache(budget) if budget else None
            _budget = budget
            log.info("driver file cache: %d MiB", budget // (1024 * 1024))
        return _cache


def cached(key: Hashable, load: Callable[[], T], size: Callable[[T], int]) -> T:
    """``load()``, or what an earlier call with ``key`` loaded (when the cache is on)."""
    cache = file_cache()
    if cache is None:
        return load()
    value = cache.get(key)
    if value is None:
        value = load()
        cache.put(key, value, size(value))
    return value  # type: ignore[no-any-return]


def live_entries(manifest: Any, io: Any) -> list[Any]:
    """A manifest's live entries (``fetch_manifest_entry``), decoded once per process.

    A manifest is immutable once committed; its length and sequence number
    guard the key as a file's size does. Decoding one costs about 2 ms
    (PyIceberg converts its Avro schema each time), and a tick reads the
    same manifests of its target, its inputs and its state table again.
    """
    return cached(
        ("manifest", manifest.manifest_path, manifest.manifest_length, manifest.sequence_number),
        lambda: list(manifest.fetch_manifest_entry(io, discard_deleted=True)),
        lambda entries: len(entries) * ENTRY_BYTES,
    )
