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

from airflow_provider_ct.devstack import free_port

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
    port = free_port()
    log = os.path.join(data, "log")
    subprocess.run(
        [
            *prefix,
            _pg_bin("pg_ctl"),
            "-D",
            pgdata,
            "-l",
            log,
            "-w",
            "-t",
            "60",
            "start",
            "-o",
            f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c max_connections=100",
        ],
        check=True,
        capture_output=True,
    )
    try:
        server = PgServer(port=port, user="ct", password=password, database="postgres")
        deadline = time.monotonic() + 30
        import psycopg2

        while True:
            try:
                psycopg2.connect(
                    host="127.0.0.1", port=port, user="ct", password=password, dbname="postgres"
                ).close()
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield server
    finally:
        subprocess.run(
            [*prefix, _pg_bin("pg_ctl"), "-D", pgdata, "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)
