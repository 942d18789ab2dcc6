"""The exceptions this package raises.

Every error is a :class:`CTError`, so callers (and Airflow task logs) can tell
our refusals apart from bugs in libraries underneath::

    CTError
    ├── ConfigurationError        a connection, catalog or jar set-up is unusable
    ├── ServiceUnavailableError   an external service did not answer within its bound
    │   ├── StoreUnavailableError     the object store (S3) or the warehouse's filesystem
    │   └── CatalogUnavailableError   the Iceberg catalog (REST server or its database)
    ├── FrontierError             a frontier or timestamp is invalid
    │   ├── FrontierRegressionError   a table's upper went backwards
    │   ├── TimeNotSealedError        asked for contents at a time not yet final
    │   └── AssetEventError           a triggering asset event's extra is unusable
    ├── TimelineError             a table's ``ct.*`` summary keys cannot be read
    │   └── MalformedSummaryError     a summary value does not parse
    ├── CommitError               a compare-and-append could not be attempted
    │   └── CommitStateUnknownError   the catalog did not say whether it landed
    ├── StagingError              a staged batch is malformed or inconsistent
    │   └── ManifestMissingError      a staged batch's manifest is gone (landed or swept)
    ├── DescriptionError          a batch description (XCom) is malformed
    ├── QueryError                SQL is unusable (syntax, not a SELECT, tables)
    │   └── PipelineError             a pipeline folder is unusable (names its file and line)
    ├── SchemaMismatchError       a query's schema no longer matches its table
    ├── CompositionError          a part of a view's query kept apart cannot serve a tick
    ├── OwnershipError            a second definition points at a table another maintains
    ├── SparkJobError             a Spark job failed without one of these errors
    ├── ChangesUnavailableError   a table's changes between two snapshots cannot be read
    └── CollectionError           a managed-collection operation is refused
        ├── NotACollectionError       the table is not a registered collection (of that kind)
        ├── ReadOnlyError             writes are refused in read-only mode
        ├── CollectionClosedError     the collection is closed (its upper is empty)
        └── RetractionError           a retraction names rows the collection does not hold

A Spark job's error crosses ``spark-submit`` as a file (see
:mod:`airflow_provider_ct.spark.job_errors`): the operator raises the same
class again, looked up by name with :func:`error_class`.

An upper mismatch in :func:`~airflow_provider_ct.core.commit.compare_and_append`
is *not* an exception: losing a race is a normal outcome and is reported in
the returned result.
"""

from __future__ import annotations

from typing import Any


class CTError(Exception):
    """Base class of every error raised by airflow-provider-ct."""


class ConfigurationError(CTError):
    """A catalog, connection, Spark or jar configuration is unusable."""


class ServiceUnavailableError(CTError):
    """An external service did not answer within its bound (down, frozen, unreachable).

    Not a :class:`ConfigurationError`: the settings may be right and the
    service down; an Airflow retry once it is back lands the tick exactly.
    The message names the service, its endpoint and the operation that
    waited (``core/outages.py`` builds it); the attributes are set where the
    error is first raised, and only the message crosses a job's boundary.
    """

    #: What kind of service (``object store``, ``REST catalog``, ``JDBC catalog``).
    service_kind = "service"

    def __init__(
        self, message: str, *, endpoint: str = "", operation: str = "", service: str = ""
    ) -> None:
        super().__init__(message)
        self.service = service or self.service_kind
        self.endpoint = endpoint
        self.operation = operation


class StoreUnavailableError(ServiceUnavailableError):
    """The object store (S3, S3-compatible) holding the tables did not answer in time."""

    service_kind = "object store"


class CatalogUnavailableError(ServiceUnavailableError):
    """The Iceberg catalog (a REST server, a catalog database) did not answer in time."""

    service_kind = "catalog"


class FrontierError(CTError):
    """A timestamp or frontier is invalid (negative, too large, wrong type)."""


class FrontierRegressionError(FrontierError):
    """A table's upper moved backwards along its snapshot history.

    Times below an upper are final; an upper that goes backwards would make
    sealed times writable again, so we refuse to interpret such a table.
    """


class TimeNotSealedError(FrontierError):
    """Contents were requested at a time that is not yet below the upper."""


class AssetEventError(FrontierError):
    """A triggering asset event cannot tell what its table sealed.

    Its ``extra`` is not a frontier event of ours (no ``upper``, a malformed
    one, another table's), or the uppers of one table's events go backwards.
    """


class TimelineError(CTError):
    """A table's timeline (its ``ct.*`` snapshot-summary keys) is unusable."""


class MalformedSummaryError(TimelineError):
    """A ``ct.*`` snapshot-summary value does not parse."""


class CommitError(CTError):
    """A compare-and-append could not be attempted (bad arguments, bad table)."""


class CommitStateUnknownError(CommitError):
    """The catalog failed in a way that leaves the commit's outcome unknown.

    Staged files must *not* be deleted in this case: they may already be
    referenced by the table. A retry of the same batch id resolves it. Also
    raised when the catalog cannot be reached at all during a
    compare-and-append (its database is down): the remedy is the same, and
    the message says whether a commit had been sent.
    """


class StagingError(CTError):
    """A staged batch (its manifest or files) is malformed or inconsistent."""


class ManifestMissingError(StagingError):
    """A staged batch's manifest does not exist: it landed and was dropped, or was swept."""


class DescriptionError(CTError):
    """A batch description (e.g. from XCom) is malformed."""


class QueryError(CTError):
    """A view's or task's SQL is unusable: bad syntax, not a SELECT, unknown tables."""


class PipelineError(QueryError):
    """A pipeline folder (spec file, SQL files) is unusable; the message starts ``file:line:``.

    ``path`` and ``line`` are kept too, so a dry run and the tests can tell
    which statement failed without parsing the message.
    """

    def __init__(self, message: str, *, path: str = "", line: int = 0) -> None:
        where = f"{path}:{line}: " if path and line else f"{path}: " if path else ""
        super().__init__(f"{where}{message}")
        self.path, self.line, self.problem = path, line, message


class SchemaMismatchError(CTError):
    """A query's result schema no longer matches its target table."""


class CompositionError(CTError):
    """A part of a view's query kept apart cannot serve this tick (``spark/composed.py``).

    The write job then runs the view's query in full, as written.
    """


class OwnershipError(CTError):
    """A view or task would maintain a table that another definition already maintains."""


class IncrementalMismatchError(CTError):
    """An incremental tick found the target not as its last batch left it.

    The write job then runs the full correction for the tick instead.
    """


class KeyedReadError(IncrementalMismatchError):
    """A tick cannot recompute the keys a subquery's change holds: the tie the SQL suggested
    is not confirmed by the tables' columns, or a changed table holds no key.

    The tick runs without that rule (in full, with the message as its reason).
    """

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        #: Numbers for the report and the batch (the read estimate that priced it out).
        self.details = details or {}


class StateMismatchError(CTError):
    """A view's kept aggregate state cannot be used: it is missing, stale or edited.

    The write job then rebuilds it from the inputs (in-place aggregates,
    :mod:`airflow_provider_ct.ivm.state.aggregate_state`).
    """


class NotInPlaceError(CTError):
    """The write job cannot keep this view's aggregates in place (too many groups for the
    driver, a sum past its type), found deep in the computation; the in-place tick turns it
    into a fallback for the tick's decision (``ivm/plan/decision``), and the view's
    fallback strategy runs instead."""


class SparkJobError(CTError):
    """A Spark job failed with something other than one of our errors.

    Either the job died without saying why (killed, out of memory), or it
    raised an exception outside this hierarchy (a bug, or a Spark analysis
    error); the message names the original type.
    """


class ChangesUnavailableError(CTError):
    """The changes of a table between two snapshots cannot be computed exactly.

    The older snapshot expired or is not an ancestor of the newer one, a
    snapshot in between expired, the schema changed in the range, or the
    files hold something this package cannot read (the message says which).
    """


class CollectionError(CTError):
    """A managed-collection operation is refused (see :mod:`airflow_provider_ct.collections`)."""


class NotACollectionError(CollectionError):
    """The table is not a registered collection, or not one of the kind asked for."""


class ReadOnlyError(CollectionError):
    """A write was refused because the collection or the deployment is read-only.

    Only blind writes raise it: differential writes keep their desired state
    and land it once writes are allowed again.
    """


class CollectionClosedError(CollectionError):
    """The collection is closed (its upper is the empty frontier): nothing may be written."""


class RetractionError(CollectionError):
    """A retraction (a row with diff -1) names a row the collection does not hold."""


def error_class(name: str) -> type[CTError] | None:
    """The class of this module called ``name`` (``CTError`` or a subclass), if any.

    Only this hierarchy is searched, so a name read from a job's error file
    can never instantiate an arbitrary class.
    """
    pending: list[type[CTError]] = [CTError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name and cls.__module__ == __name__:
            return cls
        pending.extend(cls.__subclasses__())
    return None
