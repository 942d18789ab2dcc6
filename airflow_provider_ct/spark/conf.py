"""The one place that builds Spark configuration for our catalogs.

Every Spark session or ``spark-submit`` this package starts gets its settings
from :func:`spark_conf`, so Spark registers the same catalog (same name, same
database, same warehouse) that PyIceberg commits through.

Secrets (the JDBC password) are kept apart in :func:`secret_spark_conf`:
whatever goes to ``spark-submit --conf`` is on the command line of its JVM,
readable by anyone on the machine (``ps``), so a submitted job sets them
itself when it builds its session (:func:`job_session`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core import storage
from airflow_provider_ct.core.catalog import SENSITIVE_KEY, CatalogConfig
from airflow_provider_ct.core.outages import Bounds
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Environment variable naming the folder of assembled jars.
JARS_DIR_ENV = "CT_SPARK_JARS_DIR"
#: Environment variable with Maven coordinates to use instead of local jars.
JARS_PACKAGES_ENV = "CT_SPARK_PACKAGES"
ICEBERG_RUNTIME_GLOB = "iceberg-spark-runtime-3.5_2.12-*.jar"
#: Folder (under the jars folder) and names of Hadoop's S3A jars.
S3A_SUBDIR = "s3a"
S3A_JAR_GLOBS = ("hadoop-aws-*.jar", "aws-java-sdk-bundle-*.jar")
#: Debian's JDBC drivers (libxerial-sqlite-jdbc-java, libpostgresql-jdbc-java).
JDBC_DRIVER_JARS = {
    "sqlite": Path("/usr/share/java/sqlite-jdbc.jar"),
    "postgresql": Path("/usr/share/java/postgresql.jar"),
}


def default_jars_dir() -> Path:
    cache = os.environ.get("CT_CACHE_DIR") or str(Path.home() / ".cache" / "airflow-provider-ct")
    return Path(os.environ.get(JARS_DIR_ENV) or Path(cache) / "jars")


def iceberg_jars(jars_dir: Path | None = None) -> list[str]:
    """The Iceberg runtime jar (see scripts/assemble_jars.sh).

    Jackson jars relocated by an older assembly, if still beside it, are not
    shipped: the runtime carries its own relocated Jackson.
    """
    folder = jars_dir or default_jars_dir()
    runtime = sorted(folder.glob(ICEBERG_RUNTIME_GLOB))
    if not runtime:
        raise ConfigurationError(
            f"the Iceberg Spark runtime is not assembled in {folder} (want "
            f"{ICEBERG_RUNTIME_GLOB}); run `make setup`, set {JARS_DIR_ENV}, or set "
            f"{JARS_PACKAGES_ENV} to Maven coordinates"
        )
    return [str(runtime[-1])]


def s3a_jars(jars_dir: Path | None = None) -> list[str]:
    """Hadoop's S3A jars if assembled (``make setup`` fetches them for the tests), else none.

    Spark distributions built for a cloud (EMR, Dataproc, most Kubernetes
    images) carry S3A already; pip's pyspark does not, so a local run on S3
    needs these beside the Iceberg runtime.
    """
    folder = (jars_dir or default_jars_dir()) / S3A_SUBDIR
    return [str(jar) for pattern in S3A_JAR_GLOBS for jar in sorted(folder.glob(pattern))[-1:]]


@dataclass(frozen=True)
class JarSettings:
    """Where the job's jars come from, when not from the defaults.

    Read from the Spark connection's extra (:meth:`from_extra`); every field
    left empty keeps the default: the locally assembled Iceberg runtime
    (``CT_SPARK_JARS_DIR``) and Debian's JDBC drivers under ``/usr/share/java``.

    :param iceberg_jars: jars replacing the local Iceberg runtime (the upstream
        ``iceberg-spark-runtime`` jar, or ours with its Jackson jars).
    :param jdbc_jars: jars replacing Debian's JDBC driver for the catalog.
    :param packages: Maven coordinates for ``spark.jars.packages``; one of
        ``iceberg-spark-runtime`` replaces the local runtime, one of the JDBC
        driver (``org.postgresql:postgresql``, ``org.xerial:sqlite-jdbc``)
        replaces the local driver.
    """

    iceberg_jars: tuple[str, ...] = ()
    jdbc_jars: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any], conn_id: str = "") -> JarSettings:
        """The settings in a Spark connection's extra, each path checked to exist."""
        where = f"Spark connection {conn_id!r} extra" if conn_id else "Spark connection extra"
        env_packages = os.environ.get(JARS_PACKAGES_ENV, "")
        settings = cls(
            iceberg_jars=_jar_list(extra.get(ICEBERG_JARS_KEY), f"{where} {ICEBERG_JARS_KEY!r}"),
            jdbc_jars=_jar_list(extra.get(JDBC_JARS_KEY), f"{where} {JDBC_JARS_KEY!r}"),
            packages=_split(extra.get(PACKAGES_KEY) or env_packages),
        )
        return settings

    @classmethod
    def from_env(cls) -> JarSettings:
        """The defaults, with Maven packages from ``CT_SPARK_PACKAGES`` if set."""
        return cls(packages=_split(os.environ.get(JARS_PACKAGES_ENV)))

    def runtime_from_packages(self) -> bool:
        return any(ICEBERG_RUNTIME_COORDINATE in p for p in self.packages)

    def driver_from_packages(self, dialect: str) -> bool:
        return any(p.startswith(JDBC_DRIVER_COORDINATES.get(dialect, "-")) for p in self.packages)


#: Keys of the Spark connection's extra naming jars (see :class:`JarSettings`).
ICEBERG_JARS_KEY = "iceberg_jars"
JDBC_JARS_KEY = "jdbc_jars"
PACKAGES_KEY = "spark.jars.packages"
ICEBERG_RUNTIME_COORDINATE = ":iceberg-spark-runtime-"
JDBC_DRIVER_COORDINATES = {"postgresql": "org.postgresql:", "sqlite": "org.xerial:"}
#: A class the REST catalog's HTTP client needs, relocated in upstream runtime jars.
REST_HTTP_CLASS = "org/apache/iceberg/shaded/org/apache/hc/client5/http/impl/classic/HttpClients"


def _split(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else str(value or "").split(",")
    return tuple(str(item).strip() for item in items if str(item).strip())


def _jar_list(value: Any, setting: str) -> tuple[str, ...]:
    """Jar paths or URLs; a local path that does not exist is an error naming ``setting``."""
    jars = _split(value)
    for jar in jars:
        local = jar[len("file://") :] if jar.startswith("file://") else jar
        if "://" not in local and not Path(local).is_file():
            raise ConfigurationError(f"{setting}: jar {jar} does not exist")
    return jars


def jdbc_driver_jar(config: CatalogConfig) -> str:
    jar = JDBC_DRIVER_JARS.get(config.dialect)
    if jar is None:
        raise ConfigurationError(f"no JDBC driver known for catalog dialect {config.dialect!r}")
    if not jar.exists():
        package = {"sqlite": "libxerial-sqlite-jdbc-java"}.get(
            config.dialect, "libpostgresql-jdbc-java"
        )
        raise ConfigurationError(
            f"JDBC driver {jar} is missing; install Debian's {package}, or name the driver's jar "
            f"in the Spark connection's extra {JDBC_JARS_KEY!r} (or its Maven coordinates in "
            f"{PACKAGES_KEY!r})"
        )
    return str(jar)


def check_rest_support(jars: list[str]) -> None:
    """Fail early, naming what is missing, when the Iceberg runtime cannot talk REST.

    A runtime jar assembled without the relocated Apache HttpClient 5 that
    Iceberg's REST client needs (an older scripts/assemble_jars.sh, a custom
    build) would only fail inside the job with ``NoClassDefFoundError``.
    """
    runtimes = [j for j in jars if "iceberg-spark-runtime" in Path(j).name and "://" not in j]
    for jar in runtimes:
        with zipfile.ZipFile(jar) as archive:
            names = set(archive.namelist())
        if f"{REST_HTTP_CLASS}.class" not in names:
            raise ConfigurationError(
                f"a REST catalog needs Iceberg's REST client, but the Iceberg runtime {jar} lacks "
                f"{REST_HTTP_CLASS.replace('/', '.')} (relocated Apache HttpClient 5): use the "
                f"upstream iceberg-spark-runtime jar, named in the Spark connection's extra "
                f"{ICEBERG_JARS_KEY!r} or as Maven coordinates in {PACKAGES_KEY!r}"
            )


def spark_jars(
    config: CatalogConfig, jars_dir: Path | None = None, settings: JarSettings | None = None
) -> list[str]:
    """Local jars to ship: the Iceberg runtime and the catalog's JDBC driver.

    Each comes from ``settings`` (the Spark connection) when given there, as
    a jar or Maven coordinates, else from the defaults.
    """
    settings = settings or JarSettings.from_env()
    jars: list[str] = list(settings.iceberg_jars)
    if not jars and not settings.runtime_from_packages():
        jars = iceberg_jars(jars_dir)
    if config.kind == "sql":
        if settings.jdbc_jars:
            jars += settings.jdbc_jars
        elif not settings.driver_from_packages(config.dialect):
            jars.append(jdbc_driver_jar(config))
    else:
        check_rest_support(jars)
    if on_s3(config):
        jars += s3a_jars(jars_dir)
    return jars


# -- S3 through Hadoop's S3A ---------------------------------------------------------
#: Iceberg's FileIO on the Spark side for S3 warehouses: Hadoop's, through S3A.
#: (Iceberg's S3FileIO needs the AWS SDK v2, which pip's pyspark lacks; a
#: deployment that has it sets ``io-impl`` in the catalog's properties.)
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"
S3A_PREFIX = "spark.hadoop.fs.s3a."


def on_s3(config: CatalogConfig) -> bool:
    """Whether the catalog keeps its tables on S3 (its warehouse, or S3 settings given)."""
    return storage.is_s3(config.warehouse) or bool(storage.s3_settings(config.properties))


def s3a_conf(config: CatalogConfig) -> dict[str, str]:
    """Hadoop S3A settings from the catalog's FileIO properties, without the keys.

    The same endpoint, region and addressing PyIceberg uses (:mod:`.core.storage`),
    so Spark and PyIceberg reach the same store; ``s3://`` locations (what
    most catalogs write) go through S3A too.
    """
    if not on_s3(config):
        return {}
    props = config.properties
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3n.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    endpoint = props.get(storage.S3_ENDPOINT)
    if endpoint:
        conf[S3A_PREFIX + "endpoint"] = endpoint
        if endpoint.lower().startswith("http://"):
            conf[S3A_PREFIX + "connection.ssl.enabled"] = "false"
    style = storage.path_style(props)
    if style is not None:
        conf[S3A_PREFIX + "path.style.access"] = str(style).lower()
    region = next((props[k] for k in storage.S3_REGION if props.get(k)), None)
    if region:
        conf[S3A_PREFIX + "endpoint.region"] = region
    # Bounded waits (core/outages.py); a spark_conf of the connection still wins.
    conf.update((f"spark.hadoop.{k}", v) for k, v in Bounds.of(props).s3a().items())
    return conf


def s3a_secret_conf(config: CatalogConfig) -> dict[str, str]:
    """The S3A keys from the catalog's FileIO properties (never on a command line)."""
    if not on_s3(config):
        return {}
    props = config.properties
    names = {
        "access.key": storage.S3_ACCESS_KEY_ID,
        "secret.key": storage.S3_SECRET_ACCESS_KEY,
        "session.token": storage.S3_SESSION_TOKEN,
    }
    conf = {
        S3A_PREFIX + name: value
        for name, keys in names.items()
        if (value := next((props[k] for k in keys if props.get(k)), None))
    }
    if S3A_PREFIX + "session.token" in conf:
        conf[S3A_PREFIX + "aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        )
    return conf


def spark_conf(
    config: CatalogConfig,
    *,
    jars_dir: Path | None = None,
    extra: Mapping[str, str] | None = None,
    include_jars: bool = True,
    include_secrets: bool = False,
    jar_settings: JarSettings | None = None,
) -> dict[str, str]:
    """Spark properties that register ``config`` as a Spark catalog of the same name.

    ``include_jars=False`` leaves ``spark.jars`` out, for callers (such as
    SparkSubmitHook) that pass jars separately. Secrets are left out unless
    ``include_secrets``: the default is safe to put on a command line, and
    in-process sessions (:func:`local_session`) ask for them.
    """
    prefix = f"spark.sql.catalog.{config.name}"
    conf: dict[str, str] = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        # Commits happen in PyIceberg; Spark must always see the newest metadata.
        f"{prefix}.cache-enabled": "false",
        # Our staged Parquet must be readable by PyIceberg and Iceberg alike.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # Retracted positions come back to the driver through Arrow.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if config.warehouse:
        conf[f"{prefix}.warehouse"] = config.warehouse
    conf.update(_catalog_conf(config, prefix))
    if on_s3(config) and "io-impl" not in config.properties:
        conf[f"{prefix}.io-impl"] = HADOOP_FILE_IO
    conf.update(s3a_conf(config))
    settings = jar_settings or JarSettings.from_env()
    if settings.packages:
        conf["spark.jars.packages"] = ",".join(settings.packages)
    if include_jars:
        conf["spark.jars"] = ",".join(spark_jars(config, jars_dir, settings))
    if include_secrets:
        conf.update(secret_spark_conf(config))
    conf.update(extra or {})
    return conf


def _catalog_conf(config: CatalogConfig, prefix: str) -> dict[str, str]:
    """The catalog's own settings under ``prefix``: JDBC for a SQL catalog, else REST."""
    if config.kind != "sql":
        # The REST client takes the same property names as PyIceberg's
        # (credential, token, scope, oauth2-server-uri, header.*, prefix, ...);
        # secrets among them only through secret_spark_conf.
        conf = {f"{prefix}.type": "rest", f"{prefix}.uri": config.uri}
        bounded = {**Bounds.of(config.properties).rest_client(config.properties)}
        for key, value in {**config.properties, **bounded}.items():
            if not SENSITIVE_KEY.search(key):
                conf[f"{prefix}.{key}"] = value
        return conf
    conf = {
        f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        f"{prefix}.uri": config.jdbc_url(),
        # PyIceberg creates the catalog tables (schema V1); Spark must not try,
        # or on SQLite it holds a lock for the JVM's life ("database is locked").
        f"{prefix}.jdbc.init-catalog-tables": "false",
        f"{prefix}.jdbc.schema-version": "V1",
    }
    if config.dialect == "postgresql":  # bounded waits (core/outages.py)
        conf.update(
            (f"{prefix}.{k}", v) for k, v in Bounds.of(config.properties).postgres_jdbc().items()
        )
    user, _ = config.jdbc_credentials()
    if user:
        conf[f"{prefix}.jdbc.user"] = user
    return conf


def secret_spark_conf(config: CatalogConfig) -> dict[str, str]:
    """The Spark properties of ``config`` that are secrets (never on a command line).

    The catalog's own (the JDBC password; a REST catalog's credential or
    token) and the S3A keys of its storage.
    """
    conf = s3a_secret_conf(config)
    if config.kind != "sql":
        conf.update(
            (f"spark.sql.catalog.{config.name}.{key}", value)
            for key, value in config.properties.items()
            if value and SENSITIVE_KEY.search(key)
        )
        return conf
    _, password = config.jdbc_credentials()
    if password:
        conf[f"spark.sql.catalog.{config.name}.jdbc.password"] = password
    return conf


def job_session(config: CatalogConfig, app_name: str) -> SparkSession:
    """The SparkSession of a submitted job, completed with the catalog's secrets.

    ``spark-submit`` gave the JVM everything else; the password comes from the
    job's catalog file (readable only by its user) and is set here, before
    the catalog is first used, because Iceberg's ``JdbcCatalog`` reads it from
    the session's configuration when Spark first loads the catalog.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in secret_spark_conf(config).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def local_session(
    config: CatalogConfig, *, master: str = "local[2]", app_name: str = "ct", **extra: str
) -> SparkSession:
    """An in-process SparkSession for ``config`` (tests, the demo, benchmarks).

    The secrets (a JDBC password, a REST credential, S3 keys) are set on the
    session once it runs, never on the builder: pyspark starts the JVM with
    ``spark-submit`` and every builder setting as a ``--conf`` argument, on a
    command line any local user can read. The catalog reads its settings on
    first use, and the session copies its settings into every Hadoop
    configuration it makes (:func:`hadoop_session_conf`).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    conf = spark_conf(config, extra={"spark.ui.enabled": "false", **extra})
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    for key, value in hadoop_session_conf(secret_spark_conf(config)).items():
        session.conf.set(key, value)
    return session


def hadoop_session_conf(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with ``spark.hadoop.X`` settings spelled ``X``, as a running session needs.

    ``spark.hadoop.*`` is read once, when the SparkContext starts (and on a
    command line then, where keys must not go); a session's SQL settings
    are copied into every Hadoop configuration the session makes (its file
    reads, Iceberg's ``HadoopFileIO``) under their own names. So a running
    session sets ``fs.s3a.secret.key``, not ``spark.hadoop.fs.s3a.secret.key``.
    """
    prefix = "spark.hadoop."
    return {k[len(prefix) :] if k.startswith(prefix) else k: v for k, v in conf.items()}
