"""Where staged files live: a URI or path opened as a pyarrow filesystem, spelled back alike.

Staging, manifests, the sweep, the collections' pending states and the job
exchange folder list and delete files outside Iceberg's own ``FileIO``
(Iceberg has no "list a folder"). This module is the one place a location
becomes a filesystem and a listed path becomes a URI spelled like the
location it came from (``file://`` + path for local warehouses, ``s3://`` +
bucket + key on S3; the table's ``FileIO`` and the manifests compare paths as
strings).

Object stores need more than the URI: the endpoint, region, path-style
addressing and credentials of the catalog connection. Those arrive as the
catalog's FileIO properties, spelled as PyIceberg spells them (``s3.endpoint``,
``s3.access-key-id``, ...: :func:`io_properties` of a table, or
``CatalogConfig.pyiceberg_properties()``), and every caller passes them along
as ``io``; without them an ``s3://`` location falls back to the AWS default
chain (environment, instance role), which is what a deployment on AWS wants.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from airflow_provider_ct.core.outages import Bounds
from airflow_provider_ct.exceptions import StagingError

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: URI schemes of S3 and S3-compatible stores (``s3a``/``s3n``: Hadoop's spellings).
S3_SCHEMES = ("s3", "s3a", "s3n")

# The catalog's FileIO properties, as PyIceberg names them (``client.*``: its
# fallbacks for every cloud). ``s3.path-style-access`` is Java Iceberg's
# S3FileIO name; PyIceberg's is the inverse ``s3.force-virtual-addressing``.
S3_ENDPOINT = "s3.endpoint"
S3_REGION = ("s3.region", "client.region")
S3_ACCESS_KEY_ID = ("s3.access-key-id", "client.access-key-id")
S3_SECRET_ACCESS_KEY = ("s3.secret-access-key", "client.secret-access-key")
S3_SESSION_TOKEN = ("s3.session-token", "client.session-token")
S3_PATH_STYLE_ACCESS = "s3.path-style-access"
S3_FORCE_VIRTUAL_ADDRESSING = "s3.force-virtual-addressing"
S3_CONNECT_TIMEOUT = "s3.connect-timeout"
S3_REQUEST_TIMEOUT = "s3.request-timeout"

Properties = Mapping[str, str]


def io_properties(table: Table) -> dict[str, str]:
    """The FileIO properties of ``table``: its catalog's, plus what the catalog returned with it.

    A REST catalog may hand out per-table storage settings (vended
    credentials, its endpoint) when it loads a table; PyIceberg merges them
    into the table's ``io``, so this is what reads and writes of that table use.
    """
    return dict(getattr(table.io, "properties", None) or {})


def scheme_of(uri: str) -> str:
    """The URI scheme of ``uri`` in lower case (``""`` for a plain path)."""
    return urlsplit(uri).scheme.lower() if "://" in uri else ""


def is_s3(uri: str) -> bool:
    """Whether ``uri`` is on S3 or an S3-compatible store (``s3://``, ``s3a://``, ``s3n://``)."""
    return scheme_of(uri) in S3_SCHEMES


def _first(props: Properties, keys: tuple[str, ...]) -> str | None:
    return next((props[k] for k in keys if props.get(k)), None)


def _flag(value: str | None) -> bool | None:
    if value is None or value == "":
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise StagingError(f"storage setting {value!r} is not a boolean (true or false)")


def path_style(props: Properties) -> bool | None:
    """Whether to address buckets by path (``endpoint/bucket/key``); None: not said.

    ``s3.path-style-access`` wins, then PyIceberg's inverse
    ``s3.force-virtual-addressing``; with a custom endpoint and neither,
    path style (what pyarrow does there, and what S3-compatible stores expect).
    """
    stated = _flag(props.get(S3_PATH_STYLE_ACCESS))
    if stated is not None:
        return stated
    virtual = _flag(props.get(S3_FORCE_VIRTUAL_ADDRESSING))
    if virtual is not None:
        return not virtual
    return True if props.get(S3_ENDPOINT) else None


def s3_settings(props: Properties) -> dict[str, str]:
    """The S3 settings among ``props`` that change how a store is reached (a cache key)."""
    keys = (
        S3_ENDPOINT,
        *S3_REGION,
        *S3_ACCESS_KEY_ID,
        *S3_SECRET_ACCESS_KEY,
        *S3_SESSION_TOKEN,
        S3_PATH_STYLE_ACCESS,
        S3_FORCE_VIRTUAL_ADDRESSING,
        S3_CONNECT_TIMEOUT,
        S3_REQUEST_TIMEOUT,
    )
    return {k: str(props[k]) for k in keys if props.get(k)}


@functools.lru_cache(maxsize=16)
def _s3_filesystem(settings: tuple[tuple[str, str], ...], bounds: Bounds) -> pafs.S3FileSystem:
    """One S3 filesystem per distinct setting (each holds a connection pool)."""
    props = dict(settings)
    kwargs: dict[str, object] = {}
    endpoint = props.get(S3_ENDPOINT)
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        if endpoint.lower().startswith("http://"):
            kwargs["scheme"] = "http"
    for name, keys in (
        ("region", S3_REGION),
        ("access_key", S3_ACCESS_KEY_ID),
        ("secret_key", S3_SECRET_ACCESS_KEY),
        ("session_token", S3_SESSION_TOKEN),
    ):
        value = _first(props, keys)
        if value:
            kwargs[name] = value
    style = path_style(props)
    if style is not None:
        kwargs["force_virtual_addressing"] = not style
    # Bounded waits (core/outages.py): a dead or frozen store fails the call
    # within retries x timeout instead of curl's and the SDK's defaults.
    props = {**bounds.file_io(props), **props}
    timeouts = {"connect_timeout": S3_CONNECT_TIMEOUT, "request_timeout": S3_REQUEST_TIMEOUT}
    for name, key in timeouts.items():
        kwargs[name] = float(props[key])
    kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(
        max_attempts=bounds.store_retries + 1
    )
    return pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]


def filesystem(uri: str, io: Properties | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and in-filesystem path of a URI (plain paths are local).

    :param io: the catalog's FileIO properties (:func:`io_properties`); an
        ``s3://``/``s3a://`` location is opened with their endpoint, region,
        addressing and credentials, other locations ignore them.
    """
    try:
        if is_s3(uri):
            parts = urlsplit(uri)
            if not parts.netloc:
                raise ValueError("no bucket in the URI")
            settings = tuple(sorted(s3_settings(io or {}).items()))
            return _s3_filesystem(settings, Bounds.of(io)), parts.netloc + parts.path
        return pafs.FileSystem.from_uri(uri)
    except StagingError:
        raise
    except Exception as exc:  # pyarrow raises ArrowInvalid, a ValueError, and others
        raise StagingError(f"cannot open staging location {uri!r}: {exc}") from None


def uri_prefix(uri: str, io: Properties | None = None) -> str:
    """What to put before a filesystem path to spell it like ``uri`` (``file://``, ``s3://``)."""
    _, local = filesystem(uri, io)
    return uri[: len(uri) - len(local)] if uri.endswith(local) else ""


def files_under(uri: str, io: Properties | None = None) -> list[pafs.FileInfo]:
    """Every file below ``uri`` (recursively), as pyarrow file infos; none if it is missing."""
    fs, local = filesystem(uri, io)
    selector = pafs.FileSelector(local, allow_not_found=True, recursive=True)
    return [i for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
