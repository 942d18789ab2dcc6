"""The Iceberg materialized-view draft's ``refresh-state``, recorded beside our ``ct.*`` keys.

Why: engines that adopt the Iceberg materialized-view spec (a draft, Apache
Iceberg PR #11041, not yet released) judge a storage table's freshness from
the ``refresh-state`` entry of its snapshot summary: which version of the
definition produced it and which snapshot of each source table it read.
Our own keys (``ct.inputs``, ``ct.query-hash``) say the same for our
frontier logic; this entry says it in the draft's words, so such an engine
can tell a fresh view from a stale one without knowing us. It follows the
draft as of late 2025 and may change with it.

There is no Iceberg view object behind our views, so the definition's
version is derived from its query hash (equal hashes, equal versions).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: The snapshot summary key the draft defines.
REFRESH_STATE = "refresh-state"


def definition_version(query_hash: str) -> int:
    """A positive 52-bit integer standing for the definition's version (from its hash).

    ``query_hash`` is ``<algorithm>:<hex digest>`` (:func:`~.query.query_hash`).
    """
    return int(query_hash.rpartition(":")[2][:13], 16)


def refresh_state(
    query_hash: str, sources: Mapping[str, tuple[Table, int | None]], started_ms: int
) -> dict[str, str]:
    """The ``refresh-state`` summary entry: the definition and each source's pinned snapshot.

    :param sources: per input table name (``namespace.table``), the table
        and the snapshot id the batch read (``None``: it was empty).
    """
    states = []
    for name in sorted(sources):
        table, snapshot_id = sources[name]
        namespace, _, short = name.rpartition(".")
        states.append(
            {
                "type": "table",
                "namespace": namespace.split(".") if namespace else [],
                "name": short,
                "uuid": str(table.metadata.table_uuid),
                "snapshot-id": snapshot_id,
            }
        )
    state = {
        "view-version-id": definition_version(query_hash),
        "source-states": states,
        "refresh-start-timestamp-ms": started_ms,
    }
    return {REFRESH_STATE: json.dumps(state, separators=(",", ":"))}


def view_batch_summary(
    digest: str, sources: Mapping[str, tuple[Table, int | None]], started_ms: int
) -> dict[str, str]:
    """What every batch of a view records of its definition and sources, quiet or computed.

    The query's hash (``ct.query-hash``), which lets a later tick prove itself
    quiet (``core/quiet.py``) or incremental (``ivm/plan/history.py``), and
    the draft's ``refresh-state`` for other engines. One owner: the quiet
    batch (no Spark) and the write job's batch must never record it apart.
    """
    from airflow_provider_ct.core.keys import SummaryKeys

    return {SummaryKeys.QUERY_HASH: digest, **refresh_state(digest, sources, started_ms)}
