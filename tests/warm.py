"""Warm Spark drivers started by tests: a private folder for them, and their end."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from airflow_provider_ct.engine import protocol


def driver_pids(folder: Path) -> list[int]:
    """Pids of the drivers published under ``folder``."""
    pids = []
    for pid_file in folder.glob(f"*/{protocol.PID_FILE}"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pid_file.read_text()))
    return pids


def stop_driver(pid: int) -> None:
    """SIGTERM (the driver retires once idle), then SIGKILL after 30 s."""
    import psutil

    try:
        proc = psutil.Process(pid)
        family = [proc, *proc.children(recursive=True)]
        proc.terminate()
    except psutil.NoSuchProcess:
        return
    _, alive = psutil.wait_procs(family, timeout=30)
    for p in alive:
        p.kill()


@contextlib.contextmanager
def private_warm_dir() -> Iterator[Path]:
    """``CT_WARM_DIR`` set to a new short folder; every driver in it stopped after.

    Short, under ``/tmp``: a socket's path must fit in 107 bytes.
    """
    folder = Path(tempfile.mkdtemp(prefix="ctw-", dir="/tmp"))
    old = os.environ.get(protocol.WARM_DIR_ENV)
    os.environ[protocol.WARM_DIR_ENV] = str(folder)
    try:
        yield folder
    finally:
        for pid in driver_pids(folder):
            stop_driver(pid)
        if old is None:
            os.environ.pop(protocol.WARM_DIR_ENV, None)
        else:
            os.environ[protocol.WARM_DIR_ENV] = old
        shutil.rmtree(folder, ignore_errors=True)
