"""A real Airflow on this machine, for ``make demo`` and the end-to-end tests.

``LocalAirflow`` runs ``airflow standalone`` (scheduler, dag-processor,
triggerer and API server; LocalExecutor; a SQLite metadata database unless
``env`` names another) under its own ``AIRFLOW_HOME``, on free ports, in its
own process group, with a known login. ``stop()`` ends every process it
started, including task processes and ``spark-submit`` children: all of
them share the session of the standalone process (or, if one started its
own session, carry a marker in their environment), and ``stop()`` looks for
both in ``/proc``.

This module is a development tool, not part of a production deployment; the
settings it needs (and why) are written down in ``docs/e2e-notes.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_ct.exceptions import CTError

log = logging.getLogger(__name__)

#: Environment variable that marks every process a LocalAirflow started.
MARKER = "CT_DEVSTACK_ID"
TERMINAL_RUN_STATES = frozenset({"success", "failed"})


class DevStackError(CTError):
    """The local Airflow did not start, or a REST call to it failed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Api:
    """A small client of Airflow's REST API (``/api/v2``) with a bearer token."""

    def __init__(
        self, base_url: str, username: str, password: str, log_path: Path | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self.log_path = log_path  # the stack's combined log, for errors
        self._token: str | None = None

    def _request(self, method: str, url: str, body: Any, auth: bool) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise DevStackError(f"{method} {url} -> HTTP {exc.code}: {detail}") from exc
        return json.loads(payload) if payload else None

    def token(self) -> str:
        """A JWT for the configured user (fetched once; tokens last hours)."""
        if self._token is None:
            answer = self._request(
                "POST",
                f"{self.base_url}/auth/token",
                {"username": self.username, "password": self.password},
                auth=False,
            )
            self._token = str(answer["access_token"])
        return self._token

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` on ``/api/v2<path>``; HTTP errors raise ``DevStackError``."""
        return self._request(method, f"{self.base_url}/api/v2{path}", body, auth=True)

    # The calls the demo and the tests make.
    def dag_ids(self) -> list[str]:
        return [d["dag_id"] for d in self.call("GET", "/dags?limit=100")["dags"]]

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.call("PATCH", f"/dags/{dag_id}", {"is_paused": paused})

    def create_backfill(self, dag_id: str, from_date: str, to_date: str) -> dict[str, Any]:
        """A backfill that runs the intervals in order, one at a time.

        On a SQLite metadata database Airflow answers 503 "Database is locked"
        while the scheduler holds the write lock (seen on a loaded 2-core
        machine). The answer does not say whether the backfill was created:
        Airflow may have committed it and some of its runs before the lock
        stopped it. So after a 503 the backfill is looked up first and only
        asked for again if the DAG has none.
        """
        body = {
            "dag_id": dag_id,
            "from_date": from_date,
            "to_date": to_date,
            "max_active_runs": 1,
            "run_backwards": False,
            "reprocess_behavior": "none",
        }
        for delay in (2, 5, 8, 11, 14, 0):
            try:
                return dict(self.call("POST", "/backfills", body))
            except DevStackError as exc:
                if "HTTP 503" not in str(exc) or "locked" not in str(exc) or not delay:
                    raise
                time.sleep(delay)
                if created := self.backfills(dag_id):
                    return created[-1]
        raise AssertionError("unreachable: the last attempt raises or returns")

    def backfills(self, dag_id: str) -> list[dict[str, Any]]:
        answer = self.call("GET", f"/backfills?dag_id={urllib.parse.quote(dag_id)}")
        return list(answer["backfills"])

    def scheduler_health(self) -> dict[str, Any]:
        """The scheduler's part of ``/api/v2/monitor/health`` (status, last heartbeat)."""
        return dict(
            self._request("GET", f"{self.base_url}/api/v2/monitor/health", None, False)["scheduler"]
        )

    def trigger(self, dag_id: str, logical_date: str) -> dict[str, Any]:
        return dict(
            self.call("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": logical_date, "conf": {}})
        )

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        answer = self.call("GET", f"/dags/{dag_id}/dagRuns?order_by=logical_date&limit=100")
        return list(answer["dag_runs"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        quoted = urllib.parse.quote(run_id, safe="")
        answer = self.call("GET", f"/dags/{dag_id}/dagRuns/{quoted}/taskInstances?limit=100")
        return list(answer["task_instances"])

    def wait_for_runs(
        self,
        dag_id: str,
        count: int,
        timeout: float,
        poll: float = 5.0,
        scheduler_grace: float = 180.0,
    ) -> list[dict[str, Any]]:
        """Waits until ``dag_id`` has ``count`` runs, all finished; returns them.

        Runs only move while a scheduler runs. ``airflow standalone`` does not
        start its scheduler again after it exits on an error (seen: a
        ``StaleDataError`` from SQLite under concurrent writes), and its runs
        then sit in ``queued`` for the whole timeout. So a scheduler that
        reports itself unhealthy for ``scheduler_grace`` seconds in a row ends
        the wait at once, with what Airflow logged about it.
        """
        deadline = time.monotonic() + timeout
        unhealthy_since: float | None = None
        while True:
            runs = self.runs(dag_id)
            if len(runs) >= count and all(r["state"] in TERMINAL_RUN_STATES for r in runs):
                return runs
            states = [(r["dag_run_id"], r["state"]) for r in runs]
            now = time.monotonic()
            health = self.scheduler_health()
            if health.get("status") == "healthy":
                unhealthy_since = None
            elif unhealthy_since is None:
                unhealthy_since = now
            elif now - unhealthy_since > scheduler_grace:
                raise DevStackError(
                    f"{dag_id}: the scheduler is down ({health}), runs stay {states}"
                    f"{self.diagnose()}"
                )
            if now > deadline:
                raise DevStackError(f"{dag_id}: runs did not finish in {timeout:.0f} s: {states}")
            time.sleep(poll)

    def diagnose(self) -> str:
        """The scheduler's last lines in the stack's log (empty without a log)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines()
        tail = [line for line in lines if line.startswith("scheduler")][-40:]
        return f"\n--- the scheduler's last lines in {self.log_path} ---\n" + "\n".join(tail)


@dataclass
class LocalAirflow:
    """``airflow standalone`` under ``home``, reading DAGs from ``dags_folder``.

    :param env: extra environment (connections as ``AIRFLOW_CONN_*``, ...).
    :param parallelism: task slots; 4 suits a 2-core machine.
    """

    home: Path
    dags_folder: Path
    env: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 4
    username: str = "admin"
    port: int = field(default_factory=free_port)
    ident: str = field(default_factory=lambda: uuid.uuid4().hex)
    _proc: subprocess.Popen[bytes] | None = None
    _session: int | None = None  # the session id of every process it starts
    _log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "standalone.log"

    @property
    def password(self) -> str:
        """The login's password (written before start, so it is known)."""
        passwords = json.loads(self._passwords_file.read_text())
        return str(passwords[self.username])

    @property
    def _passwords_file(self) -> Path:
        return self.home / "passwords.json"

    def environment(self) -> dict[str, str]:
        """The environment of every Airflow process (and of the CLI, for a person)."""
        bin_dir = str(Path(sys.executable).parent)
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("AIRFLOW__") and not key.startswith("AIRFLOW_CONN_")
        }
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.username}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self._passwords_file),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.url,
                # Task processes reach the API server here; it must follow the port.
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                MARKER: self.ident,
            }
        )
        env.update(self.env)
        return env

    @property
    def env_file(self) -> Path:
        """``source`` it to use the ``airflow`` CLI against this stack."""
        return self.home / "env.sh"

    def write_env_file(self, env: Mapping[str, str]) -> None:
        lines = [
            f"export {key}={shlex.quote(value)}"
            for key, value in sorted(env.items())
            if key.startswith("AIRFLOW") or key == "PATH"
        ]
        self.env_file.write_text("\n".join(lines) + "\n")

    def start(self, expect_dags: list[str], timeout: float = 300.0) -> Api:
        """Starts Airflow and waits until the API serves every DAG in ``expect_dags``."""
        self.home.mkdir(parents=True, exist_ok=True)
        if not self._passwords_file.exists():
            self._passwords_file.write_text(json.dumps({self.username: secrets.token_urlsafe(12)}))
        env = self.environment()
        self.write_env_file(env)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "standalone"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._session = self._proc.pid
        api = Api(self.url, self.username, self.password, self.log_path)
        deadline = time.monotonic() + timeout
        missing: list[str] = list(expect_dags)
        while True:
            try:
                known = set(api.dag_ids())
                missing = [d for d in expect_dags if d not in known]
                if not missing:
                    return api
            except (OSError, DevStackError) as exc:
                log.debug("Airflow not up yet: %s", exc)
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-4000:]
                self.stop()
                raise DevStackError(
                    f"Airflow did not come up (missing DAGs: {missing}); log tail:\n{tail}"
                )
            time.sleep(2)

    def survivors(self) -> list[int]:
        """Pids of processes this stack started that are still alive."""
        return stack_processes(self.ident, self._session)

    def stop(self) -> None:
        """Stops every process this stack started (idempotent)."""
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
                self._proc.wait(timeout=30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=30)
            self._proc = None
        # Components that outlive the group (the API server re-parents to init).
        if leftover := reap(self.survivors):
            log.error("processes of the Airflow under %s survived SIGKILL: %s", self.home, leftover)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalAirflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def reap(find: Callable[[], list[int]], grace: float = 30.0) -> list[int]:
    """Ends the processes ``find`` returns: SIGTERM, up to ``grace`` s to exit, then SIGKILL.

    Returns the pids still alive after that (none, unless the kernel cannot
    kill them), so callers can say so instead of leaving them behind.
    """

    def signal_all(pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    signal_all(find(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (alive := find()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if alive:
        signal_all(alive, signal.SIGKILL)
        time.sleep(1)
        alive = find()
    return alive


def stack_processes(ident: str, session: int | None = None, marker: str = MARKER) -> list[int]:
    """Pids of live processes in ``session`` or with ``marker=ident`` in their environment.

    Both are needed: processes that set their title (the API server) overwrite
    the memory ``/proc/<pid>/environ`` shows, and a process may start its own
    session.
    """
    needle = f"{marker}={ident}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        state, sid = fields[0], int(fields[3])
        if state == "Z":
            continue
        if sid == session or needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
