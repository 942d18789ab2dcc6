"""Where staged files live: a URI or path opened as a pyarrow filesystem, spelled back alike.

Staging, manifests and the sweep list and delete files outside Iceberg's own
``FileIO`` (Iceberg has no "list a folder"). This module is the one place a
location becomes a filesystem and a listed path becomes a URI spelled like
the location it came from (``file://`` + path for local warehouses; the
table's ``FileIO`` and the manifests compare paths as strings).
"""

from __future__ import annotations

import pyarrow.fs as pafs

from airflow_provider_ct.exceptions import StagingError


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and in-filesystem path of a URI (plain paths are local)."""
    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid, a ValueError, and others
        raise StagingError(f"cannot open staging location {uri!r}: {exc}") from None


def uri_prefix(uri: str) -> str:
    """What to put before a filesystem path to spell it like ``uri`` (``file://`` or none)."""
    _, local = filesystem(uri)
    return uri[: len(uri) - len(local)] if uri.endswith(local) else ""


def files_under(uri: str) -> list[pafs.FileInfo]:
    """Every file below ``uri`` (recursively), as pyarrow file infos; none if it is missing."""
    fs, local = filesystem(uri)
    selector = pafs.FileSelector(local, allow_not_found=True, recursive=True)
    return [i for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
