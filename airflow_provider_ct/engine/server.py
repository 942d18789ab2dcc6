"""The warm driver: a long-lived PySpark driver that runs write jobs on request.

Started by :mod:`.client` on first use (``python -m
airflow_provider_ct.engine.server --dir DIR``), it reads its Spark settings
from ``DIR/conf.json``, starts one SparkSession, and serves jobs over the
Unix socket ``DIR/sock`` until it has been idle for ``--idle-timeout``
seconds. See :mod:`.protocol` for the folder's layout and the frames.

Why each choice:

* **Each job in its own ``spark.newSession()``** and its own thread: temp
  views (every write job registers ``__ct_input_0`` ...), SQL settings and
  the catalog's password stay within the job; the SparkContext (JVM,
  executors, jars) is what is shared, and what makes a tick fast.
* **The catalog's password arrives with each request** and is set on that
  job's session only: it is never on the driver's command line or in its
  environment (both readable by other users through ``/proc`` or ``ps``).
* **A Unix socket in a 0700 folder, plus a token** from a 0600 file,
  compared in constant time, plus the peer's uid (``SO_PEERCRED``): only
  this user reaches the driver; there is no TCP port of ours to scan.
* **A job's failure is a frame, not a crash**: the error is described as
  :func:`~airflow_provider_ct.spark.job_errors.failure_payload` describes
  it for ``spark-submit``, so the operator raises the same class.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from airflow_provider_ct.engine import protocol as p
from airflow_provider_ct.engine.tuning import profiled, size_file_cache

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_provider_ct.core.catalog import CatalogConfig

log = logging.getLogger("airflow_provider_ct.engine.server")


class _LogRouter(logging.Handler):
    """The driver's one log handler: every line to ``driver.log``, a job's lines to its client.

    A job's records are those logged by its thread. Every secret any request
    carried is scrubbed from every line, wherever it goes.
    """

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        self._stream = stream
        self._sinks: dict[int, Callable[[dict[str, Any]], None]] = {}
        self._secrets: set[str] = set()
        self._mutex = threading.Lock()

    def attach(self, sink: Callable[[dict[str, Any]], None], secrets_: tuple[str, ...]) -> None:
        with self._mutex:
            self._sinks[threading.get_ident()] = sink
            self._secrets.update(s for s in secrets_ if s)

    def detach(self) -> None:
        with self._mutex:
            self._sinks.pop(threading.get_ident(), None)

    def emit(self, record: logging.LogRecord) -> None:
        from airflow_provider_ct.core.catalog import scrub_secrets

        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + self.formatter.formatException(record.exc_info)  # type: ignore[union-attr]
            with self._mutex:
                text = scrub_secrets(self.format(record), self._secrets)
                message = scrub_secrets(message, self._secrets)
                sink = self._sinks.get(record.thread or 0)
                self._stream.write(text + "\n")
                self._stream.flush()
            if sink is not None:
                sink(
                    {
                        "type": p.LOG,
                        "level": record.levelno,
                        "name": record.name,
                        "message": message,
                    }
                )
        except Exception:  # a log line must never fail a job
            self.handleError(record)


class Driver:
    """The SparkSession and the bookkeeping of jobs in flight, idleness and stopping."""

    def __init__(
        self, folder: Path, spark: SparkSession, conf: dict[str, str], idle_timeout: float
    ) -> None:
        self.folder = folder
        self.spark = spark
        self.conf = conf
        self.idle_timeout = idle_timeout
        self.token = secrets.token_hex(32)
        self.router: _LogRouter | None = None
        self.socket_inode = 0
        self._active = 0
        self._last = time.monotonic()
        self._stopping = False
        self._mutex = threading.Lock()
        #: Digest of the storage keys jobs use (:meth:`check_storage_keys`).
        self._storage_keys: str | None = None

    def authentic(self, token: object) -> bool:
        return isinstance(token, str) and hmac.compare_digest(token.encode(), self.token.encode())

    def begin(self) -> bool:
        """Count a job in, unless the driver is stopping (the client then retries elsewhere)."""
        with self._mutex:
            if self._stopping:
                return False
            self._active += 1
            return True

    def end(self) -> None:
        with self._mutex:
            self._active -= 1
            self._last = time.monotonic()

    def stop_when_idle(self) -> None:
        """Refuse new jobs; :meth:`retire` then waits for those in flight."""
        with self._mutex:
            self._stopping = True

    def retire(self, force: bool = False) -> bool:
        """Stop accepting jobs if idle long enough (or ``force``): unpublish socket and token.

        Done under the folder's lock, which a client holds while it checks
        or starts a driver, so no client sees a half-retired one; if the lock
        is busy, try again later.
        """
        try:
            lock = open(self.folder / p.LOCK_FILE, "a+")  # noqa: SIM115 (closed below)
        except OSError:  # the folder is gone (removed by hand): nothing to unpublish
            lock = None
        with contextlib.ExitStack() as stack:
            if lock is not None:
                stack.enter_context(lock)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
            with self._mutex:
                idle = time.monotonic() - self._last >= self.idle_timeout
                if self._active or not (force or self._stopping or idle):
                    return False
                self._stopping = True
            self.unpublish()
        return True

    def unpublish(self) -> None:
        """Remove the socket, token and pid files, if they are still this driver's."""
        sock = self.folder / p.SOCKET_FILE
        with contextlib.suppress(OSError):
            if os.stat(sock).st_ino == self.socket_inode:
                sock.unlink()
        pid = self.folder / p.PID_FILE
        with contextlib.suppress(OSError, ValueError):
            if int(pid.read_text()) == os.getpid():
                pid.unlink()
                (self.folder / p.TOKEN_FILE).unlink()

    def check_catalog(self, config: CatalogConfig) -> None:
        """Refuse a request for a catalog this driver was not started for."""
        from airflow_provider_ct.exceptions import ConfigurationError
        from airflow_provider_ct.spark.conf import spark_conf

        for key, value in spark_conf(config, include_jars=False).items():
            if self.conf.get(key) != value:
                raise ConfigurationError(
                    f"this warm driver was started with {key}={self.conf.get(key)!r}, the job "
                    f"asks for {value!r}: a different catalog gets a driver of its own"
                )

    def check_storage_keys(self, secret: dict[str, str]) -> None:
        """Refuse a job whose storage keys differ from those of this driver's first job.

        Hadoop caches one filesystem per bucket for the JVM's life, built
        with the keys of the first job that touched it; a job with other keys
        (rotated ones) would silently use the old. The driver stops taking
        jobs instead, so the retry starts a fresh one. Only a digest is kept.
        """
        from airflow_provider_ct.exceptions import ConfigurationError

        keys = {k: v for k, v in secret.items() if k.startswith("fs.")}
        digest = hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()
        with self._mutex:
            if self._storage_keys is None:
                self._storage_keys = digest
                return
            if hmac.compare_digest(digest, self._storage_keys):
                return
            self._stopping = True
        raise ConfigurationError(
            "this warm driver reached object storage with other keys (Hadoop keeps one "
            "filesystem per bucket for the driver's life); it stops taking jobs: retry the task"
        )

    @contextlib.contextmanager
    def session(
        self, config: CatalogConfig, session_conf: dict[str, str], group: str
    ) -> Iterator[SparkSession]:
        """A new session for one job: its own SQL settings, temp views and catalog password."""
        from airflow_provider_ct.spark.conf import hadoop_session_conf, secret_spark_conf

        self.check_catalog(config)
        session = self.spark.newSession()
        jvm = session._jvm
        assert jvm is not None
        jvm.SparkSession.setActiveSession(session._jsparkSession)
        try:
            secret = hadoop_session_conf(secret_spark_conf(config))
            self.check_storage_keys(secret)
            for key, value in {**secret, **session_conf}.items():
                _set_conf(session, key, value)
            self.spark.sparkContext.setJobGroup(group, f"ct warm job {group}", True)
            yield session
        finally:
            _close_catalog(session, config.name)
            jvm.SparkSession.clearActiveSession()

    def run_job(
        self, request: dict[str, Any], send: Callable[[dict[str, Any]], None], group: str
    ) -> dict[str, Any]:
        """Run one job in this thread, relaying its log; its outcome as the final frame.

        Every outcome, failure included, is a frame: a job never takes the driver down.
        """
        from airflow_provider_ct.core.catalog import CatalogConfig
        from airflow_provider_ct.core.description import BatchDescription
        from airflow_provider_ct.spark.job_errors import failure_payload, typed_failure
        from airflow_provider_ct.spark.jobs import JobSpec

        assert self.router is not None
        found: tuple[str, ...] = ()
        try:
            config = CatalogConfig(**request["catalog"])
            found = config.secrets()
        except Exception as exc:
            return {"type": p.ERROR, "error": failure_payload(exc)}
        self.router.attach(send, found)
        try:
            spec = JobSpec.from_json(request.get("job"))
            desc = BatchDescription.from_json(request["description"])
            log.info("job %s: %s for %s (%s)", group, spec.kind, desc.target, desc.id)
            conf = dict(request.get("session_conf") or {})
            with self.session(config, conf, group) as session, profiled(group):
                report = spec.run(session, config, desc)
            log.info("report: %s", json.dumps(report.to_json()))
            return {"type": p.REPORT, "report": report.to_json()}
        except Exception as exc:
            failure = typed_failure(
                exc, config, f"the job for {request.get('description', {}).get('target', '?')}"
            )
            return {"type": p.ERROR, "error": failure_payload(failure, found)}
        finally:
            self.router.detach()


def _set_conf(session: SparkSession, key: str, value: str) -> None:
    """Set a job's SQL setting; a static one (fixed at JVM start) is a clear refusal."""
    from airflow_provider_ct.exceptions import ConfigurationError

    try:
        session.conf.set(key, value)
    except Exception as exc:
        raise ConfigurationError(
            f"{key} cannot be set per job on a warm driver (a static Spark setting?): "
            f"{str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None


def _close_catalog(session: SparkSession, name: str) -> None:
    """Close the Iceberg catalog this session opened (its JDBC connections).

    Every session loads its own catalog; left open, a driver that lives for
    hours would collect one connection pool per job.
    """
    try:
        manager = session._jsparkSession.sessionState().catalogManager()
        if manager.isCatalogRegistered(name):
            catalog = manager.catalog(name).icebergCatalog()
            if session._jvm.java.io.Closeable._java_lang_class.isInstance(catalog):  # type: ignore[union-attr]
                catalog.close()
    except Exception as exc:
        log.warning("could not close catalog %s of a finished job: %s", name, exc)


class _Handler(socketserver.StreamRequestHandler):
    """One connection: authenticate, then ping, stop or run a job."""

    server: _Server

    def handle(self) -> None:
        driver = self.server.driver
        if not _same_user(self.connection):
            return
        try:
            request = p.read_frame(self.rfile)  # type: ignore[arg-type]
        except ValueError:
            return
        if request is None or not driver.authentic(request.get("token")):
            self._send({"type": p.REFUSED, "message": "bad token"})
            return
        op = request.get("op")
        if op == "ping":
            self._send({"type": p.PONG, "pid": os.getpid()})
        elif op == "stop":
            driver.stop_when_idle()
            self._send({"type": p.STOPPING, "pid": os.getpid()})
        elif op == "job":
            self._job(request)

    def _send(self, frame: dict[str, Any]) -> None:
        # A client that is gone makes this fail; the job still finishes (its
        # staged batch is then never appended, and swept later).
        with contextlib.suppress(OSError):
            p.write_frame(self.wfile, frame)  # type: ignore[arg-type]

    def _job(self, request: dict[str, Any]) -> None:
        driver = self.server.driver
        if not driver.begin():
            return  # closing without "started": the client retries on a new driver
        done = threading.Event()
        group = f"ct-{uuid.uuid4().hex[:12]}"
        try:
            self._send({"type": p.STARTED, "pid": os.getpid()})
            watcher = threading.Thread(target=self._watch, args=(done, group), daemon=True)
            watcher.start()
            outcome = driver.run_job(request, self._send, group)
            done.set()  # before the client can see the outcome and hang up
            self._send(outcome)
        finally:
            done.set()
            driver.end()

    def _watch(self, done: threading.Event, group: str) -> None:
        """Cancel this connection's Spark jobs if the client goes away (its task was killed)."""
        try:
            gone = self.connection.recv(1) == b""
        except OSError:
            gone = True
        if gone and not done.is_set():
            log.warning("job %s: its client went away, cancelling its Spark jobs", group)
            self.server.driver.spark.sparkContext.cancelJobGroup(group)


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this user (``SO_PEERCRED``; Linux)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, driver: Driver) -> None:
        self.driver = driver
        super().__init__(path, _Handler, bind_and_activate=False)

    def server_bind(self) -> None:
        path = str(self.server_address)
        # A socket file left by a killed driver; the client only starts a
        # driver (under the folder's lock) after the old one stopped answering.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        old = os.umask(0o177)  # the socket is born 0600
        try:
            super().server_bind()
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.driver.socket_inode = os.stat(path).st_ino


def _start_spark(master: str, conf: dict[str, str], app_name: str) -> SparkSession:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _publish(driver: Driver, server: _Server) -> None:
    """Make the driver reachable: token (0600), then pid; the socket is already bound."""
    p.write_private(driver.folder / p.TOKEN_FILE, driver.token)
    p.write_private(driver.folder / p.PID_FILE, str(os.getpid()))
    server.server_activate()


def _idle_loop(driver: Driver, server: _Server, stopped: threading.Event) -> None:
    """Retire the driver once it has been idle for its timeout (or was asked to stop)."""
    step = max(0.2, min(5.0, driver.idle_timeout / 4))
    while not stopped.wait(step):
        try:
            if driver.retire():
                log.info("idle for %.0f s (or asked to stop): stopping", driver.idle_timeout)
                break
        except Exception:  # never leave a driver running that nothing can retire
            log.exception("retiring failed: stopping now")
            break
    server.shutdown()


def serve(folder: Path, idle_timeout: float) -> int:
    """Start Spark from ``folder/conf.json``, serve jobs until idle; the exit code."""
    settings = json.loads((folder / p.CONF_FILE).read_text())
    router = _LogRouter(sys.stderr)
    logging.basicConfig(level=logging.INFO, handlers=[router], force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = {str(k): str(v) for k, v in settings["conf"].items()}
    size_file_cache(conf.get("spark.driver.memory"))
    log.info("starting Spark (master %s) for %s", settings["master"], folder)
    spark = _start_spark(settings["master"], conf, settings.get("app_name", "ct-warm"))
    driver = Driver(folder, spark, conf, idle_timeout)
    driver.router = router
    server = _Server(str(folder / p.SOCKET_FILE), driver)
    server.server_bind()
    _publish(driver, server)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: driver.stop_when_idle())
    watchdog = threading.Thread(target=_idle_loop, args=(driver, server, stopped), daemon=True)
    watchdog.start()
    log.info("warm driver %d ready on %s (idle timeout %.0f s)", os.getpid(), folder, idle_timeout)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stopped.set()
        driver.unpublish()
        server.server_close()
        spark.stop()
        log.info("warm driver %d stopped", os.getpid())
    return 0


def _daemonize() -> None:
    """Detach from the starting task (double fork): outlive it, never be its zombie."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ct-warm-driver", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="the driver's private folder (0700)")
    parser.add_argument("--idle-timeout", type=float, default=900.0, help="seconds")
    parser.add_argument("--daemon", action="store_true", help="detach from the caller")
    args = parser.parse_args(argv)
    folder = p.private_dir(Path(args.dir))
    if args.daemon:
        _daemonize()
    # Early, so a starting client can tell a driver that died while starting.
    p.write_private(folder / p.PID_FILE, str(os.getpid()))
    return serve(folder, args.idle_timeout)


if __name__ == "__main__":
    sys.exit(main())
