"""What a warm driver process sets up for performance: its file cache's size, per-job profiles.

Kept apart from :mod:`.server`, which owns the protocol and the jobs'
isolation; these are the driver's tunables.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from airflow_provider_ct.engine.protocol import PROFILE_ENV


@contextlib.contextmanager
def profiled(group: str) -> Iterator[None]:
    """Profile one job into ``$CT_WARM_PROFILE/<group>.prof`` when that variable names a folder.

    A warm driver is a separate, long-lived process: an outside profiler
    sees every job mixed with the idle loop, so performance work asks the
    driver itself for one profile per job (see docs/engines.md).
    """
    folder = os.environ.get(PROFILE_ENV)
    if not folder:
        yield
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        profiler.dump_stats(str(Path(folder) / f"{group}.prof"))


def size_file_cache(driver_memory: str | None) -> None:
    """The driver file cache gets as much as the JVM's driver memory, unless set explicitly.

    The memory a task asks for (``driver_memory=``) is the one knob users
    size a driver by; the decoded columns live beside the JVM, in this
    process, and are bounded by the same amount (``CT_DRIVER_FILE_CACHE_MB``
    overrides). See docs/engines.md.
    """
    from airflow_provider_ct.core.file_cache import CACHE_MB_ENV

    mb = memory_mb(driver_memory) if driver_memory else None
    if mb is not None:
        os.environ.setdefault(CACHE_MB_ENV, str(mb))


def memory_mb(text: str) -> int | None:
    """A Spark memory size (``2g``, ``512m``, ``1024k``, ``1t``; bare: MiB) in MiB, else None."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    value = text.strip().lower().removesuffix("b")
    factor = units.get(value[-1:]) if value else None
    number = value[:-1] if factor is not None else value
    try:
        return int(float(number) * (factor or 1))
    except ValueError:
        return None
