"""The driver's diff of small corrections agrees with a Python multiset model and with Spark's.

Rows are chosen by the test (duplicates, NULLs in every position, strings
and doubles); the model is ``Counter(desired) - Counter(persisted)`` for the
inserts and, for each row with ``k`` surplus copies, the ``k`` lowest
``(_file, _pos)`` holding it for the retractions. Both paths of
``compute_correction`` must equal the model exactly, so the driver path
cannot drift from the Spark path it replaces.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.settings import DRIVER_DIFF_ROWS_ENV as ROWS_ENV
from airflow_provider_ct.core.settings import (
    NARROW_ROWS_ON_DRIVER,
    NARROW_TARGET_BYTES,
    ROWS_ON_DRIVER,
    full_rows_on_driver,
    rows_on_driver,
)
from airflow_provider_ct.exceptions import ConfigurationError, IncrementalMismatchError
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.driver_diff import driver_correction

pytestmark = [pytest.mark.spark]

COLUMNS = ["k", "name", "x"]
SCHEMA = "k long, name string, x double"
LOCATED = f"{SCHEMA}, _file string, _pos long"
Row = tuple[Any, ...]


def _rows(rng: random.Random, n: int) -> list[Row]:
    """Few distinct values, so rows repeat and differ only by a NULL's position."""
    return [
        (
            rng.choice([1, 2, None]),
            rng.choice(["a", "b", None]),
            rng.choice([0.5, 2.0, None]),
        )
        for _ in range(n)
    ]


def _located(rows: list[Row], rng: random.Random) -> list[Row]:
    """Each row at a (file, position), in an order the test shuffles."""
    placed = [(*row, f"file-{i % 3}", i // 3) for i, row in enumerate(rows)]
    rng.shuffle(placed)
    return placed


def _model(desired: list[Row], located: list[Row]) -> tuple[Counter[Row], list[tuple[str, int]]]:
    have = Counter(row[:3] for row in located)
    inserts = Counter(desired) - have
    surplus = have - Counter(desired)
    where: dict[Row, list[tuple[str, int]]] = defaultdict(list)
    for row in located:
        where[row[:3]].append((row[3], row[4]))
    retract = [pos for row, k in surplus.items() for pos in sorted(where[row])[:k]]
    return inserts, sorted(retract)


def _inserted(correction: Any) -> Counter[Row]:
    frame = correction.inserts
    if isinstance(frame, pa.Table):
        return Counter(tuple(r[c] for c in COLUMNS) for r in frame.to_pylist())
    return Counter(tuple(r) for r in frame.collect())


@pytest.mark.parametrize("seed", range(4))
def test_driver_and_spark_diffs_equal_the_multiset_model(spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    desired_rows = _rows(rng, rng.randint(0, 40))
    located_rows = _located(_rows(rng, rng.randint(0, 40)), rng)
    desired = spark.createDataFrame(desired_rows, SCHEMA)
    persisted = spark.createDataFrame(located_rows, LOCATED)
    want_inserts, want_retract = _model(desired_rows, located_rows)
    for on_driver in (True, False):
        got = compute_correction(desired, persisted, COLUMNS, on_driver=on_driver)
        assert got.diffed_on == ("driver" if on_driver else "spark")
        assert _inserted(got) == want_inserts, on_driver
        assert sorted(got.retractions) == want_retract, on_driver
        assert got.insert_count == sum(want_inserts.values())
        assert got.retract_count == len(want_retract)


def test_driver_looks_retractions_up_in_the_located_target(spark: Any) -> None:
    """Incremental form: the removed rows carry no positions; they are found in the target."""
    target = [(1, "a", 0.5, "f1", 0), (1, "a", 0.5, "f0", 7), (2, None, None, "f0", 1)]
    located = spark.createDataFrame(target, LOCATED)
    added = spark.createDataFrame([(3, "c", 1.0)], SCHEMA)
    removed = spark.createDataFrame([(1, "a", 0.5), (2, None, None)], SCHEMA)
    got = driver_correction(added, removed, COLUMNS, located=located)
    assert got is not None
    assert _inserted(got) == Counter({(3, "c", 1.0): 1})
    assert sorted(got.retractions) == [("f0", 1), ("f0", 7)]  # lowest (file, pos) of the pair

    missing = spark.createDataFrame([(9, "z", None)], SCHEMA)
    with pytest.raises(IncrementalMismatchError, match="1 rows to retract, 0 found"):
        driver_correction(added, missing, COLUMNS, located=located)


def test_a_side_past_the_limit_goes_back_to_spark(spark: Any) -> None:
    rows = [(i, "a", 1.0) for i in range(5)]
    desired = spark.createDataFrame(rows, SCHEMA)
    persisted = spark.createDataFrame(_located(rows[:2], random.Random(0)), LOCATED)
    assert driver_correction(desired, persisted, COLUMNS, limit=4) is None  # desired: 5 rows
    big = spark.createDataFrame(_located(rows, random.Random(1)), LOCATED)
    assert driver_correction(persisted.select(*COLUMNS), big, COLUMNS, limit=4) is None
    small = driver_correction(desired, persisted, COLUMNS, limit=5)
    assert small is not None and small.insert_count == 3 and small.retract_count == 0


def test_the_environment_sets_the_limit_and_zero_turns_the_driver_off(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [(1, "a", 1.0), (2, None, None)]
    desired = spark.createDataFrame(rows, SCHEMA)
    persisted = spark.createDataFrame(_located(rows[:1], random.Random(0)), LOCATED)
    monkeypatch.setenv(ROWS_ENV, "1")
    assert rows_on_driver() == 1
    assert driver_correction(desired, persisted, COLUMNS) is None  # 2 desired rows > 1
    monkeypatch.setenv(ROWS_ENV, "0")
    assert compute_correction(desired, persisted, COLUMNS, on_driver=True).diffed_on == "spark"
    for bad in ("many", "-5"):
        monkeypatch.setenv(ROWS_ENV, bad)
        with pytest.raises(ConfigurationError, match=ROWS_ENV):
            rows_on_driver()


def test_a_narrow_targets_full_correction_gets_the_larger_limit(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ROWS_ENV, raising=False)
    assert full_rows_on_driver(NARROW_TARGET_BYTES) == NARROW_ROWS_ON_DRIVER
    assert full_rows_on_driver(NARROW_TARGET_BYTES + 1) == ROWS_ON_DRIVER
    monkeypatch.setenv(ROWS_ENV, "7")  # a set limit is the limit, for every correction
    assert full_rows_on_driver(0) == 7
    monkeypatch.setenv(ROWS_ENV, "0")
    assert full_rows_on_driver(0) == 0
    # The limit reaches the driver's diff through compute_correction.
    monkeypatch.delenv(ROWS_ENV)
    rows = [(i, "a", 1.0) for i in range(5)]
    desired = spark.createDataFrame(rows, SCHEMA)
    persisted = spark.createDataFrame(_located(rows[:2], random.Random(0)), LOCATED)
    over = compute_correction(desired, persisted, COLUMNS, on_driver=True, driver_limit=4)
    assert over.diffed_on == "spark"
    within = compute_correction(desired, persisted, COLUMNS, on_driver=True, driver_limit=5)
    assert within.diffed_on == "driver" and within.insert_count == 3
