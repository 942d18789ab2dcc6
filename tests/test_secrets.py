"""The catalog password never shows on a command line, in a log line, an XCom or a repr."""

from __future__ import annotations

import json
import secrets
from urllib.parse import quote

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig

#: URL-special characters, so both the raw and the percent-encoded form are checked.
PASSWORD_CHARS = "p@ss:w/rd%"


def _secret() -> str:
    return f"{PASSWORD_CHARS}{secrets.token_hex(8)}"


def _forms(password: str) -> list[str]:
    """Every spelling of the password a leak could use."""
    return [password, quote(password, safe="")]


def _pg_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, password: str) -> None:
    """An Airflow connection to a PostgreSQL catalog, password in the URL (no server needed)."""
    uri = f"postgresql+psycopg2://ice:{quote(password, safe='')}@127.0.0.1:5999/lake"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps(
            {
                "conn_type": "iceberg_catalog",
                "extra": {"uri": uri, "warehouse": "file:///tmp/wh", "s3.secret-access-key": "k"},
            }
        ),
    )


def test_catalog_config_repr_and_str_hide_the_password() -> None:
    password = _secret()
    config = CatalogConfig(
        uri=f"postgresql+psycopg2://ice:{quote(password, safe='')}@db:5432/lake",
        properties={"token": "tok-123456", "s3.endpoint": "http://minio:9000"},
    )
    shown = [repr(config), str(config), f"{config}", repr([config])]
    for text in shown:
        for form in [*_forms(password), "tok-123456"]:
            assert form not in text
        assert "postgresql+psycopg2://ice:***@db:5432/lake" in text
        assert "http://minio:9000" in text  # only secrets are hidden
    assert set(config.secrets()) == {*_forms(password), "tok-123456"}
    assert config.jdbc_credentials() == ("ice", password)  # still usable
    with pytest.raises(Exception, match=r"ice:\*\*\*@") as err:
        CatalogConfig(uri=f"mysql://ice:{quote(password, safe='')}@db/lake").dialect  # noqa: B018
    assert not any(form in str(err.value) for form in _forms(password))


def test_the_hook_masks_the_password_in_task_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook

    password = _secret()
    line = f"connecting with {password} or {quote(password, safe='')}"
    assert redact(line) == line  # not known to the masker yet
    _pg_connection(monkeypatch, "ct_masked_cat", password)
    config = IcebergCatalogHook("ct_masked_cat").get_config()
    assert redact(line) == "connecting with *** or ***"
    for form in _forms(password):
        assert form not in repr(config) and form not in str(config)
