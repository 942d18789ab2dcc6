"""The one rule for batch and attempt ids: each becomes a folder and a file name.

A batch id names its staging folder (``data/ct_batch=<id>/``) and manifest
(``<id>.attempt-<attempt>.json``) on every filesystem and object store a
table can live on, so it is a single ASCII path segment that no store treats
specially: letters, digits, ``_ . = -``, no ``..``, at most 200 characters
(room for the manifest's suffixes within a 255-byte file name). Minting
derives ids that satisfy it (:func:`id_part`); the description parser, the
staging code and the Spark job all check it with :func:`check_id`, so an id
the mint accepts is never refused inside a job.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_provider_ct.exceptions import CTError

MAX_ID_CHARS = 200
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=-]{0,199}", re.ASCII)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+", re.ASCII)


def check_id(value: Any, what: str, error: type[CTError]) -> str:
    """``value`` if it is a valid id, else ``error`` naming ``what`` and the rule."""
    if not isinstance(value, str) or not _ID.fullmatch(value) or ".." in value:
        raise error(
            f"{what} {value!r:.80} is not a valid id (ASCII letters, digits, '_', '.', '=', "
            f"'-'; not starting with '.', '=' or '-'; no '..'; at most {MAX_ID_CHARS} "
            "characters): it cannot name a staging folder under the table"
        )
    return value


def id_part(text: str, limit: int) -> str:
    """``text`` made safe for an id: runs of other characters become ``-``, cut to ``limit``."""
    safe = _UNSAFE.sub("-", text).strip("-") or "x"
    return safe[:limit]
