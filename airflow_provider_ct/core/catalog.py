"""How to reach an Iceberg catalog, independent of Airflow.

One :class:`CatalogConfig` describes a catalog once; from it we build both the
PyIceberg catalog (mint, append, sensors, ticks) and the Spark catalog
configuration (the write job), so the two always agree on the catalog's name,
database and warehouse. Supported:

* ``sql`` on SQLite: the zero-config embedded default;
* ``sql`` on PostgreSQL: for more than one machine;
* ``rest``: any Iceberg REST catalog, on both sides.

Storage settings (the S3 endpoint, region, path-style addressing, keys) are
``properties`` named as PyIceberg's FileIO names them (``s3.endpoint``, ...):
PyIceberg reads them, :mod:`.storage` opens staging folders with them and
the Spark side translates them into Hadoop S3A settings.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from airflow_provider_ct.core.outages import raise_if_unavailable
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

DEFAULT_CATALOG_NAME = "ct"
KINDS = ("sql", "rest")
#: Catalog property keys whose values are secrets (REST tokens, S3 keys, ...).
SENSITIVE_KEY = re.compile(r"password|secret|token|credential|access[-_.]?key", re.IGNORECASE)
REDACTED = "***"


def scrub_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` replaced by ``***`` (longest first)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def airflow_home() -> Path:
    """``$AIRFLOW_HOME``, or Airflow's own default ``~/airflow``."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")


@dataclass(frozen=True, repr=False)
class CatalogConfig:
    """Where the catalog lives.

    Its ``repr`` (and so ``str``, log lines and tracebacks showing it) redacts
    the password in ``uri`` and sensitive ``properties``: configurations end up
    in logs, and the password must not.

    :param name: catalog name; Spark registers the catalog under the same name,
        so ``name.namespace.table`` works in Spark SQL.
    :param kind: ``sql`` or ``rest``.
    :param uri: SQLAlchemy URL for ``sql`` (``sqlite:////abs/path.db``,
        ``postgresql+psycopg2://user:pw@host:port/db``) or the REST endpoint.
    :param warehouse: where table data goes (``file:///...``, ``s3://...``).
    :param properties: extra PyIceberg catalog properties.
    """

    name: str = DEFAULT_CATALOG_NAME
    kind: str = "sql"
    uri: str = ""
    warehouse: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"catalog kind {self.kind!r} is not one of {KINDS}")
        if not self.uri:
            raise ConfigurationError(f"catalog {self.name!r} has no uri")
        if not self.name.isidentifier():
            raise ConfigurationError(
                f"catalog name {self.name!r} must be a plain identifier (Spark uses it in SQL)"
            )

    def __repr__(self) -> str:
        properties = {
            k: REDACTED if SENSITIVE_KEY.search(k) else v for k, v in self.properties.items()
        }
        return (
            f"CatalogConfig(name={self.name!r}, kind={self.kind!r}, uri={self.redacted_uri()!r}, "
            f"warehouse={self.warehouse!r}, properties={properties!r})"
        )

    def secrets(self) -> tuple[str, ...]:
        """Every secret in this configuration, in each spelling a log line could show.

        The password as written in ``uri`` (percent-encoded) and decoded (as
        JDBC and the database see it), plus sensitive property values; the
        hook registers them with Airflow's secrets masker, the jobs scrub them
        from the errors they report.
        """
        found: list[str] = []
        raw = urlsplit(self.uri).password
        if raw:
            found += [raw, unquote(raw)]
        found += [v for k, v in self.properties.items() if v and SENSITIVE_KEY.search(k)]
        return tuple(dict.fromkeys(found))

    def without_secrets(self) -> CatalogConfig:
        """This configuration with no password in ``uri`` and no sensitive properties.

        What may travel on a command line (cluster deploy mode): the job
        completes it with :meth:`with_secrets` from its own environment.
        """
        parts = urlsplit(self.uri)
        uri = self.uri
        if parts.password is not None:
            netloc = parts.netloc.replace(f":{parts.password}@", "@", 1)
            uri = urlunsplit(parts._replace(netloc=netloc))
        properties = {k: v for k, v in self.properties.items() if not SENSITIVE_KEY.search(k)}
        return dataclasses.replace(self, uri=uri, properties=properties)

    def with_secrets(self, password: str | None, properties: dict[str, str]) -> CatalogConfig:
        """This configuration completed with a password (decoded) and sensitive properties."""
        uri = self.uri
        parts = urlsplit(uri)
        if password and parts.username and parts.password is None:
            netloc = parts.netloc.replace("@", f":{quote(password, safe='')}@", 1)
            uri = urlunsplit(parts._replace(netloc=netloc))
        return dataclasses.replace(self, uri=uri, properties={**self.properties, **properties})

    def scrub(self, text: str) -> str:
        """``text`` with every secret of this configuration replaced by ``***``."""
        return scrub_secrets(text, self.secrets())

    @classmethod
    def embedded(cls, home: Path | None = None, name: str = DEFAULT_CATALOG_NAME) -> CatalogConfig:
        """The zero-config default: SQLite catalog and local warehouse under AIRFLOW_HOME."""
        root = (home or airflow_home()) / "ct"
        return cls(
            name=name,
            kind="sql",
            uri=f"sqlite:///{(root / 'catalog.db').resolve()}",
            warehouse=(root / "warehouse").resolve().as_uri(),
        )

    # -- PyIceberg ------------------------------------------------------------
    @property
    def dialect(self) -> str:
        """``sqlite``, ``postgresql`` or ``rest``."""
        if self.kind == "rest":
            return "rest"
        scheme = urlsplit(self.uri).scheme.split("+")[0]
        if scheme not in ("sqlite", "postgresql"):
            raise ConfigurationError(
                f"SQL catalog uri {self.redacted_uri()!r}: only sqlite and postgresql are supported"
            )
        return scheme

    def pyiceberg_properties(self) -> dict[str, str]:
        props = {"type": self.kind, "uri": self.uri, **self.properties}
        if self.warehouse:
            props["warehouse"] = self.warehouse
        return props

    def load(self) -> Catalog:
        """A PyIceberg catalog (creating the SQLite folders of the embedded default)."""
        from pyiceberg.catalog import load_catalog

        if self.kind == "sql" and self.dialect == "sqlite":
            self.sqlite_path().parent.mkdir(parents=True, exist_ok=True)
        if self.warehouse.startswith("file:"):
            Path(unquote(urlsplit(self.warehouse).path)).mkdir(parents=True, exist_ok=True)
        try:
            return load_catalog(self.name, **self.bounded_properties())
        except Exception as exc:
            raise_if_unavailable(exc, self, "opening the catalog")
            raise ConfigurationError(
                f"cannot open Iceberg catalog {self.name!r} at {self.redacted_uri()}: "
                + self.scrub(str(exc))
            ) from exc

    def bounded_properties(self) -> dict[str, str]:
        """:meth:`pyiceberg_properties` with the bounds of :mod:`.outages` on every client.

        The FileIO's S3 timeouts, a REST session with a timeout
        (:mod:`.rest_session`), a PostgreSQL connect timeout; a value the
        connection sets itself is kept.
        """
        from airflow_provider_ct.core.outages import Bounds

        props = self.pyiceberg_properties()
        bounds = Bounds.of(self.properties)
        props.update(bounds.file_io(props))
        if self.kind == "rest":
            from airflow_provider_ct.core.rest_session import IMPL

            props.pop("type", None)
            props.setdefault("py-catalog-impl", IMPL)
        elif self.dialect == "postgresql" and "connect_timeout=" not in self.uri:
            sep = "&" if "?" in self.uri else "?"
            props["uri"] = (
                f"{self.uri}{sep}connect_timeout={max(1, round(bounds.catalog_timeout_s))}"
            )
        return props

    # -- Spark (JDBC) ---------------------------------------------------------
    def jdbc_url(self) -> str:
        """The JDBC URL Spark's ``JdbcCatalog`` needs for the same database."""
        parts = urlsplit(self.uri)
        if self.dialect == "sqlite":
            return f"jdbc:sqlite:{self.sqlite_path()}"
        if self.dialect == "postgresql":
            host = parts.hostname or "localhost"
            port = f":{parts.port}" if parts.port else ""
            return f"jdbc:postgresql://{host}{port}{parts.path}"
        raise ConfigurationError("a REST catalog has no JDBC URL")

    def sqlite_path(self) -> Path:
        """The database file of a SQLite catalog (``sqlite:////abs`` or ``sqlite:///rel``)."""
        if self.dialect != "sqlite":
            raise ConfigurationError(f"catalog {self.name!r} is not on SQLite")
        rest = self.uri.split(":///", 1)[1] if ":///" in self.uri else ""
        rest = rest.split("?", 1)[0]
        if not rest:
            raise ConfigurationError(f"SQLite catalog uri {self.uri!r} names no database file")
        return Path(unquote(rest)).absolute()

    def jdbc_credentials(self) -> tuple[str | None, str | None]:
        parts = urlsplit(self.uri)
        user = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        return user, password

    def redacted_uri(self) -> str:
        """``uri`` with its password replaced by ``***``, for messages and logs."""
        parts = urlsplit(self.uri)
        if parts.password:
            return self.uri.replace(f":{parts.password}@", f":{REDACTED}@")
        return self.uri
