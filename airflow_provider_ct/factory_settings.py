"""Spark and wait settings of the TaskGroup factories, as two small value objects.

Why: :func:`~airflow_provider_ct.views.materialized_view` and
:func:`~airflow_provider_ct.continual.continual_task` each took the same
Spark keywords (for the write task) and wait keywords (for the
``wait_for_inputs`` sensor) and passed them on one by one, so the two lists
drifted apart (continual tasks had no ``spark_conf`` and no ``sensor_mode``).
One :class:`SparkSettings` and one :class:`WaitSettings` hold them now; a
DAG can build one of each and pass it to every group it makes::

    spark = SparkSettings(spark_conn_id="spark_lake", spark_conf={"spark.executor.cores": "4"})
    wait = WaitSettings(deferrable=True, sensor_timeout=7200)
    materialized_view(target="shop.a", sql=A, spark=spark, wait=wait)
    continual_task(definition=B, spark=spark, wait=wait)

The factories still take every field as a loose keyword, as before. A loose
keyword left out (``None``) takes the value of the object (or the field's
default); one given next to the object must agree with it, else
:class:`~airflow_provider_ct.exceptions.ConfigurationError` names the keyword:
two places disagreeing about one setting is a mistake, not a precedence rule
to learn.

Each object turns itself into the keyword arguments of the operator it
configures (:meth:`SparkSettings.write_kwargs`, :meth:`WaitSettings.sensor_kwargs`),
so the operators keep their own keyword arguments and can still be built
without these objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.hooks.spark_job import DEFAULT_LOCAL_MASTER

_Settings = TypeVar("_Settings", "SparkSettings", "WaitSettings")


@dataclass(frozen=True)
class SparkSettings:
    """How a group's write task runs Spark (the keywords it passes to the write operator).

    :param spark_conn_id: the Spark connection (``spark-submit`` to a
        cluster, see docs/deployment.md); ``None``: local mode on ``spark_master``.
    :param spark_master: the master of local mode (no ``spark_conn_id``).
    :param spark_conf: extra Spark properties of the write job.
    :param engine: ``spark-submit`` | ``warm`` (a long-lived Spark driver per
        worker, see docs/engines.md); default: the Spark connection's choice.
    :param warm_idle_timeout: seconds a warm driver stays up without jobs.
    """

    spark_conn_id: str | None = None
    spark_master: str = DEFAULT_LOCAL_MASTER
    # Not hashed: a mapping is not hashable, and the object should stay usable as a key.
    spark_conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    engine: str | None = None
    warm_idle_timeout: float | None = None

    def __post_init__(self) -> None:
        # A private read-only copy: the caller's dict changing later (or a
        # group's operator changing its own) must not change the settings
        # every other group built from this object shares.
        object.__setattr__(self, "spark_conf", MappingProxyType(dict(self.spark_conf or {})))

    def write_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``WriteOperator`` (and its subclasses) for these settings."""
        return {
            "spark_conn_id": self.spark_conn_id,
            "spark_master": self.spark_master,
            "spark_conf": dict(self.spark_conf),
            "engine": self.engine,
            "warm_idle_timeout": self.warm_idle_timeout,
        }

    @classmethod
    def resolve(cls, spark: SparkSettings | None, **loose: Any) -> SparkSettings:
        """``spark`` merged with a factory's loose keywords (``None``: not given)."""
        return _resolve(cls, spark, "spark", loose)


@dataclass(frozen=True)
class WaitSettings:
    """How a group waits for its inputs (the mint's sensor keywords; a fused group's sensor's).

    :param deferrable: wait in the triggerer; default from Airflow's
        ``[operators] default_deferrable``.
    :param poke_interval: seconds between checks of the inputs' uppers.
    :param sensor_timeout: seconds before the sensor gives up.
    :param sensor_mode: ``poke`` (holds a worker slot) | ``reschedule``
        (frees it between checks); ignored when deferrable.
    """

    deferrable: bool | None = None
    poke_interval: float = 10.0
    sensor_timeout: float = 3600.0
    sensor_mode: str = "poke"

    def sensor_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``FrontierSensor`` for these settings."""
        return {
            "deferrable": self.deferrable,
            "poke_interval": self.poke_interval,
            "timeout": self.sensor_timeout,
            "mode": self.sensor_mode,
        }

    @classmethod
    def resolve(cls, wait: WaitSettings | None, **loose: Any) -> WaitSettings:
        """``wait`` merged with a factory's loose keywords (``None``: not given)."""
        return _resolve(cls, wait, "wait", loose)


def _resolve(
    cls: type[_Settings], settings: _Settings | None, argument: str, loose: Mapping[str, Any]
) -> _Settings:
    """One settings object from ``settings=`` and the loose keywords of the same fields.

    Without ``settings`` the loose keywords given build it (the rest keep the
    fields' defaults, the factories' former defaults). With it, a loose
    keyword given must equal its field: a different value is a
    :class:`ConfigurationError` naming both, since neither can silently win.
    """
    unknown = set(loose) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ConfigurationError(f"{cls.__name__} has no setting {', '.join(sorted(unknown))}")
    given = {name: value for name, value in loose.items() if value is not None}
    if settings is None:
        return cls(**given)
    if not isinstance(settings, cls):
        raise ConfigurationError(
            f"{argument}= takes a {cls.__name__}, got {type(settings).__name__}: {settings!r:.200}"
        )
    for name, value in given.items():
        current = getattr(settings, name)
        if value != current:
            raise ConfigurationError(
                f"{name}={value!r} conflicts with {argument}={cls.__name__}(..., "
                f"{name}={current!r}): give {name} in one place"
            )
    return settings
