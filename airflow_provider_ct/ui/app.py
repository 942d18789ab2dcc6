"""The FastAPI app behind the "Continual tables" page, mounted by Airflow's API server.

Every route depends on Airflow's own authorization dependency
``requires_access_asset("GET")`` (``airflow.api_fastapi.core_api.security``):
it reads the caller's JWT, from an ``Authorization: Bearer`` header or from
the ``_token`` cookie the Airflow UI sets at login (the page is shown in
the UI's iframe on the same origin, so the browser sends that cookie), and
asks the configured auth manager whether the user may read assets. No
token: 401, an invalid one: 403, a user without asset access: 403. Nothing
is read from the catalog before that check passes.

Routes (under the plugin's prefix, ``/ct``):

* ``GET /``: every managed table of each configured catalog (HTML);
* ``GET /tables/{name}?conn=<id>``: one table's batches and plot (HTML);
* ``GET /api/tables``, ``GET /api/tables/{name}?conn=<id>``: the same as JSON.

Which catalogs: the Iceberg connection ids in ``[ct] ui_iceberg_conn_ids``
(comma-separated; environment ``AIRFLOW__CT__UI_ICEBERG_CONN_IDS``),
default the provider's default connection, which falls back to the embedded
catalog like every operator. Catalogs are opened read-only
(:mod:`.catalog`) for each request: a page view costs one catalog listing
and one metadata read per table, and there is no cache to go stale.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.core.frontier import now_ms
from airflow_provider_ct.exceptions import ConfigurationError, CTError, ServiceUnavailableError
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from airflow_provider_ct.ui import render
from airflow_provider_ct.ui.catalog import CatalogMissing, open_read_only
from airflow_provider_ct.ui.producers import producing_dags
from airflow_provider_ct.ui.status import (
    CatalogStatus,
    NotShown,
    TableHistory,
    catalog_status,
    describe_error,
    table_history,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from pyiceberg.catalog import Catalog

    from airflow_provider_ct.core.catalog import CatalogConfig

log = logging.getLogger(__name__)

CONF_SECTION, CONF_KEY = "ct", "ui_iceberg_conn_ids"


def configured_conn_ids() -> list[str]:
    """The Iceberg connection ids whose catalogs the page lists (at least one)."""
    from airflow.configuration import conf

    value = conf.get(CONF_SECTION, CONF_KEY, fallback="") or ""
    ids = [part.strip() for part in value.split(",") if part.strip()]
    return ids or [IcebergCatalogHook.default_conn_name]


@contextmanager
def _catalog(conn_id: str) -> Iterator[tuple[CatalogConfig, Catalog]]:
    """The connection's catalog, opened read-only and closed after the request."""
    config = IcebergCatalogHook(conn_id).get_config()
    catalog = open_read_only(config)
    try:
        yield config, catalog
    finally:
        engine = getattr(catalog, "engine", None)
        if engine is not None:  # a SQL catalog: release its connection pool
            engine.dispose()


def gather(conn_id: str, now: int) -> CatalogStatus:
    """One catalog's status; a catalog that cannot be opened is a status with ``error`` set."""
    try:
        with _catalog(conn_id) as (config, catalog):
            return catalog_status(catalog, config.name, now=now, scrub=config.scrub)
    except CatalogMissing as exc:
        return CatalogStatus(conn_id, now, notes=(f"{exc}: no table was written to it yet",))
    except Exception as exc:  # a catalog outage is a row on the page, not a 500
        log.warning("continual tables page: catalog of %s unavailable: %s", conn_id, exc)
        return CatalogStatus(conn_id, now, error=describe_error(exc))


def producers_of(statuses: list[CatalogStatus]) -> tuple[dict[str, list[str]], list[str]]:
    """DAG ids per asset URI from Airflow's database, and a note if it could not be asked."""
    uris = {t.asset_uri for s in statuses for t in s.tables}
    try:
        return producing_dags(uris), []
    except Exception as exc:
        log.warning("continual tables page: producing DAGs unavailable: %s", exc)
        return {}, [f"The producing DAGs could not be read from Airflow: {describe_error(exc)}"]


def history(conn_id: str, name: str, now: int) -> TableHistory:
    """One table's history; :class:`NotShown` for unknown tables and connections."""
    if conn_id not in configured_conn_ids():
        raise NotShown(f"connection {conn_id!r} is not one the page lists")
    with _catalog(conn_id) as (config, catalog):
        return table_history(catalog, config.name, name, now=now, scrub=config.scrub)


@dataclass(frozen=True)
class IndexData:
    """What the index shows: each configured catalog's status and the producing DAGs."""

    now: int
    sections: list[tuple[str, CatalogStatus]]
    producers: dict[str, list[str]]
    notes: list[str]


def index_data() -> IndexData:
    """Every configured catalog's status at one ``now``, and who produces each table."""
    now = now_ms()
    sections = [(conn, gather(conn, now)) for conn in configured_conn_ids()]
    producers, notes = producers_of([s for _, s in sections])
    return IndexData(now, sections, producers, notes)


class PageError(CTError):
    """A page cannot be shown; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class HistoryData:
    """What a table's page shows."""

    now: int
    conn_id: str
    history: TableHistory
    dags: list[str]


def history_data(name: str, conn: str | None) -> HistoryData:
    """A table's page data, or the HTTP status and message to answer instead.

    :raises PageError: 404 for an unknown table or connection, 503 when the
        catalog cannot be opened (an outage is reported, not a 500).
    """
    now = now_ms()
    conn_id = conn or configured_conn_ids()[0]
    try:
        found = history(conn_id, name, now)
    except NotShown as exc:
        raise PageError(404, str(exc)) from None
    except (ConfigurationError, ServiceUnavailableError) as exc:
        raise PageError(503, describe_error(exc)) from None
    producers, _ = producers_of([CatalogStatus("", now, (found.status,))])
    return HistoryData(now, conn_id, found, producers.get(found.status.asset_uri, []))


def create_app() -> FastAPI:
    """The FastAPI app; every route requires a logged-in user allowed to read assets."""
    from airflow.api_fastapi.core_api.security import requires_access_asset
    from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query
    from fastapi.responses import HTMLResponse

    app = FastAPI(title="Continual tables", docs_url=None, redoc_url=None, openapi_url=None)
    router = APIRouter(dependencies=[Depends(requires_access_asset(method="GET"))])

    @router.get("/", response_class=HTMLResponse)
    def index() -> str:
        data = index_data()
        return render.render_index(data.sections, data.producers, data.now, data.notes)

    @router.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str, conn: str | None = Query(default=None)) -> Any:
        try:
            data = history_data(name, conn)
        except PageError as exc:
            page = render.render_message(name, str(exc), now_ms())
            return HTMLResponse(page, status_code=exc.status)
        return render.render_history(data.history, data.dags, data.conn_id, data.now)

    @router.get("/api/tables")
    def api_tables() -> dict[str, Any]:
        data = index_data()
        catalogs = [{"conn_id": c, **render.to_json(s)} for c, s in data.sections]
        return {
            "now_ms": data.now,
            "catalogs": catalogs,
            "producers": data.producers,
            "notes": data.notes,
        }

    @router.get("/api/tables/{name}")
    def api_table(name: str, conn: str | None = Query(default=None)) -> dict[str, Any]:
        try:
            data = history_data(name, conn)
        except PageError as exc:
            raise HTTPException(status_code=exc.status, detail=str(exc)) from None
        return {"now_ms": data.now, "dags": data.dags, **render.to_json(data.history)}

    app.include_router(router)
    return app
