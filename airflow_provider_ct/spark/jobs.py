"""A Spark job as data: which job, with which arguments, in one serialization.

An operator builds a :class:`JobSpec`; the hook that launches it
(``hooks/spark_job.py``) hands it to ``spark-submit`` as one ``--job``
argument of :mod:`.job_main` or to the warm driver as the request's ``job``
field; both ends parse it with :meth:`JobSpec.from_json` and run
:meth:`JobSpec.run`. A job's arguments are therefore spelled once, as the
fields of its dataclass here, instead of once per launcher.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from airflow_provider_ct.core.layout import TargetSettings
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.ivm.plan.modes import RefreshMode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_provider_ct.core.catalog import CatalogConfig
    from airflow_provider_ct.core.description import BatchDescription
    from airflow_provider_ct.core.reports import WriteReport


class JobArgs(Protocol):
    """The arguments of one job kind: a frozen dataclass with a ``kind`` and a ``run``."""

    kind: ClassVar[str]

    def run(
        self, spark: SparkSession, config: CatalogConfig, description: BatchDescription
    ) -> WriteReport: ...


@dataclass(frozen=True)
class ViewWrite:
    """The view write job (``spark/write_job.py``): stage the correction for a description."""

    kind: ClassVar[str] = "write"
    sql: str
    refresh: RefreshMode = RefreshMode.AUTO
    verify_every: int = 0
    dry_run: bool = False
    #: :class:`~airflow_provider_ct.core.layout.TargetSettings` as JSON.
    target: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Decoded from the job's JSON: a bare string becomes the mode (a bad one fails here).
        object.__setattr__(self, "refresh", RefreshMode.parse(self.refresh))
        if self.verify_every < 0:
            raise ConfigurationError(f"verify_every={self.verify_every!r}: expected >= 0")
        TargetSettings.from_json(self.target)  # a bad one fails where the spec is built

    def run(
        self, spark: SparkSession, config: CatalogConfig, description: BatchDescription
    ) -> WriteReport:
        from airflow_provider_ct.spark.write_job import run_write

        return run_write(
            spark,
            config,
            self.sql,
            description,
            dry_run=self.dry_run,
            refresh=self.refresh,
            verify_every=self.verify_every,
            target=TargetSettings.from_json(self.target),
        )


@dataclass(frozen=True)
class ContinualWrite:
    """The continual-task job (``spark/continual_job.py``): stage every input time of a batch."""

    kind: ClassVar[str] = "continual"
    task: str
    namespace: str | None = None
    #: :class:`~airflow_provider_ct.core.layout.TargetSettings` as JSON.
    target: dict[str, Any] | None = None
    #: Truncate the output and process the input's contents at the tick's time once
    #: (a pipeline's ``full_refresh`` of a streaming table).
    full_refresh: bool = False

    def __post_init__(self) -> None:
        TargetSettings.from_json(self.target)  # a bad one fails where the spec is built

    def run(
        self, spark: SparkSession, config: CatalogConfig, description: BatchDescription
    ) -> WriteReport:
        from airflow_provider_ct.spark.continual_job import run_continual

        return run_continual(
            spark,
            config,
            self.task,
            self.namespace,
            description,
            target=TargetSettings.from_json(self.target),
            full_refresh=self.full_refresh,
        )


#: Every job kind, by the name its specs carry.
JOB_KINDS: dict[str, type[ViewWrite] | type[ContinualWrite]] = {
    ViewWrite.kind: ViewWrite,
    ContinualWrite.kind: ContinualWrite,
}


@dataclass(frozen=True)
class JobSpec:
    """One job to run for a description: its kind and arguments."""

    args: ViewWrite | ContinualWrite

    @property
    def kind(self) -> str:
        return self.args.kind

    def run(
        self, spark: SparkSession, config: CatalogConfig, description: BatchDescription
    ) -> WriteReport:
        return self.args.run(spark, config, description)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "args": dataclasses.asdict(self.args)}

    def to_text(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, value: Any) -> JobSpec:
        """Parse a spec (a dict or its JSON text), naming what is wrong with a bad one."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"job spec is not JSON: {exc}") from None
        if not isinstance(value, dict) or not isinstance(value.get("args"), dict):
            raise ConfigurationError(f"job spec must be {{kind, args}}: {value!r:.200}")
        kind = JOB_KINDS.get(str(value.get("kind")))
        if kind is None:
            raise ConfigurationError(
                f"unknown job kind {value.get('kind')!r}: expected one of {sorted(JOB_KINDS)}"
            )
        return cls(_args(kind, value["args"]))


def _args(kind: type[ViewWrite] | type[ContinualWrite], raw: dict[str, Any]) -> Any:
    """``kind``'s dataclass from ``raw``, each field checked against its declared type."""
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigurationError(f"job {kind.kind!r} takes no argument(s) {unknown}")
    for name, value in raw.items():
        expected = _TYPES[str(fields[name].type)]
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise ConfigurationError(
                f"job {kind.kind!r} argument {name!r} must be {fields[name].type}, "
                f"got {value!r:.80}"
            )
    try:
        return kind(**raw)
    except TypeError as exc:  # a required argument is missing
        raise ConfigurationError(f"job {kind.kind!r}: {exc}") from None


#: The Python types each annotation of the job dataclasses admits.
_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "RefreshMode": (str,),  # a mode's name in JSON; the dataclass turns it into the mode
    "int": (int,),
    "bool": (bool,),
    "str | None": (str, type(None)),
    "dict[str, Any] | None": (dict, type(None)),
}
