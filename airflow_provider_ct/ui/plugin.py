"""The Airflow plugin that puts the "Continual tables" page into the Airflow UI.

Installed with the provider through the ``airflow.plugins`` entry point (and
named in ``get_provider_info``'s ``plugins``). It registers:

* a FastAPI app mounted by the API server at ``/ct`` (:mod:`.app`);
* an external view, ``Continual tables`` under *Browse*, that the UI shows
  in an iframe at ``/plugin/continual-tables`` with the app's page in it.

Every Airflow process loads every plugin, task processes included (for
macros and listeners), so this module imports neither FastAPI nor Airflow's
API server: the app is built on the first request the API server passes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/ct"
URL_ROUTE = "continual-tables"

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app that builds :func:`~airflow_provider_ct.ui.app.create_app` on first use."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if self._app is None:
            from airflow_provider_ct.ui.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)

    def __repr__(self) -> str:
        return "airflow_provider_ct.ui.app.create_app()"


class ContinualTablesPlugin(AirflowPlugin):
    """Frontiers, lag and batches of every continual table, in the Airflow UI."""

    name = "continual_tables"
    fastapi_apps = [
        {
            "app": LazyApp(),
            "url_prefix": URL_PREFIX,
            "name": "Continual tables (airflow-provider-ct)",
        }
    ]
    external_views = [
        {
            "name": "Continual tables",
            # Relative: the UI resolves it against its base URL (any proxy prefix).
            "href": URL_PREFIX.lstrip("/") + "/",
            "url_route": URL_ROUTE,
            "destination": "nav",
            "category": "browse",
        }
    ]
