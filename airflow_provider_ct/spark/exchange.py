"""How a submitted job gets its arguments and returns its report without a shared ``/tmp``.

In ``--deploy-mode cluster`` (YARN, Kubernetes) the driver runs on some
cluster node: it cannot read a file the operator wrote into its own temporary
folder, and the operator cannot read a report the driver wrote into its own.
So:

* **arguments travel inline**: :func:`inline` turns a text (the batch
  description, the query, a continual task's definition) into one
  ``b64:<base64>`` command-line argument, which :func:`arg_text` reads back
  (it also still reads ``@file`` and plain text);
* **the report and the error come back through an exchange folder** every
  node can reach: ``ct_exchange_dir`` in the Spark connection's extra, else
  ``<ct.staging-root>/ct-jobs`` when the catalog connection names a staging
  root (a table bucket refuses anything but Iceberg's files, see
  ``docs/deployment.md``), else ``<warehouse>/ct-jobs`` when the warehouse
  is a URI (``file://``, ``s3://``, ...), since every executor already
  reads and writes there. The
  job writes ``report.json`` (or ``error.json``) into a folder of its own
  there, the operator reads it back and removes the folder.

Secrets do not travel this way (see ``docs/deployment.md``): they never go on
a command line, and never into the warehouse.
"""

from __future__ import annotations

import base64
import logging
import posixpath
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.core.storage import Properties, filesystem, is_s3
from airflow_provider_ct.exceptions import ConfigurationError, StagingError

log = logging.getLogger(__name__)

INLINE_PREFIX = "b64:"
#: Spark connection extra naming the exchange folder.
EXCHANGE_DIR_KEY = "ct_exchange_dir"
EXCHANGE_SUBDIR = "ct-jobs"


def inline(text: str) -> str:
    """``text`` as one command-line argument (base64 survives any shell and quoting)."""
    return INLINE_PREFIX + base64.urlsafe_b64encode(text.encode()).decode("ascii")


def arg_text(value: str) -> str:
    """A CLI value: ``b64:<base64>``, ``@<file>`` (read) or the text itself."""
    if value.startswith(INLINE_PREFIX):
        return base64.urlsafe_b64decode(value[len(INLINE_PREFIX) :].encode("ascii")).decode()
    return Path(value[1:]).read_text() if value.startswith("@") else value


def exchange_root(config: CatalogConfig, extra: dict[str, Any]) -> str | None:
    """Where jobs of this catalog return their reports; ``None``: the operator's temp folder."""
    configured = str(extra.get(EXCHANGE_DIR_KEY) or "")
    if configured:
        return configured.rstrip("/")
    staging = config.properties.get(TableKeys.STAGING_ROOT, "")
    if staging:
        return staging.rstrip("/") + "/" + EXCHANGE_SUBDIR
    if "://" in config.warehouse:
        return config.warehouse.rstrip("/") + "/" + EXCHANGE_SUBDIR
    return None


def new_job_folder(root: str) -> str:
    """A folder of its own under ``root`` for one job's report and error."""
    return posixpath.join(root, uuid.uuid4().hex)


def _fs(location: str, io: Properties | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``location``, reached with the catalog's FileIO properties ``io``."""
    try:
        return filesystem(location, io)
    except StagingError as exc:
        raise ConfigurationError(
            f"job exchange location {location!r} is not usable ({exc}); set "
            f"{EXCHANGE_DIR_KEY!r} in the Spark connection's extra to a URI every node reaches"
        ) from exc


def write_text(location: str, text: str, io: Properties | None = None) -> None:
    """Write ``text`` to ``location`` (a local path or a URI), creating its folder."""
    fs, path = _fs(location, io)
    if not is_s3(location):  # object stores have no folders (and "mkdir" objects cost a PUT)
        fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(text.encode())


def read_text(location: str, io: Properties | None = None) -> str | None:
    """The text at ``location``, or ``None`` if there is no such file."""
    fs, path = _fs(location, io)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        return bytes(stream.read()).decode()


def remove_folder(location: str, io: Properties | None = None) -> None:
    """Remove a job's exchange folder (best effort: a leftover is harmless)."""
    try:
        fs, path = _fs(location, io)
        if fs.get_file_info(path).type == pafs.FileType.Directory:
            fs.delete_dir(path)
    except (OSError, ConfigurationError) as exc:
        log.warning("could not remove the job folder %s: %s", location, exc)
