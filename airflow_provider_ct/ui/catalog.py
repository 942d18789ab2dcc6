"""Opening a catalog so that the status page cannot write to it.

The page only reads, but "only reads" in our code is a promise; for SQL
catalogs the database enforces it too:

* SQLite is opened with ``mode=ro`` (a URI filename), so even PyIceberg's
  start-up cannot create the catalog tables, and a catalog whose database
  file does not exist yet is reported as empty rather than created;
* PostgreSQL sessions start with ``default_transaction_read_only=on``;
* ``init_catalog_tables=false`` for both, so PyIceberg does not try to
  create its tables in a database that has none;
* a REST catalog is opened as usual: nothing here calls a write endpoint.

No folder is created either (``CatalogConfig.load`` creates the embedded
catalog's folders, which a page must not do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.outages import raise_if_unavailable
from airflow_provider_ct.exceptions import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


class CatalogMissing(ConfigurationError):
    """The catalog's SQLite database does not exist yet: nothing was ever written."""


def read_only_uri(config: CatalogConfig) -> str:
    """The catalog's SQLAlchemy URL, made read-only at the database level."""
    if config.dialect == "sqlite":
        path = config.sqlite_path()
        if not path.exists():
            raise CatalogMissing(f"catalog {config.name!r} has no database yet ({path})")
        return f"sqlite:///file:{path}?mode=ro&uri=true"
    parts = urlsplit(config.uri)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", "-c default_transaction_read_only=on"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def open_read_only(config: CatalogConfig) -> Catalog:
    """A PyIceberg catalog for ``config`` that refuses writes where the catalog can.

    :raises CatalogMissing: an embedded (SQLite) catalog that was never created.
    :raises ConfigurationError: the catalog cannot be opened (the message has no secret).
    :raises ServiceUnavailableError: the catalog (or its store) did not answer in time.
    """
    from pyiceberg.catalog import load_catalog

    props = config.bounded_properties()
    if config.kind == "sql":
        props["uri"] = read_only_uri(config)
        props["init_catalog_tables"] = "false"
    try:
        return load_catalog(config.name, **props)
    except Exception as exc:
        raise_if_unavailable(exc, config, "opening the catalog")
        raise ConfigurationError(
            f"cannot open Iceberg catalog {config.name!r} at {config.redacted_uri()}: "
            + config.scrub(str(exc))
        ) from exc
