"""Which engine runs a write task's Spark job, and why: one pure decision.

The operator's ``engine=`` wins, then the Spark connection's extra
``ct_engine``. Without either, a task runs on the **warm** engine wherever
a warm driver can run and be reused, and on ``spark-submit`` where it
cannot (docs/engines.md, "Choosing and configuring"):

1. cluster deploy mode: the driver runs on the cluster, never on this
   worker, so there is no warm driver to keep;
2. a master that is a cluster manager (``spark://``, ``yarn``, ``k8s://``
   ...): an idle warm driver keeps its executors on the cluster for its
   idle timeout (on a standalone master, all of the cluster's cores unless
   ``spark.cores.max`` is set), so sharing one is a choice for the
   cluster's owner to make (``ct_engine: warm``), not a default;
3. ``ct_tasks_share_host`` in the Spark connection's extra, else the
   environment variable ``CT_TASKS_SHARE_HOST`` (``1``/``0``, ``true``/
   ``false``...), when set, says whether later tasks run on this host and
   would reuse a driver this task starts;
4. otherwise Airflow's executor for the task says it: one that starts a
   host (a pod, a container) per task (Kubernetes, AWS ECS, Batch, Lambda)
   would start a JVM per task either way and leave it to die with the pod;
5. everything else (a local master under the Local, Celery or Edge
   executor, ``dag.test()``): warm.

Nothing here reads Airflow (the ``engine`` floor never imports it): the
hook passes the executor in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_ct.exceptions import ConfigurationError

ENGINE_SPARK_SUBMIT, ENGINE_WARM = "spark-submit", "warm"
ENGINES = (ENGINE_SPARK_SUBMIT, ENGINE_WARM)
#: Spark connection extra that chooses the engine of every task using the connection.
ENGINE_EXTRA = "ct_engine"
#: Spark connection extra and environment variable that say whether this
#: host's later tasks would reuse a warm driver (they override the executor's answer).
SHARED_HOST_EXTRA, SHARED_HOST_ENV = "ct_tasks_share_host", "CT_TASKS_SHARE_HOST"
#: Executors that run every task on a host (pod, container) of its own, matched
#: case-insensitively anywhere in the executor's name or import path.
PER_TASK_HOST_EXECUTORS = ("Kubernetes", "AwsEcs", "AwsBatch", "AwsLambda")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class EngineChoice:
    """The engine of a task and the reason, as its log line gives it."""

    engine: str
    reason: str


def choose_engine(
    engine: str | None,
    extra: Mapping[str, Any],
    deploy_mode: str | None,
    *,
    master: str,
    executor: str = "",
    task_executor: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> EngineChoice:
    """The engine of a write task and why (see the module docstring for the rule).

    :param engine: the operator's ``engine=`` (``None``: not set).
    :param extra: the Spark connection's extra (``{}`` without a connection).
    :param deploy_mode: the connection's ``deploy-mode``.
    :param master: the Spark master the job would run on.
    :param executor: Airflow's ``[core] executor`` setting (a comma-separated
        list; its first entry runs the tasks that name none).
    :param task_executor: the task's own ``executor=``, if it names one.
    :param environ: where ``CT_TASKS_SHARE_HOST`` is read (default ``os.environ``).
    """
    if engine is not None:
        return _explicit(engine, f"engine={engine!r} on the task", deploy_mode)
    configured = extra.get(ENGINE_EXTRA)
    if configured:
        reason = f"the Spark connection's extra {ENGINE_EXTRA}={configured!r}"
        return _explicit(str(configured), reason, deploy_mode)
    return _default(extra, deploy_mode, master, executor, task_executor, environ)


def _explicit(engine: str, reason: str, deploy_mode: str | None) -> EngineChoice:
    """An engine someone asked for: checked, never second-guessed (cluster mode refuses warm)."""
    if engine not in ENGINES:
        raise ConfigurationError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if engine == ENGINE_WARM and deploy_mode == "cluster":
        raise ConfigurationError(
            "engine 'warm' keeps the Spark driver on this worker, but the Spark connection asks "
            "for deploy-mode cluster: use engine='spark-submit' for cluster deploy mode"
        )
    return EngineChoice(engine, reason)


def _default(
    extra: Mapping[str, Any],
    deploy_mode: str | None,
    master: str,
    executor: str,
    task_executor: str | None,
    environ: Mapping[str, str] | None,
) -> EngineChoice:
    unset = f"default: no engine= and no {ENGINE_EXTRA} in the Spark connection's extra"
    if deploy_mode == "cluster":
        return EngineChoice(
            ENGINE_SPARK_SUBMIT,
            f"{unset}; deploy-mode cluster runs the driver on the cluster, not on this worker",
        )
    if not master.startswith("local"):
        return EngineChoice(
            ENGINE_SPARK_SUBMIT,
            f"{unset}; master {master} is a cluster manager, where an idle warm driver would "
            f"hold its executors until its idle timeout ({ENGINE_EXTRA}='warm' shares one anyway)",
        )
    shared = shares_host(extra, environ)
    if shared is not None:
        value, source = shared
        return EngineChoice(
            ENGINE_WARM if value else ENGINE_SPARK_SUBMIT,
            f"{unset}; {source} says this host's later tasks "
            + ("reuse a warm driver" if value else "would not reuse a warm driver"),
        )
    running = task_executor_entry(executor, task_executor)
    if any(marker.lower() in running.lower() for marker in PER_TASK_HOST_EXECUTORS):
        return EngineChoice(
            ENGINE_SPARK_SUBMIT,
            f"{unset}; executor {running} runs each task on a host of its own, where no "
            f"later task would reuse a warm driver ({SHARED_HOST_ENV}=1 overrides)",
        )
    return EngineChoice(
        ENGINE_WARM,
        f"{unset}; local master {master} and executor {running or '(unknown)'}, whose later "
        "tasks on this host reuse the warm driver",
    )


def shares_host(
    extra: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> tuple[bool, str] | None:
    """The explicit answer to "do later tasks run on this host?", and where it was set.

    The Spark connection's ``ct_tasks_share_host`` wins over the environment
    variable ``CT_TASKS_SHARE_HOST`` (set per worker: on Celery workers but
    not in a pod template, say); ``None`` when neither is set.
    """
    environ = os.environ if environ is None else environ
    for value, source in (
        (extra.get(SHARED_HOST_EXTRA), f"the Spark connection's extra {SHARED_HOST_EXTRA}"),
        (environ.get(SHARED_HOST_ENV), SHARED_HOST_ENV),
    ):
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            return value, f"{source}={value}"
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE, f"{source}={value}"
        raise ConfigurationError(
            f"{source}={value!r}: expected a boolean ({'/'.join(_TRUE)} or {'/'.join(_FALSE)})"
        )
    return None


def task_executor_entry(executor: str, task_executor: str | None = None) -> str:
    """The ``[core] executor`` entry that runs a task: the one it names, else the first.

    Airflow 3 takes a list (``LocalExecutor,my_k8s:airflow...KubernetesExecutor``);
    a task naming an alias gets its whole entry back, so the class shows.
    """
    entries = [e.strip() for e in executor.split(",") if e.strip()]
    if not task_executor:
        return entries[0] if entries else ""
    for entry in entries:
        alias, _, path = entry.rpartition(":")
        if task_executor in (entry, alias, path, path.rsplit(".", 1)[-1]):
            return entry
    return task_executor
