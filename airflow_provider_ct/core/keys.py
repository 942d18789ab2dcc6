"""Names of the snapshot-summary and table-property keys this package owns.

Kept as ``KEY`` / ``KEY_DEFAULT`` pairs on a class, like PyIceberg's
``TableProperties``, so every reader and writer spells them the same way.
"""

from __future__ import annotations


class SummaryKeys:
    """Snapshot-summary keys written on every snapshot we commit."""

    #: The data time whose contents this snapshot holds (epoch ms).
    TIME = "ct.time"
    #: The upper of the table before this snapshot (epoch ms).
    LOWER = "ct.lower"
    #: The upper of the table after this snapshot: epoch ms or ``empty``.
    UPPER = "ct.upper"
    #: The id of the batch (description) this snapshot answers.
    BATCH_ID = "ct.batch-id"
    #: JSON object ``{table: snapshot_id | null}`` of the inputs read.
    INPUTS = "ct.inputs"
    #: A composed view batch's (``ivm/plan/compose``): JSON object ``{part table:
    #: snapshot_id | null}`` of the parts the query over them read, beside ``ct.inputs``
    #: (the description's pins, which the append checks).
    PARTS = "ct.parts"
    #: The write attempt whose staged files the snapshot registered.
    ATTEMPT = "ct.attempt"
    #: A hash of the query (or continual-task definition) the batch computed;
    #: a quiet tick needs it to equal the current query's (see ``core/quiet.py``).
    QUERY_HASH = "ct.query-hash"
    #: How a view batch was computed: ``full`` or an incremental strategy.
    REFRESH = "ct.refresh"
    #: Incremental view batches since the last full correction (``verify_every``).
    INCREMENTAL_TICKS = "ct.incremental-ticks"
    #: What computing a view batch cost (ms, the job's phases before staging)
    #: and the inputs' live rows it read: a view's own cost history.
    COMPUTE_MS = "ct.compute-ms"
    INPUT_ROWS = "ct.input-rows"
    #: Share of the inputs' bytes a grouped tick's restricted reads covered,
    #: when ``refresh="auto"`` ran it in full for that (``ivm/plan/read_estimate``).
    READ_SHARE = "ct.read-share"
    #: On a view's aggregate state table (``ivm/state/table``): JSON object
    #: ``{table: snapshot_id | null}`` of the input snapshots the state reflects.
    STATE_INPUTS = "ct.state-inputs"

    #: The spelling of the empty frontier (a closed collection) in ``ct.upper``.
    EMPTY_FRONTIER = "empty"


class TableKeys:
    """Table properties set on tables this package manages."""

    #: ``true`` on tables whose commits all go through this package.
    MANAGED = "ct.managed"
    MANAGED_DEFAULT = "false"
    #: Folder (relative to the table location) that holds staged batches.
    STAGING_DIR = "ct.staging-dir"
    STAGING_DIR_DEFAULT = "ct-staging"
    #: Absolute location (``s3://bucket/folder``) under which staged batches'
    #: manifests live, one folder per table; a catalog connection setting (or
    #: a table property) for stores that refuse them beside the table.
    STAGING_ROOT = "ct.staging-root"
    #: The highest upper ``main`` ever reached (epoch ms or ``empty``), set by
    #: every compare-and-append: a head below it means ``main`` was rolled back.
    UPPER_HIGH_WATER = "ct.upper-high-water"
    #: A continual task's output: the time of its first tick (its as-of).
    AS_OF = "ct.as-of"
    #: Who maintains the table: the DAG and the task group of its definition.
    OWNER_DAG = "ct.owner-dag"
    OWNER_GROUP = "ct.owner-group"
    #: A registered collection's kind (its writers own it: no view may write it).
    COLLECTION_KIND = "ct.collection.kind"
    #: On a view's aggregate state table: the view (target) it keeps the state of.
    STATE_OF = "ct.state-of"
