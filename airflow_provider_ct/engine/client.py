"""The task's side of the warm engine: find (or start) the driver, run a job on it.

:func:`run_warm_job` is all an operator needs: it makes sure a driver with
the job's settings runs on this host (starting one under the folder's lock
if none answers), sends the job with the catalog's password over the
socket, relays the job's log lines into this process's log (the Airflow
task log), and returns the job's report or raises the job's own exception.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import airflow_provider_ct
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.engine import protocol as p
from airflow_provider_ct.engine.choice import (  # noqa: F401 (re-exported: the engines' names)
    ENGINE_EXTRA,
    ENGINE_SPARK_SUBMIT,
    ENGINE_WARM,
    ENGINES,
    EngineChoice,
    choose_engine,
)
from airflow_provider_ct.exceptions import ConfigurationError, SparkJobError
from airflow_provider_ct.spark.conf import JarSettings, spark_conf
from airflow_provider_ct.spark.job_errors import error_from_payload
from airflow_provider_ct.spark.jobs import JobSpec

log = logging.getLogger(__name__)
#: The job's own log lines, relayed from the driver.
job_log = logging.getLogger("airflow_provider_ct.engine.job")

#: Spark connection extra setting the warm driver's idle timeout.
IDLE_TIMEOUT_EXTRA = "ct_warm_idle_timeout"
#: Environment variable setting it for every task without an operator or connection value.
IDLE_TIMEOUT_ENV = "CT_WARM_IDLE_TIMEOUT"
DEFAULT_IDLE_TIMEOUT = 900.0
#: How long a JVM may take to start (a loaded 2-core host: ~15 s).
START_TIMEOUT = 180.0
PING_TIMEOUT = 30.0
#: Tries of a job the driver never accepted (it was retiring, or died idle).
ATTEMPTS = 3
#: ``spark.sql.*`` settings fixed when the JVM starts; they belong to the driver's identity.
STATIC_SQL_PREFIXES = (
    "spark.sql.extensions",
    "spark.sql.catalog.",
    "spark.sql.catalogImplementation",
    "spark.sql.warehouse.dir",
    "spark.sql.hive.",
    "spark.sql.globalTempDatabase",
    "spark.sql.queryExecutionListeners",
    "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.cache.serializer",
    "spark.sql.ui.",
    "spark.sql.event.truncate.length",
    "spark.sql.sources.schemaStringLengthThreshold",
    "spark.sql.broadcastExchange.maxThreadThreshold",
    "spark.sql.subquery.maxThreadThreshold",
    "spark.sql.metadataCacheTTLSeconds",
    "spark.sql.legacy.sessionInitWithConfigDefaults",
    "spark.sql.defaultUrlStreamHandlerFactory.enabled",
)


class _NotStarted(Exception):
    """The driver never accepted the job (gone, or retiring): safe to try again."""


def idle_timeout(
    value: float | None, extra: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> float:
    """The warm driver's idle timeout: the operator's, the connection's, the environment's.

    Without any, 15 min: long enough to span an hourly DAG's tasks and the
    minutes between frequent ticks, short enough that a host whose tasks
    stopped (or whose catalogs changed) gets its memory back.
    ``$CT_WARM_IDLE_TIMEOUT`` sets the default of a whole worker (the test
    suite sets a short one, so the drivers of its many temporary catalogs
    do not pile up).
    """
    environ = os.environ if environ is None else environ
    candidates = (
        (value, "warm_idle_timeout"),
        (extra.get(IDLE_TIMEOUT_EXTRA), f"the Spark connection's extra {IDLE_TIMEOUT_EXTRA}"),
        (environ.get(IDLE_TIMEOUT_ENV) or None, IDLE_TIMEOUT_ENV),
    )
    chosen, source = next(((v, s) for v, s in candidates if v is not None), (None, ""))
    if chosen is None:
        return DEFAULT_IDLE_TIMEOUT
    try:
        seconds = float(chosen)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{source}={chosen!r}: not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise ConfigurationError(f"{source}={chosen!r}: must be a positive number of seconds")
    return seconds


def per_job_key(key: str) -> bool:
    """Whether a Spark setting can differ per job (set on the job's session)."""
    return key.startswith("spark.sql.") and not key.startswith(STATIC_SQL_PREFIXES)


@dataclass(frozen=True)
class WarmSpec:
    """A warm driver's settings. ``conf`` never holds a secret (it is on the JVM's command line)."""

    master: str
    conf: dict[str, str]
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    app_name: str = "ct-warm"
    #: Settings of each job's own session (``spark.sql.*`` that may change at run time).
    session_conf: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_catalog(
        cls,
        config: CatalogConfig,
        *,
        master: str,
        driver_memory: str = "2g",
        extra: Mapping[str, str] | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        jar_settings: JarSettings | None = None,
    ) -> WarmSpec:
        """The same settings :mod:`airflow_provider_ct.spark.conf` gives ``spark-submit``.

        Plus: no UI, and for local masters a driver bound to 127.0.0.1 (the
        JVM's own ports, see docs/engines.md). ``extra``'s runtime SQL
        settings go to each job's session; the rest make the driver's identity.
        """
        conf = spark_conf(config, jar_settings=jar_settings)
        conf["spark.driver.memory"] = driver_memory
        conf["spark.ui.enabled"] = "false"
        if master.startswith("local"):
            conf["spark.driver.bindAddress"] = "127.0.0.1"
            conf["spark.driver.host"] = "127.0.0.1"
        session = {"spark.sql.shuffle.partitions": "8"}
        for key, value in (extra or {}).items():
            (session if per_job_key(key) else conf)[key] = str(value)
        return cls(master, conf, idle_timeout, session_conf=session)

    @property
    def identity(self) -> str:
        return p.identity(self.master, self.conf)


def run_warm_job(
    driver: WarmDriver,
    *,
    job: JobSpec,
    config: CatalogConfig,
    description: BatchDescription,
    what: str,
) -> dict[str, Any]:
    """Run one job on ``driver`` (started if none answers); its report, or its own exception.

    :param what: the job, for messages (``"the write job for ns.view"``).
    """
    request = {
        "op": "job",
        "job": job.to_json(),
        "catalog": asdict(config),
        "description": description.to_json(),
        "session_conf": driver.spec.session_conf,
    }
    for attempt in range(1, ATTEMPTS + 1):
        pid = driver.ensure(hide=config.secrets())
        log.info("running %s on the warm Spark driver %d (%s)", what, pid, driver.folder)
        try:
            return driver.submit(request, what)
        except _NotStarted:
            if driver.cancelled:
                break
            log.warning("the warm driver %d did not take %s (%d/%d)", pid, what, attempt, ATTEMPTS)
    if driver.cancelled:
        raise SparkJobError(f"{what} was cancelled (the task was killed)")
    raise SparkJobError(f"{what}: no warm Spark driver accepted it after {ATTEMPTS} attempts")


class WarmDriver:
    """The driver for one :class:`WarmSpec` on this host: check, start, submit, stop."""

    def __init__(self, spec: WarmSpec, base: Path | None = None) -> None:
        self.spec = spec
        #: The connection of the job being followed (closed by :meth:`cancel`).
        self._job_socket: socket.socket | None = None
        self.cancelled = False
        self.base = base or p.base_dir()
        self.folder = self.base / spec.identity
        if len(str(self.folder / p.SOCKET_FILE)) > p.MAX_SOCKET_PATH:
            raise ConfigurationError(
                f"{self.folder} is too long for a Unix socket's path; set {p.WARM_DIR_ENV} "
                "to a shorter folder"
            )

    def pid(self) -> int | None:
        """The pid of the driver answering on the socket, if any."""
        try:
            frame = self._exchange({"op": "ping"}, PING_TIMEOUT)
        except (OSError, ValueError):
            return None
        return int(frame["pid"]) if frame and frame.get("type") == p.PONG else None

    def ensure(self, hide: tuple[str, ...] = ()) -> int:
        """The running driver's pid; starts one if none answers (one starter at a time).

        :param hide: secrets that must not reach the driver's environment.
        """
        p.private_dir(self.base)
        p.private_dir(self.folder)
        fd = os.open(self.folder / p.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            pid = self.pid()
            if pid is not None:
                return pid
            return self._start(hide)

    def _start(self, hide: tuple[str, ...]) -> int:
        for name in (p.SOCKET_FILE, p.TOKEN_FILE, p.PID_FILE):
            (self.folder / name).unlink(missing_ok=True)
        settings = {
            "master": self.spec.master,
            "conf": self.spec.conf,
            "app_name": self.spec.app_name,
        }
        p.write_private(self.folder / p.CONF_FILE, json.dumps(settings))
        command = [
            sys.executable, "-m", "airflow_provider_ct.engine.server", "--dir", str(self.folder),
            "--idle-timeout", str(self.spec.idle_timeout), "--daemon",
        ]  # fmt: skip
        log.info("starting a warm Spark driver in %s (master %s)", self.folder, self.spec.master)
        started = time.monotonic()
        with _log_file(self.folder / p.LOG_FILE) as out:
            subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                env=driver_env(hide),
                check=True,
            )  # returns at once: the driver detaches (double fork)
        while time.monotonic() - started < START_TIMEOUT:
            pid = self.pid()
            if pid is not None:
                log.info("warm driver %d ready after %.1f s", pid, time.monotonic() - started)
                return pid
            if not _alive(_read_pid(self.folder)) and time.monotonic() - started > 5:
                break
            time.sleep(0.25)
        raise SparkJobError(
            f"the warm Spark driver did not start within {START_TIMEOUT:.0f} s; "
            f"its log ({self.folder / p.LOG_FILE}) ends with:\n{_tail(self.folder / p.LOG_FILE)}"
        )

    def submit(self, request: dict[str, Any], what: str) -> dict[str, Any]:
        """Send a job and follow it: relay its log, return its report or raise its error."""
        try:
            sock = self._connect(PING_TIMEOUT)
            sock.sendall(_encode({**request, "token": self._token()}))
        except OSError as exc:
            raise _NotStarted() from exc
        sock.settimeout(None)  # a job takes as long as it takes
        self._job_socket = sock
        try:
            return self._follow(sock, what)
        finally:
            self._job_socket = None

    def cancel(self) -> None:
        """Hang up on the running job: the driver cancels its Spark jobs (the task was killed).

        Called from another thread than :meth:`submit`'s (Airflow's ``on_kill``).
        """
        self.cancelled = True
        sock = self._job_socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _follow(self, sock: socket.socket, what: str) -> dict[str, Any]:
        """Relay the job's log frames until its report or error."""
        started: int | None = None
        with sock, sock.makefile("rb") as stream:
            while True:
                try:
                    frame = p.read_frame(stream)
                except (OSError, ValueError):
                    frame = None
                if frame is None:
                    if started is None:
                        raise _NotStarted()
                    raise SparkJobError(
                        f"{what} failed: the warm Spark driver (pid {started}) went away while "
                        f"running it (killed, or out of memory?); see {self.folder / p.LOG_FILE}. "
                        "The next task, or this task's retry, starts a new driver"
                    )
                kind = frame.get("type")
                if kind == p.STARTED:
                    started = int(frame["pid"])
                elif kind == p.LOG:
                    job_log.log(int(frame["level"]), "%s: %s", frame["name"], frame["message"])
                elif kind == p.REPORT:
                    report: dict[str, Any] = frame["report"]
                    return report
                elif kind == p.ERROR:
                    raise error_from_payload(frame["error"], what)
                else:  # refused: the token changed under us (a new driver)
                    raise _NotStarted()

    def stop(self, timeout: float = 60.0) -> None:
        """Ask the driver to stop once its jobs are done, and wait until it has."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._exchange({"op": "stop"}, PING_TIMEOUT)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)

    def _token(self) -> str:
        return (self.folder / p.TOKEN_FILE).read_text().strip()

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.folder / p.SOCKET_FILE))
        except OSError:
            sock.close()
            raise
        return sock

    def _exchange(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        token = self._token()
        with self._connect(timeout) as sock, sock.makefile("rb") as stream:
            sock.sendall(_encode({**request, "token": token}))
            return p.read_frame(stream)


def driver_env(hide: tuple[str, ...]) -> dict[str, str]:
    """The driver's environment: this task's, without Airflow's settings or any secret.

    A task's environment carries ``AIRFLOW_CONN_*`` URLs (passwords) and
    Airflow's own settings; the driver needs none of them, and anyone can
    read a process's initial environment through ``/proc`` as root or as
    this user (and it outlives the task).
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AIRFLOW", "_AIRFLOW")) and not any(s and s in value for s in hide)
    }
    package_root = str(Path(airflow_provider_ct.__file__).resolve().parent.parent)
    bin_dir = os.path.dirname(sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join(filter(None, [bin_dir, env.get("PATH")]))
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _encode(frame: dict[str, Any]) -> bytes:
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


@contextlib.contextmanager
def _log_file(path: Path) -> Any:
    """The driver's log, appended to (restarted once it passes 20 MB), 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    if path.exists() and path.stat().st_size > 20 * 1024 * 1024:
        flags |= os.O_TRUNC
    fd = os.open(path, flags, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_pid(folder: Path) -> int | None:
    try:
        return int((folder / p.PID_FILE).read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie counts as dead)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
