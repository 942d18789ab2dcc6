"""Continual tasks over plain Iceberg inputs, ticked through ``dag.test()``.

The inputs are what users have: tables created and written with PyIceberg
or Spark SQL, with no frontier of ours, so their upper is the wall clock and
their change times are commit times, which lie anywhere below a tick's time.
(The project's other continual-task tests write managed inputs whose change
times equal the tick times, and appended without the description: the
append's old check, "the last staged time is the tick's time", passed there
and refused every batch over a plain input.)

Every check is against :class:`StreamTableJoin`, Materialize's semantics of
the stream-table join kept in Python from the rows the test itself wrote,
never from what the product recorded.
"""

from __future__ import annotations

import sys
import time as _time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.frontier import Frontier, now_ms
from airflow_provider_ct.core.timeline import Timeline
from tests.helpers import rows_of, run_at_sealed_time

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

BIG = pa.schema([pa.field("key", pa.int32())])
SMALL = pa.schema([pa.field("key", pa.int32()), pa.field("val", pa.string())])


@dataclass
class StreamTableJoin:
    """``INSERT INTO stj SELECT b.key, s.val FROM big b JOIN small s ON b.key = s.key``.

    Materialize's continual-task semantics: at each input time, the rows
    inserted into ``big`` then are joined with ``small`` as it is then; a
    change of ``small`` alone changes nothing. Before the first tick (the
    as-of) nothing is written, except that ``SNAPSHOT = true`` joins the
    whole of ``big`` at the as-of once.
    """

    snapshot: bool
    big: list[int] = field(default_factory=list)
    small: list[tuple[int, str]] = field(default_factory=list)
    output: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    started: bool = False

    def _join(self, keys: list[int]) -> Counter[tuple[Any, ...]]:
        return Counter((k, v) for k in keys for sk, v in self.small if sk == k)

    def insert(self, keys: list[int]) -> None:
        self.big += keys
        if self.started:
            self.output += self._join(keys)

    def set_reference(self, rows: list[tuple[int, str]]) -> None:
        self.small = list(rows)

    def tick(self) -> None:
        if not self.started and self.snapshot:
            self.output += self._join(self.big)
        self.started = True


class PyIcebergInputs:
    """``big`` and ``small`` created, appended and overwritten with PyIceberg."""

    def __init__(self, catalog: Any, namespace: str) -> None:
        catalog.create_namespace_if_not_exists(namespace)
        self.big = catalog.create_table(f"{namespace}.big", BIG)
        self.small = catalog.create_table(f"{namespace}.small", SMALL)

    def insert(self, keys: list[int]) -> None:
        self.big.append(pa.Table.from_pylist([{"key": k} for k in keys], BIG))

    def set_reference(self, rows: list[tuple[int, str]]) -> None:
        data = pa.Table.from_pylist([{"key": k, "val": v} for k, v in rows], SMALL)
        self.small.overwrite(data)

    def last_commit_ms(self) -> int:
        stamps = [0]
        for table in (self.big, self.small):
            table.refresh()
            head = table.metadata.current_snapshot()
            stamps.append(0 if head is None else head.timestamp_ms)
        return max(stamps)


class SparkInputs:
    """``big`` (partitioned by a bucket of the key) and ``small`` (merge-on-read), in Spark SQL."""

    def __init__(self, spark: Any, catalog: Any, namespace: str) -> None:
        self.spark, self.catalog, self.ns = spark, catalog, namespace
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS ct.{namespace}")
        spark.sql(
            f"CREATE TABLE ct.{namespace}.big (key INT) USING iceberg "
            "PARTITIONED BY (bucket(4, key))"
        )
        spark.sql(
            f"CREATE TABLE ct.{namespace}.small (key INT, val STRING) USING iceberg "
            "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read')"
        )
        self.current: dict[int, str] = {}

    def insert(self, keys: list[int]) -> None:
        values = ", ".join(f"({k})" for k in keys)
        self.spark.sql(f"INSERT INTO ct.{self.ns}.big VALUES {values}")

    def set_reference(self, rows: list[tuple[int, str]]) -> None:
        """Each key's value by UPDATE when it had one (position deletes), else INSERT."""
        wanted = dict(rows)
        assert len(wanted) == len(rows), "the Spark reference keeps one value per key"
        for key, val in wanted.items():
            if key in self.current:
                if self.current[key] != val:
                    self.spark.sql(f"UPDATE ct.{self.ns}.small SET val = '{val}' WHERE key = {key}")
            else:
                self.spark.sql(f"INSERT INTO ct.{self.ns}.small VALUES ({key}, '{val}')")
        gone = [k for k in self.current if k not in wanted]
        if gone:
            keys = ", ".join(map(str, gone))
            self.spark.sql(f"DELETE FROM ct.{self.ns}.small WHERE key IN ({keys})")
        self.current = wanted

    def last_commit_ms(self) -> int:
        stamps = [0]
        for name in ("big", "small"):
            head = self.catalog.load_table(f"{self.ns}.{name}").metadata.current_snapshot()
            stamps.append(0 if head is None else head.timestamp_ms)
        return max(stamps)


class World:
    """The inputs, the model and the DAG of one namespace; every change goes to both sides."""

    def __init__(self, inputs: Any, model: StreamTableJoin, catalog: Any, namespace: str) -> None:
        self.inputs, self.model, self.catalog, self.ns = inputs, model, catalog, namespace
        sys.path.insert(0, str(ROOT / "tests" / "dags"))
        import continual_plain

        self.dag = getattr(continual_plain, f"ct_plain_{namespace}")
        self.ticks: list[int] = []

    def insert(self, keys: list[int]) -> int:
        """Append to ``big``; returns the commit's time (a distinct millisecond)."""
        self.inputs.insert(keys)
        self.model.insert(keys)
        return self._settle()

    def set_reference(self, rows: list[tuple[int, str]]) -> None:
        self.inputs.set_reference(rows)
        self.model.set_reference(rows)
        self._settle()

    def _settle(self) -> int:
        """The last commit's time, once the clock has moved past it (distinct commit times)."""
        last = self.inputs.last_commit_ms()
        while now_ms() <= last + 5:
            _time.sleep(0.005)
        return last

    def tick(self) -> int:
        """One run at a time the inputs' wall-clock uppers have sealed, after every commit."""
        time = run_at_sealed_time(self.dag, self.inputs.last_commit_ms())
        self.model.tick()
        self.ticks.append(time)
        output = self.output()
        assert Timeline.of(output).upper == Frontier.sealing(time)
        return time

    def output(self) -> Any:
        return self.catalog.load_table(f"{self.ns}.stj")

    def rows(self) -> Counter[tuple[Any, ...]]:
        return rows_of(self.output())


@pytest.fixture
def lake(spark_lake: CatalogConfig) -> CatalogConfig:
    return spark_lake


def _world(kind: str, spark: Any, config: CatalogConfig) -> World:
    namespace = {"pyiceberg": "accct", "spark": "accsp", "snapshot": "accsn"}[kind]
    catalog = config.load()
    inputs: Any = (
        SparkInputs(spark, catalog, namespace)
        if kind == "spark"
        else PyIcebergInputs(catalog, namespace)
    )
    return World(inputs, StreamTableJoin(snapshot=kind == "snapshot"), catalog, namespace)


def _check(world: World) -> None:
    assert world.rows() == world.model.output


@pytest.mark.parametrize("kind", ["pyiceberg", "spark"])
def test_stream_table_join_over_plain_inputs_lands_every_input_time(
    lake: CatalogConfig, spark: Any, kind: str
) -> None:
    """The issue's scenario, then several input times in one tick and a tick with no change."""
    world = _world(kind, spark, lake)
    world.set_reference([(1, "v0"), (2, "a")])
    world.tick()  # the as-of: no input yet, nothing written
    assert world.rows() == Counter()

    first = world.insert([1])
    world.tick()
    assert world.rows() == Counter({(1, "v0"): 1}) == world.model.output
    output = world.output()
    # The output's change lies at the input's commit time, below the tick's time.
    assert [t for t, _ in Timeline.of(output).data_times()] == [first]
    assert first < world.ticks[-1]

    world.set_reference([(1, "v1"), (2, "a")])
    world.tick()  # a reference changed alone: the output does not change
    assert world.rows() == Counter({(1, "v0"): 1})

    second = world.insert([1])
    world.tick()
    assert world.rows() == Counter({(1, "v0"): 1, (1, "v1"): 1}) == world.model.output

    # Several input times in one tick, the reference changing between them: each
    # input time joins the reference as it was then.
    times = [world.insert([2])]
    world.set_reference([(1, "v1"), (2, "b")])
    times.append(world.insert([2, 1]))
    world.set_reference([(1, "v2"), (2, "c")])
    world.tick()
    _check(world)
    assert world.rows()[(2, "a")] == 1 and world.rows()[(2, "b")] == 1
    assert (2, "c") not in world.rows()
    timeline = Timeline.of(world.output())
    assert [t for t, _ in timeline.data_times()] == [first, second, *times]
    # The output as of the first of those times holds that time's rows only.
    between = rows_of(world.output(), timeline.snapshot_at(times[0]))
    assert between == Counter({(1, "v0"): 1, (1, "v1"): 1, (2, "a"): 1})

    # A tick with no change at all: the frontier moves, the rows stay.
    before = world.rows()
    world.tick()
    assert world.rows() == before == world.model.output


def test_snapshot_true_joins_the_input_at_the_as_of_once(lake: CatalogConfig, spark: Any) -> None:
    world = _world("snapshot", spark, lake)
    world.set_reference([(3, "x"), (4, "y")])
    world.insert([3, 4, 5])
    world.insert([3])
    world.tick()  # the as-of: the whole input counts as inserted now
    assert world.rows() == Counter({(3, "x"): 2, (4, "y"): 1}) == world.model.output
    world.set_reference([(3, "z")])
    world.tick()  # a reference change alone: nothing, and the snapshot is not taken again
    assert world.rows() == world.model.output
    world.insert([3, 4])
    world.tick()
    assert world.rows() == Counter({(3, "x"): 2, (4, "y"): 1, (3, "z"): 1}) == world.model.output
