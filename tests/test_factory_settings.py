"""SparkSettings and WaitSettings: the factories build the same tasks from them as from
loose keywords, refuse the two disagreeing, and continual tasks take every setting
views take (spark_conf, sensor_mode). Building a DAG needs no Spark and no catalog."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, TaskGroup

from airflow_provider_ct import continual_task, materialized_view
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.factory_settings import SparkSettings, WaitSettings
from airflow_provider_ct.hooks.iceberg import IcebergCatalogHook
from tests.conftest import SCHEMA

TASK = """CREATE CONTINUAL TASK ev.latest (k bigint, v string) ON INPUT ev.src AS (
  INSERT INTO ev.latest SELECT k, v FROM ev.src;
)"""
SQL = "SELECT k, v FROM shop.src"

SPARK_LOOSE: dict[str, Any] = {
    "spark_conn_id": "spark_lake",
    "spark_master": "local[3]",
    "spark_conf": {"spark.sql.shuffle.partitions": "7"},
    "engine": "warm",
    "warm_idle_timeout": 120.0,
}
WAIT_LOOSE: dict[str, Any] = {
    "deferrable": True,
    "poke_interval": 2.5,
    "sensor_timeout": 90.0,
    "sensor_mode": "reschedule",
}
#: What each task carries of the settings (and of the wiring the builder adds).
COMPARED = (
    "spark_conn_id",
    "spark_master",
    "spark_conf",
    "engine",
    "warm_idle_timeout",
    "deferrable",
    "poke_interval",
    "timeout",
    "mode",
    "tables",
    "sql",
    "time",
    "input_upper_policies",
    "iceberg_conn_id",
    "target",
    "definition",
    "namespace",
    "report_only",
    "quiet_ticks",
    "refresh",
    "verify_every",
    "read_only",
    "description_task_id",
    "write_task_id",
    "trigger_rule",
    "lineage_sql",
    "writer_kind",
    "asset",
)

_dag_ids = itertools.count()


def _view(**kwargs: Any) -> TaskGroup:
    return materialized_view(target="shop.v", sql=SQL, **kwargs)


def _fused_view(**kwargs: Any) -> TaskGroup:
    return materialized_view(target="shop.v", sql=SQL, fuse_steps=True, **kwargs)


def _continual(**kwargs: Any) -> TaskGroup:
    return continual_task(definition=TASK, **kwargs)


FACTORIES = pytest.mark.parametrize(
    "factory", [_view, _fused_view, _continual], ids=["view", "fused-view", "continual"]
)


def _build(factory: Callable[..., TaskGroup], **kwargs: Any) -> dict[str, dict[str, Any]]:
    """Each task of the group: its class, upstream ids and the compared attributes."""
    with DAG(f"settings_{next(_dag_ids)}", schedule=None):
        group = factory(**kwargs)
    tasks: dict[str, dict[str, Any]] = {}
    for task_id, task in group.children.items():
        seen = {name: getattr(task, name) for name in COMPARED if hasattr(task, name)}
        seen["class"] = type(task).__name__
        seen["upstream"] = sorted(task.upstream_task_ids)  # type: ignore[union-attr]
        seen["outlets"] = [getattr(o, "name", o) for o in getattr(task, "outlets", [])]
        tasks[task_id] = seen
    return tasks


@FACTORIES
def test_loose_keywords_and_settings_objects_build_the_same_tasks(
    factory: Callable[..., TaskGroup],
) -> None:
    loose = _build(factory, **SPARK_LOOSE, **WAIT_LOOSE)
    grouped = _build(factory, spark=SparkSettings(**SPARK_LOOSE), wait=WaitSettings(**WAIT_LOOSE))
    assert grouped == loose
    writer = next(t for t in loose.values() if "spark_master" in t)
    assert {k: writer[k] for k in SPARK_LOOSE} == SPARK_LOOSE
    sensor = next(t for t in loose.values() if "mode" in t)
    assert (sensor["deferrable"], sensor["poke_interval"]) == (True, 2.5)
    assert (sensor["timeout"], sensor["mode"]) == (90.0, "reschedule")


@FACTORIES
def test_no_settings_keeps_the_former_defaults(factory: Callable[..., TaskGroup]) -> None:
    default = _build(factory)
    assert _build(factory, spark=SparkSettings(), wait=WaitSettings()) == default
    writer = next(t for t in default.values() if "spark_master" in t)
    assert (writer["spark_conn_id"], writer["spark_master"]) == (None, "local[2]")
    assert (writer["spark_conf"], writer["engine"], writer["warm_idle_timeout"]) == ({}, None, None)
    sensor = next(t for t in default.values() if "mode" in t)
    assert (sensor["poke_interval"], sensor["timeout"], sensor["mode"]) == (10.0, 3600.0, "poke")


@FACTORIES
def test_a_loose_keyword_agreeing_with_its_settings_object_is_fine(
    factory: Callable[..., TaskGroup],
) -> None:
    """A DAG that spells a setting twice, the same both times, still builds."""
    both = _build(
        factory,
        spark=SparkSettings(**SPARK_LOOSE),
        wait=WaitSettings(**WAIT_LOOSE),
        spark_master="local[3]",
        spark_conf={"spark.sql.shuffle.partitions": "7"},
        sensor_mode="reschedule",
    )
    assert both == _build(factory, **SPARK_LOOSE, **WAIT_LOOSE)


@FACTORIES
@pytest.mark.parametrize(
    ("settings", "loose", "named"),
    [
        ({"spark": SparkSettings(spark_master="local[4]")}, {"spark_master": "local[1]"}, "spark"),
        ({"spark": SparkSettings(spark_conf={"a": "1"})}, {"spark_conf": {"a": "2"}}, "spark"),
        ({"spark": SparkSettings(engine="warm")}, {"engine": "spark-submit"}, "spark"),
        ({"wait": WaitSettings(sensor_mode="reschedule")}, {"sensor_mode": "poke"}, "wait"),
        ({"wait": WaitSettings(poke_interval=1.0)}, {"poke_interval": 10.0}, "wait"),
        ({"wait": WaitSettings(deferrable=False)}, {"deferrable": True}, "wait"),
        ({"spark": SparkSettings()}, {"spark_conn_id": "spark_lake"}, "spark"),
    ],
    ids=[
        "spark_master",
        "spark_conf",
        "engine",
        "sensor_mode",
        "poke_interval",
        "deferrable",
        "a-field-left-at-its-default",
    ],
)
def test_a_loose_keyword_disagreeing_with_its_settings_object_names_it(
    factory: Callable[..., TaskGroup],
    settings: dict[str, Any],
    loose: dict[str, Any],
    named: str,
) -> None:
    (argument,) = loose
    with pytest.raises(ConfigurationError, match=rf"^{argument}=.* conflicts with {named}=") as err:
        _build(factory, **settings, **loose)
    assert f"give {argument} in one place" in str(err.value)


def test_a_settings_object_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(
        ConfigurationError, match=r"^spark= takes a SparkSettings, got WaitSettings"
    ):
        _build(_view, spark=WaitSettings())
    with pytest.raises(ConfigurationError, match=r"^wait= takes a WaitSettings, got dict"):
        _build(_continual, wait={"sensor_mode": "reschedule"})


def test_continual_task_takes_spark_conf_and_sensor_mode() -> None:
    conf = {"spark.executor.memory": "3g"}
    tasks = _build(_continual, spark_conf=conf, sensor_mode="reschedule")
    assert tasks["ct_ev_latest.write"]["class"] == "ContinualWriteOperator"
    assert tasks["ct_ev_latest.write"]["spark_conf"] == conf
    # The mint waits for the inputs itself (no sensor task): it takes the sensor's settings.
    assert tasks["ct_ev_latest.mint"]["mode"] == "reschedule"
    assert "ct_ev_latest.wait_for_inputs" not in tasks


def test_the_shared_builder_keeps_each_groups_shape() -> None:
    """Task ids, classes and wiring as the two factories built them before sharing a builder."""
    view = _build(_view)
    assert {k: (v["class"], v["upstream"]) for k, v in view.items()} == {
        "view_shop_v.mint": ("WaitingMintOperator", []),
        "view_shop_v.write": ("WriteOperator", ["view_shop_v.mint"]),
        "view_shop_v.append": ("AppendOperator", ["view_shop_v.mint", "view_shop_v.write"]),
    }
    assert view["view_shop_v.append"]["lineage_sql"] == SQL
    assert view["view_shop_v.append"]["outlets"] == ["ct-frontier:ct.shop.v"]
    assert view["view_shop_v.write"]["description_task_id"] == "view_shop_v.mint"
    assert view["view_shop_v.mint"]["sql"] == SQL
    # A quiet tick's mint skips the write: the append still runs on the mint's batch.
    assert view["view_shop_v.append"]["trigger_rule"] == "none_failed_min_one_success"
    assert view["view_shop_v.mint"]["quiet_ticks"] is True
    fused = _build(_fused_view, time="sealed")
    assert {k: (v["class"], v["upstream"]) for k, v in fused.items()} == {
        "view_shop_v.tick": ("ViewTickOperator", []),
    }
    assert fused["view_shop_v.tick"]["outlets"] == ["ct-frontier:ct.shop.v"]
    dry = _build(_view, report_only=True)
    assert sorted(dry) == ["view_shop_v.mint", "view_shop_v.write"]
    assert dry["view_shop_v.mint"]["quiet_ticks"] is False  # a dry run stages nothing
    ct = _build(_continual, namespace="ev")
    assert {k: (v["class"], v["upstream"]) for k, v in ct.items()} == {
        "ct_ev_latest.mint": ("WaitingContinualMintOperator", []),
        "ct_ev_latest.write": ("ContinualWriteOperator", ["ct_ev_latest.mint"]),
        "ct_ev_latest.append": (
            "ContinualAppendOperator",
            ["ct_ev_latest.mint", "ct_ev_latest.write"],
        ),
    }
    append = ct["ct_ev_latest.append"]
    assert append["trigger_rule"] == "none_failed_min_one_success"
    assert ct["ct_ev_latest.mint"]["quiet_ticks"] is True
    assert (append["writer_kind"], append["namespace"], append["lineage_sql"]) == (
        "continual-task",
        "ev",
        None,
    )
    assert append["asset"].uri == "iceberg://ct/ev/latest"


def test_settings_are_values_the_groups_cannot_change() -> None:
    conf = {"spark.executor.cores": "2"}
    spark = SparkSettings(spark_conf=conf)
    conf["spark.executor.cores"] = "8"  # the caller's dict changing later changes nothing
    assert spark.spark_conf == {"spark.executor.cores": "2"}
    kwargs = spark.write_kwargs()
    kwargs["spark_conf"]["spark.executor.cores"] = "9"  # nor does an operator's copy
    assert spark.write_kwargs()["spark_conf"] == {"spark.executor.cores": "2"}
    with pytest.raises(TypeError):
        spark.spark_conf["x"] = "y"  # type: ignore[index]
    assert hash(spark) == hash(SparkSettings(spark_conf={"other": "conf"}))
    assert spark == SparkSettings(spark_conf={"spark.executor.cores": "2"})
    assert WaitSettings(sensor_timeout=5).sensor_kwargs() == {
        "deferrable": None,
        "poke_interval": 10.0,
        "timeout": 5,
        "mode": "poke",
    }


# -- the catalog helpers the factories' tasks read through ---------------------
def test_the_catalog_hook_reads_timelines_and_a_missing_target(
    default_catalog: CatalogConfig,
) -> None:
    catalog = default_catalog.load()
    catalog.create_namespace("ns")
    catalog.create_table("ns.src", schema=SCHEMA)
    hook = IcebergCatalogHook()
    assert hook.target_timeline("ns.absent") is None  # before a first tick
    assert hook.target_timeline("ns.src") is not None
    assert list(hook.timelines(["NS.Src"], {"ct.ns.src": "wallclock"})) == ["ns.src"]
    with pytest.raises(ConfigurationError, match="table 'ns.absent' does not exist"):
        hook.timelines(["ns.src", "ns.absent"])
    with pytest.raises(ConfigurationError, match="ns.typo"):
        hook.timelines(["ns.src"], {"ns.typo": "wallclock"})


def test_the_triggers_import_no_operator() -> None:
    """Triggers sit below the operators (which defer to them): not even a lazy import up."""
    import airflow_provider_ct.triggers as triggers

    imported = set()
    for path in Path(triggers.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert "airflow_provider_ct.hooks.iceberg" in imported
    assert not {m for m in imported if m.startswith("airflow_provider_ct.operators")}
