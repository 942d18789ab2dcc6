"""``ct-pipeline dry-run FOLDER``: check a pipeline folder and print its plans, writing nothing.

The checks are the DAG file's own (the folder is loaded and its DAG built,
which runs every factory's parse-time checks; no task runs): every file
parsed, every name resolved against the catalog, cycles refused. For each
dataset it prints its kind, inputs, layout and plan: a view's incremental
strategy or ``full`` with the reason, as the factory decides it
(:func:`~airflow_provider_ct.views.explain_view`), or what its continual
task processes. Then Spark analyses each dataset as its first tick will
(:mod:`.spark_check`: types, names, the planner over the inputs' columns,
the table's schema, ``mz_now()``), over empty views, so what would fail
every tick fails here with the tick's words (``--no-spark`` skips it: no
JVM). Exit status 1 and ``file:line: problem`` for a bad folder.

Run as ``ct-pipeline dry-run shop/`` (installed) or
``python -m airflow_provider_ct.pipelines.cli dry-run shop/``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from airflow_provider_ct.exceptions import CTError
from airflow_provider_ct.pipelines.dag import build_dag, group_id_of
from airflow_provider_ct.pipelines.load import LoadedPipeline, load_pipeline
from airflow_provider_ct.pipelines.resolve import Resolved
from airflow_provider_ct.pipelines.spark_check import SparkChecks, check_pipeline
from airflow_provider_ct.views import explain_view


def describe(loaded: LoadedPipeline, checks: SparkChecks | None = None) -> list[str]:
    """The dry run's report, line by line (with what Spark said of each dataset, if asked)."""
    pipeline, spec = loaded.pipeline, loaded.spec
    lines = [
        f"pipeline {spec.name}: {len(pipeline.order)} datasets from {len(spec.files)} files, "
        f"catalog {loaded.catalog!r} (connection {loaded.iceberg_conn_id!r})",
        f"order: {' -> '.join(pipeline.order)}",
    ]
    external = sorted(pipeline.external())
    if external:
        lines.append(f"external inputs: {', '.join(external)}")
    if pipeline.temporary:
        lines.append(f"temporary views (inlined): {', '.join(sorted(pipeline.temporary))}")
    plans = {name: _plan(loaded, loaded.resolved[name]) for name in pipeline.order}
    kinds = Counter(kind for kind, _ in plans.values())
    lines.append("plans: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for name in pipeline.order:
        lines += ["", *_dataset(loaded, loaded.resolved[name], plans[name][1])]
        if checks is not None:
            lines.append(f"  spark: analysed; the table's columns: {checks[name].describe()}")
    return lines


def _dataset(loaded: LoadedPipeline, item: Resolved, plan: list[str]) -> list[str]:
    dataset, statement = item.dataset, item.dataset.statement
    source = statement.kind if not dataset.flows else "streaming table (union of flows)"
    lines = [
        f"{item.name}  [{source} -> {dataset.kind}]  {statement.path}:{statement.line}",
        f"  group: {group_id_of(loaded, item.name)}",
    ]
    inputs = [
        f"{r} ({'dataset' if r in loaded.pipeline.datasets else 'external'}"
        f"{', stream' if r == dataset.stream else ''})"
        for r in dataset.reads
    ]
    lines.append(f"  inputs: {', '.join(inputs) or 'none'}")
    if dataset.via:
        lines.append(f"  via temporary views: {', '.join(dataset.via)}")
    if item.definition is not None and item.columns:  # declared: they create the table
        lines.append(f"  columns: {', '.join(f'{n} {t}' for n, t in item.columns)}")
    elif item.columns:  # a view's table takes Spark's types for its query
        lines.append(f"  columns: {', '.join(n for n, _ in item.columns)}")
    layout = [f"partitioned by {', '.join(item.partition_by)}"] if item.partition_by else []
    layout += [f"{k}={v!r}" for k, v in sorted(item.properties.items())]
    lines.append(f"  layout: {'; '.join(layout) or 'default'}")
    return lines + [f"  {line}" for line in plan]


def _plan(loaded: LoadedPipeline, item: Resolved) -> tuple[str, list[str]]:
    """The dataset's plan: its kind (a view's strategy, or ``continual``) and its lines."""
    dataset = item.dataset
    if item.sql is not None:
        refresh = str(loaded.spec.airflow.get("refresh", "auto"))
        if dataset.statement.constant is not None:
            why = "reads no table (spark.range): its rows are written once, each tick seals it"
            return "constant", ["plan: constant", f"why: {why}"]
        if dataset.statement.full_reason:  # a Python dataset built by DataFrame calls
            return "full", ["plan: full", f"why: {dataset.statement.full_reason}"]
        plan = explain_view(
            item.sql,
            target=item.name,
            catalog_name=loaded.catalog,
            refresh=refresh,
            columns=item.read_columns,
        )
        strategy = plan[0].removeprefix("strategy: ")
        return strategy, [f"plan: {strategy}", *plan[1:]]
    others = [r for r in dataset.reads if r != dataset.stream]
    plan = [
        f"plan: continual task: each row inserted into {dataset.stream} is processed once, "
        "at its input time"
    ]
    if "SNAPSHOT = true" in (item.definition or ""):
        plan.append("why: a streaming table; its first tick processes the input's whole contents")
    if others:
        plan.append(f"references (read as of each input time): {', '.join(others)}")
    return "continual", plan


def _spark_checks(loaded: LoadedPipeline, spark: Any) -> SparkChecks:
    """Spark's checks of every dataset, on ``spark`` or a local session of the catalog's."""
    from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
    from airflow_provider_ct.spark.conf import local_session, spark_jars

    config = IcebergCatalogHook(loaded.iceberg_conn_id).get_config()
    if spark is None:
        jars = ",".join(spark_jars(config))
        spark = local_session(
            config, master="local[1]", app_name="ct-pipeline-dry-run", **{"spark.jars": jars}
        )
        spark.sparkContext.setLogLevel("ERROR")
    return check_pipeline(loaded, spark, config)


def main(argv: Sequence[str] | None = None, *, spark: Any = None) -> int:
    """The command line; ``spark``: a session to analyse with (else a local one is started)."""
    parser = argparse.ArgumentParser(prog="ct-pipeline", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dry = commands.add_parser("dry-run", help="check a folder and print each dataset's plan")
    dry.add_argument("folder", help="the pipeline folder (holding spark-pipeline.yml)")
    dry.add_argument("--iceberg-conn-id", default=None, help="the catalog connection")
    dry.add_argument("--catalog", default=None, help="the catalog name of three-part names")
    dry.add_argument(
        "--no-spark",
        action="store_true",
        help="skip Spark's analysis of each dataset (types, names, the tick's own checks)",
    )
    args = parser.parse_args(argv)
    try:
        loaded = load_pipeline(
            args.folder, iceberg_conn_id=args.iceberg_conn_id, catalog_name=args.catalog
        )
        build_dag(loaded)  # the DAG file's own checks; the DAG is dropped
        checks = None if args.no_spark else _spark_checks(loaded, spark)
        report = describe(loaded, checks)
    except CTError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
