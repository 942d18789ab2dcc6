"""A throwaway PostgreSQL server on 127.0.0.1 for tests (Debian's postgresql).

PostgreSQL refuses to run as root, so when the tests run as root the server
runs as the ``postgres`` user through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from devtools.devstack import free_port

__all__ = ["PgServer", "free_port", "running_postgres"]


def _pg_bin(name: str) -> str:
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian package postgresql)")
    return found


@dataclass(frozen=True)
class PgServer:
    port: int
    user: str
    password: str
    database: str
    #: The cluster's data folder (empty: not controllable, e.g. an external server).
    pgdata: str = ""
    #: Where the server puts its Unix socket and log.
    folder: str = ""
    #: ``runuser -u postgres --`` when the tests run as root.
    prefix: tuple[str, ...] = ()

    def sqlalchemy_url(self, database: str | None = None) -> str:
        return (
            f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/"
            f"{database or self.database}"
        )

    def create_database(self, name: str) -> str:
        """Creates an empty database; returns its SQLAlchemy URL."""
        import psycopg2

        conn = psycopg2.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.database,
        )
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        conn.close()
        return self.sqlalchemy_url(name)

    def start(self) -> None:
        """Start the server (again) on the same port and data, and wait until it answers.

        Fault-injection tests stop the catalog's database in the middle of a
        tick and restart it to check that the retry lands.
        """
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off -c max_connections=100"
        )
        log = os.path.join(self.folder, "log")
        subprocess.run(
            [
                *self.prefix,
                _pg_bin("pg_ctl"),
                *("-D", self.pgdata, "-l", log, "-w", "-t", "60", "start", "-o", options),
            ],
            check=True,
            capture_output=True,
        )
        self._wait_until_up()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends every connection, ``immediate`` is a crash."""
        subprocess.run(
            [*self.prefix, _pg_bin("pg_ctl"), "-D", self.pgdata, "-m", mode, "-w", "stop"],
            check=True,
            capture_output=True,
        )

    def _wait_until_up(self) -> None:
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(
                    host="127.0.0.1",
                    port=self.port,
                    user=self.user,
                    password=self.password,
                    dbname=self.database,
                ).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@contextlib.contextmanager
def running_postgres() -> Iterator[PgServer]:
    as_root = os.geteuid() == 0
    data = tempfile.mkdtemp(prefix="ct-pg-")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(data, "postgres", "postgres")
        os.chmod(data, 0o700)
    pwfile = os.path.join(data, "pw")
    password = "ct-test-pw"
    with open(pwfile, "w") as fh:
        fh.write(password)
    if as_root:
        shutil.chown(pwfile, "postgres", "postgres")
    pgdata = os.path.join(data, "db")
    subprocess.run(
        [
            *prefix,
            _pg_bin("initdb"),
            "-D",
            pgdata,
            "-U",
            "ct",
            "--pwfile",
            pwfile,
            "-A",
            "md5",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    server = PgServer(
        port=free_port(),
        user="ct",
        password=password,
        database="postgres",
        pgdata=pgdata,
        folder=data,
        prefix=tuple(prefix),
    )
    try:
        server.start()
        yield server
    finally:
        # A test may have stopped it already: then this finds nothing to stop.
        subprocess.run(
            [*prefix, _pg_bin("pg_ctl"), "-D", pgdata, "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)
