"""What the warm driver and its clients share: file layout, frames, identity.

A warm driver lives in a private folder (mode 0700) of its own, named after
its identity (see :func:`identity`)::

    <base>/<identity>/
        lock        flock: one task at a time checks, starts or retires the driver
        conf.json   the driver's Spark settings (no secrets), written by the client
        token       random secret the driver writes at start (0600)
        pid         the driver's pid
        sock        its Unix domain socket (0600); no TCP port is opened
        driver.log  its output (the server's log lines and the JVM's)

Frames are JSON objects, one per line, in both directions. A request is the
first line a client sends; it carries the token and an ``op`` (``ping``,
``job``, ``stop``). Answers to a job: ``started`` (the driver accepted it),
any number of ``log`` frames (the job's logging records), then ``report`` or
``error``. A connection that ends before ``started`` means the job never
ran (the driver was stopping or gone) and may be retried on another driver;
one that ends after it means the driver died with the job in flight.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import IO, Any

from airflow_provider_ct.exceptions import ConfigurationError

#: Environment variable naming the folder under which warm drivers live.
WARM_DIR_ENV = "CT_WARM_DIR"
#: A folder the warm driver writes one cProfile dump per job into (performance work only).
PROFILE_ENV = "CT_WARM_PROFILE"
#: Bumped when the protocol changes: a driver of another version is another identity.
PROTOCOL_VERSION = 1
LOCK_FILE, CONF_FILE, TOKEN_FILE, PID_FILE = "lock", "conf.json", "token", "pid"
SOCKET_FILE, LOG_FILE = "sock", "driver.log"
#: Largest frame either side reads (a description or report is far smaller).
MAX_FRAME_BYTES = 64 * 1024 * 1024
#: Linux's limit on a Unix socket's path (``sun_path``), less the trailing NUL.
MAX_SOCKET_PATH = 107

# Frame types.
STARTED, LOG, REPORT, ERROR, PONG, REFUSED, STOPPING = (
    "started",
    "log",
    "report",
    "error",
    "pong",
    "refused",
    "stopping",
)


def base_dir() -> Path:
    """Where drivers live: ``$CT_WARM_DIR``, ``$XDG_RUNTIME_DIR/ct-warm`` or ``/tmp/ct-warm-<uid>``.

    Short on purpose: a socket's path must fit in 107 bytes.
    """
    configured = os.environ.get(WARM_DIR_ENV)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "ct-warm"
    return Path(f"/tmp/ct-warm-{os.getuid()}")


def private_dir(path: Path) -> Path:
    """Create ``path`` (and a missing parent) as 0700, or check an existing one is private.

    A folder in a shared place such as ``/tmp`` could have been created by
    someone else to catch our socket or token: it must be ours, a real
    folder (not a symlink), and closed to group and others.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigurationError(f"{path} is not a folder owned by this user: refusing to use it")
    if info.st_mode & 0o077:
        raise ConfigurationError(
            f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}); "
            "the warm driver's folder must be 0700"
        )
    return path


def identity(master: str, conf: dict[str, str]) -> str:
    """A driver's identity: the hash of everything fixed when its JVM starts.

    Two tasks share a driver only if they would start the very same one
    (master, jars, catalog and other non-SQL settings, Python interpreter).
    """
    text = json.dumps(
        {"v": PROTOCOL_VERSION, "python": sys.executable, "master": master, "conf": conf},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def write_frame(out: IO[bytes], frame: dict[str, Any]) -> None:
    out.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
    out.flush()


def read_frame(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next frame, or ``None`` at the end of the stream (or a reset connection)."""
    try:
        line = stream.readline(MAX_FRAME_BYTES + 1)
    except (ConnectionResetError, BrokenPipeError):
        return None
    if not line:
        return None
    if len(line) > MAX_FRAME_BYTES or not line.endswith(b"\n"):
        raise ValueError("frame too large or truncated")
    frame = json.loads(line)
    if not isinstance(frame, dict):
        raise ValueError("a frame must be a JSON object")
    return frame


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically by a 0600 file holding ``text``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)
