"""PyIceberg's REST catalog with a bound on every HTTP request.

PyIceberg's ``RestCatalog`` sends its requests through a ``requests``
session without a timeout: a frozen catalog (``SIGSTOP``, a partition)
stalls a mint or an append for as long as TCP keeps the connection. This
subclass mounts an adapter that gives each request the catalog bound of
:mod:`.outages` when the caller gave none; everything else is PyIceberg's.
:meth:`~airflow_provider_ct.core.catalog.CatalogConfig.load` selects it
through PyIceberg's ``py-catalog-impl``.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from requests import Session
from requests.adapters import HTTPAdapter

from airflow_provider_ct.core.outages import Bounds

#: ``py-catalog-impl`` naming :class:`BoundedRestCatalog`.
IMPL = f"{__name__}.BoundedRestCatalog"


class _BoundedAdapter(HTTPAdapter):
    """An adapter whose requests wait at most ``timeout`` seconds (connect, then each read)."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self._timeout = timeout

    def send(  # type: ignore[override]  # the same arguments, passed through
        self, request: Any, stream: bool = False, timeout: Any = None, **kwargs: Any
    ) -> Any:
        return super().send(request, stream=stream, timeout=timeout or self._timeout, **kwargs)


class BoundedRestCatalog(RestCatalog):
    """``RestCatalog`` whose session (config, OAuth2 tokens, every call) is bounded."""

    def _create_session(self) -> Session:
        session = super()._create_session()
        self._bound(session)
        return session

    def _create_legacy_oauth2_auth_manager(self, session: Session) -> Any:
        # Called inside _create_session, and it fetches a token at once: bound it first.
        self._bound(session)
        return super()._create_legacy_oauth2_auth_manager(session)

    def _bound(self, session: Session) -> None:
        adapter = _BoundedAdapter(Bounds.of(self.properties).catalog_timeout_s)
        # A more specific mount (SigV4's, on the catalog's URI) keeps precedence.
        session.mount("http://", adapter)
        session.mount("https://", adapter)
