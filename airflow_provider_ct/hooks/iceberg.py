"""IcebergCatalogHook: a PyIceberg catalog (and matching Spark conf) from Airflow.

Resolution order:

1. the connection named by ``iceberg_conn_id`` if it exists;
2. for the default id only, the zero-config embedded catalog (SQLite and a
   local warehouse under ``$AIRFLOW_HOME/ct``) when no such connection exists.

A connection of type ``iceberg_catalog`` is read as follows (see
``docs/connections.md``): ``extra.uri`` is the catalog URL (SQLAlchemy URL for
``sql``, HTTP endpoint for ``rest``); without it, a PostgreSQL URL is built from
host, port, login, password and schema (the database). ``extra.warehouse``,
``extra.catalog_name`` (default ``ct``) and ``extra.kind`` (``sql``/``rest``);
any other extra keys are passed to PyIceberg as catalog properties.

A connection of type ``iceberg`` (``apache-airflow-providers-apache-iceberg``,
whose default id is ``iceberg_default``) is read the way that provider's
``IcebergHook`` reads it: every extra key is a PyIceberg catalog property,
``host`` is the catalog ``uri``, ``type`` defaults to ``rest``, and for REST
``login``/``password`` become ``credential`` (OAuth2 client id and secret).
The catalog's name is ``extra.catalog_name``, else the connection id (the
name that provider's hook opens the catalog under, so on a SQL catalog both
hooks see the same tables). We translate instead of calling that hook's
``catalog``: the Spark job needs the same catalog as Spark properties, and
one :class:`CatalogConfig` gives both.

The catalog's secrets (the password in its URL, sensitive properties) are
registered with Airflow's secrets masker as soon as the configuration is
resolved, so a task log line that happens to contain one shows ``***``.
Airflow masks a connection's ``password`` field by itself, but not a password
inside ``extra.uri``, nor its percent-encoded spelling.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseHook

from airflow_provider_ct.core.catalog import DEFAULT_CATALOG_NAME, CatalogConfig
from airflow_provider_ct.core.commit import catalog_transport_errors
from airflow_provider_ct.core.outages import raise_if_unavailable
from airflow_provider_ct.core.policies import parse_policies
from airflow_provider_ct.core.query import normalize_table_name
from airflow_provider_ct.core.tables import load_table_or_none
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.spark.conf import spark_conf

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

_RESERVED_EXTRAS = ("uri", "warehouse", "catalog_name", "kind")
#: The connection type of apache-airflow-providers-apache-iceberg.
ICEBERG_PROVIDER_CONN_TYPE = "iceberg"


def mask_secrets(config: CatalogConfig) -> None:
    """Register ``config``'s secrets with Airflow's secrets masker (task logs show ``***``)."""
    from airflow.sdk.log import mask_secret

    for secret in config.secrets():
        mask_secret(secret)


class IcebergCatalogHook(BaseHook):
    """Opens the Iceberg catalog our tables live in.

    :param iceberg_conn_id: Airflow connection id; the default falls back to the
        embedded catalog when no connection of that id exists.
    """

    conn_name_attr = "iceberg_conn_id"
    default_conn_name = "iceberg_catalog_default"
    conn_type = "iceberg_catalog"
    hook_name = "Iceberg catalog (airflow-provider-ct)"

    def __init__(self, iceberg_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.iceberg_conn_id = iceberg_conn_id
        self._config: CatalogConfig | None = None
        self._catalog: Catalog | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database (PostgreSQL catalog)"},
            "placeholders": {
                "extra": '{"uri": "sqlite:////path/catalog.db", "warehouse": "file:///path/wh"}',
            },
        }

    def get_config(self) -> CatalogConfig:
        """The catalog configuration this hook resolves to."""
        if self._config is None:
            config = self._resolve_config()
            mask_secrets(config)
            self._config = config
        return self._config

    def _resolve_config(self) -> CatalogConfig:
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.iceberg_conn_id)
        except AirflowNotFoundException:
            if self.iceberg_conn_id != self.default_conn_name:
                raise ConfigurationError(
                    f"Airflow connection {self.iceberg_conn_id!r} does not exist"
                ) from None
            config = CatalogConfig.embedded()
            log.info(
                "no connection %r: using the embedded catalog %s", self.iceberg_conn_id, config.uri
            )
            return config
        return self.config_from_connection(conn)

    @staticmethod
    def config_from_connection(conn: Any) -> CatalogConfig:
        """Translate an Airflow connection into a :class:`CatalogConfig`."""
        if conn.conn_type == ICEBERG_PROVIDER_CONN_TYPE:
            return config_from_iceberg_connection(conn)
        extra = dict(conn.extra_dejson or {})
        uri = extra.get("uri")
        if not uri:
            if not conn.host:
                raise ConfigurationError(
                    f"connection {conn.conn_id!r} needs extra.uri or a PostgreSQL host"
                )
            auth = ""
            if conn.login:
                auth = quote(conn.login, safe="")
                if conn.password:
                    auth += ":" + quote(conn.password, safe="")
                auth += "@"
            port = f":{conn.port}" if conn.port else ""
            uri = f"postgresql+psycopg2://{auth}{conn.host}{port}/{conn.schema or 'postgres'}"
        properties = {k: str(v) for k, v in extra.items() if k not in _RESERVED_EXTRAS}
        return CatalogConfig(
            name=str(extra.get("catalog_name") or DEFAULT_CATALOG_NAME),
            kind=str(extra.get("kind") or "sql"),
            uri=str(uri),
            warehouse=str(extra.get("warehouse") or ""),
            properties=properties,
        )

    def get_conn(self) -> Catalog:
        return self.get_catalog()

    def get_catalog(self) -> Catalog:
        """The PyIceberg catalog (opened once per hook)."""
        if self._catalog is None:
            self._catalog = self.get_config().load()
        return self._catalog

    def load_table(self, identifier: str) -> Table:
        """Load ``namespace.table``, with a clear error when it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self.get_catalog()
        try:
            return catalog.load_table(identifier)
        except NoSuchTableError:
            raise ConfigurationError(
                f"table {identifier!r} does not exist in catalog {self.get_config().name!r}"
            ) from None
        except catalog_transport_errors() as exc:
            # The catalog was opened, then its database went away (or the network).
            config = self.get_config()
            raise_if_unavailable(exc, config, f"loading table {identifier!r}")
            raise ConfigurationError(
                f"cannot load table {identifier!r} from Iceberg catalog {config.name!r} at "
                f"{config.redacted_uri()}: {config.scrub(str(exc))}"
            ) from exc

    def load_table_or_none(self, identifier: str) -> Table | None:
        """The table ``identifier``, or ``None`` if it does not exist (before a first tick)."""
        return load_table_or_none(self.get_catalog(), identifier)  # type: ignore[no-any-return]

    def timelines(
        self, tables: Iterable[str], policies: Mapping[str, str] | None = None
    ) -> dict[str, Timeline]:
        """Timelines of existing tables, keyed by normalized name (a missing one is a clear error).

        On the hook because every reader of input frontiers (mint, the sensor,
        the triggerer) needs the same three things from one catalog: its name
        to normalize ``tables``, the tables, and the policies checked against
        them. Policy keys are checked before any table is loaded, so a typo
        fails fast instead of leaving its input on the default policy.
        """
        catalog_name = self.get_config().name
        names = [normalize_table_name(t, catalog_name) for t in tables]
        parsed = parse_policies(policies, names, catalog_name)
        return {name: Timeline.of(self.load_table(name), policy=parsed.get(name)) for name in names}

    def target_timeline(self, target: str) -> Timeline | None:
        """The timeline of a managed output, or ``None`` before its first tick creates it."""
        table = self.load_table_or_none(target)
        return None if table is None else Timeline.of(table)

    def get_spark_conf(self, **kwargs: Any) -> dict[str, str]:
        """Spark properties registering the same catalog (see :func:`spark_conf`).

        Without the password (pass ``include_secrets=True`` for an in-process
        session): these usually end up as ``spark-submit --conf`` arguments.
        """
        return spark_conf(self.get_config(), **kwargs)

    def test_connection(self) -> tuple[bool, str]:
        try:
            names = self.get_catalog().list_namespaces()
        except Exception as exc:
            return False, str(exc)
        return True, f"catalog reachable, {len(names)} namespace(s)"


def config_from_iceberg_connection(conn: Any) -> CatalogConfig:
    """A connection of the official Iceberg provider (type ``iceberg``) as a :class:`CatalogConfig`.

    Mirrors ``IcebergHook.catalog`` of apache-airflow-providers-apache-iceberg
    2.x: extra first, then ``host`` as ``uri``, ``type`` defaulting to
    ``rest``, ``login:password`` as the REST ``credential``.
    """
    props = {str(k): str(v) for k, v in (conn.extra_dejson or {}).items()}
    if conn.host:
        props["uri"] = conn.host.rstrip("/")
    kind = props.pop("type", "rest")
    if kind == "rest" and conn.login and conn.password:
        props["credential"] = f"{conn.login}:{conn.password}"
    name = props.pop("catalog_name", "") or str(conn.conn_id)
    if not name.isidentifier():
        name = DEFAULT_CATALOG_NAME
    uri = props.pop("uri", "")
    if not uri:
        raise ConfigurationError(
            f"connection {conn.conn_id!r} (type iceberg) needs the catalog URI in host or extra.uri"
        )
    if kind not in ("sql", "rest"):
        raise ConfigurationError(
            f"connection {conn.conn_id!r}: catalog type {kind!r} is not supported by "
            "airflow-provider-ct (sql or rest)"
        )
    return CatalogConfig(
        name=name, kind=kind, uri=uri, warehouse=props.pop("warehouse", ""), properties=props
    )
