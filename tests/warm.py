"""Warm Spark drivers started by tests: a private folder for them, and their end."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from airflow_provider_ct.engine import protocol

#: The driver program, as it shows in a driver's command line.
SERVER_MODULE = "airflow_provider_ct.engine.server"


def driver_pids(folder: Path) -> list[int]:
    """Pids of the drivers under ``folder``: published, or running with a ``--dir`` there.

    The command line catches a driver whose pid file is gone or was
    overwritten (one that is retiring, or a hung one a newer driver replaced).
    """
    pids = set()
    for pid_file in folder.glob(f"*/{protocol.PID_FILE}"):
        with contextlib.suppress(OSError, ValueError):
            pids.add(int(pid_file.read_text()))
    prefix = f"{folder.resolve()}/".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if SERVER_MODULE.encode() in argv and any(a.startswith(prefix) for a in argv):
            pids.add(int(entry.name))
    return sorted(pids)


def stop_drivers(pids: list[int], timeout: float = 30.0) -> None:
    """SIGTERM every driver at once (each retires once idle), then SIGKILL what is left."""
    import psutil

    family = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            family += [proc, *proc.children(recursive=True)]
            proc.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(family, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def stop_driver(pid: int) -> None:
    """SIGTERM (the driver retires once idle), then SIGKILL after 30 s."""
    stop_drivers([pid])


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
        stop_drivers(driver_pids(folder))
        if old is None:
            os.environ.pop(protocol.WARM_DIR_ENV, None)
        else:
            os.environ[protocol.WARM_DIR_ENV] = old
        shutil.rmtree(folder, ignore_errors=True)
