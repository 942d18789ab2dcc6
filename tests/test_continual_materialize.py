"""Materialize's continual-task test scenarios, on real Spark and Iceberg (issue 43).

One test per scenario file of Materialize's (``ct_audit_log``, ``ct_errors``,
``ct_retain``, ``ct_snapshot``, ``ct_stream_table_join``, ``ct_upsert``),
each written in our own code: the definition as a Materialize user wrote it,
the rows the test writes at times it chooses, and the output checked against
a Python model of Materialize's semantics over those rows, never against what
the product recorded. Where we differ on purpose (docs/continual-tasks.md,
"Differences from Materialize") the test asserts our behaviour and says so.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.spark.continual_job import run_continual
from tests.helpers import advance, replace_contents, rows_of
from tests.test_continual import append_rows, ct_append, ct_mint, ct_tick

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
KEY = pa.schema([("key", pa.int32())])
KV = pa.schema([("key", pa.int32()), ("val", pa.int32())])
Rows = Counter[tuple[Any, ...]]


def readme_definition() -> str:
    """The continual task of the README's example (copied from Materialize's docs)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Example: continual tasks") :]
    match = re.search(r"```sql\n(CREATE CONTINUAL TASK.*?)```", section, re.DOTALL)
    assert match is not None, "the README's continual-task example has no definition"
    return match.group(1)


class CopyModel:
    """``INSERT INTO ct SELECT * FROM input``: each input time's inserts, from the as-of on.

    With the snapshot (Materialize's default) the rows written at or before the
    as-of count too; without it, only the rows written after it.
    """

    def __init__(self) -> None:
        self.writes: list[tuple[int, list[tuple[Any, ...]]]] = []

    def output(self, as_of: int, snapshot: bool) -> Rows:
        return Counter(
            r for t, rows in self.writes for r in rows if t > as_of or (snapshot and t <= as_of)
        )


@pytest.mark.parametrize("option", ["", "WITH (SNAPSHOT = false) "])
def test_ct_snapshot_infers_the_columns_and_processes_the_input_at_the_start(
    spark: Any, spark_catalog_config: CatalogConfig, option: str
) -> None:
    """Rows 1 and 2 written before the task, 3 after: the task holds 1, 2, 3.

    Failed before issue 43: the definition has no column list (refused at
    parse), and without ``SNAPSHOT`` the output held only 3.
    """
    ns = "mz_snapshot" if not option else "mz_snapshot_off"
    definition = (
        f"CREATE CONTINUAL TASK ct ON INPUT input {option}AS (\n"
        "    INSERT INTO ct SELECT * FROM input;\n)"
    )
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.input", KEY)
    model = CopyModel()
    for time, rows in ((10, [(1,)]), (20, [(2,)])):
        append_rows(source, time, rows, KEY)
        model.writes.append((time, rows))
    advance(source, 30)
    assert ct_tick(spark, spark_catalog_config, definition, ns, 30)["appended"]  # the as-of
    append_rows(source, 40, [(3,)], KEY)
    model.writes.append((40, [(3,)]))
    assert ct_tick(spark, spark_catalog_config, definition, ns, 40)["appended"]
    output = catalog.load_table(f"{ns}.ct")
    assert rows_of(output) == model.output(as_of=30, snapshot=not option)
    assert [(f.name, str(f.field_type)) for f in output.schema().fields] == [("key", "int")]


def test_ct_upsert_runs_the_readme_definition_unchanged(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """The README's example is Materialize's UPSERT, run as pasted, against a fold in Python."""
    definition = readme_definition()
    assert "CREATE CONTINUAL TASK upsert (key INT, val INT) ON INPUT append_only AS (" in definition
    ns = "mz_upsert"
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.append_only", KV)
    state: dict[int, int] = {}

    def fold(rows: list[tuple[int, int]]) -> None:
        for key in {k for k, _ in rows}:
            state[key] = max(v for k, v in rows if k == key)

    append_rows(source, 5, [(9, 1), (9, 4)], KV)  # before the task: its snapshot
    fold([(9, 1), (9, 4)])
    advance(source, 10)
    ct_tick(spark, spark_catalog_config, definition, ns, 10)
    for time, rows in ((20, [(1, 2), (1, 1)]), (30, [(1, 3), (2, 4)])):
        append_rows(source, time, rows, KV)
        fold(rows)
        ct_tick(spark, spark_catalog_config, definition, ns, time)
        expected = Counter(state.items())
        assert rows_of(catalog.load_table(f"{ns}.upsert")) == expected


def test_ct_stream_table_join_reads_the_reference_as_of_each_input_time(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    definition = """CREATE CONTINUAL TASK stj (key INT, val STRING) ON INPUT big AS (
    INSERT INTO stj SELECT b.key, s.val FROM big b JOIN small s ON b.key = s.key;
)"""
    ns = "mz_stj"
    small_schema = pa.schema([("key", pa.int32()), ("val", pa.string())])
    catalog = spark_catalog_config.load()
    big = create_managed_table(catalog, f"{ns}.big", KEY)
    small = create_managed_table(catalog, f"{ns}.small", small_schema)
    small_rows = [(1, "v0")]
    append_rows(small, 5, small_rows, small_schema)
    advance(big, 5)
    ct_tick(spark, spark_catalog_config, definition, ns, 5)
    expected: Rows = Counter()

    def insert_big(time: int, keys: list[int]) -> None:
        append_rows(big, time, [(k,) for k in keys], KEY)
        advance(small, time)
        expected.update((k, v) for k in keys for sk, v in small_rows if sk == k)
        ct_tick(spark, spark_catalog_config, definition, ns, time)

    insert_big(10, [1])
    small_rows = [(1, "v1")]  # UPDATE small SET val = 'v1'
    replace_contents(small, 20, pa.Table.from_pylist([{"key": 1, "val": "v1"}], small_schema))
    insert_big(30, [1])
    assert rows_of(catalog.load_table(f"{ns}.stj")) == expected
    assert expected == Counter({(1, "v0"): 1, (1, "v1"): 1})


def test_ct_audit_log_over_an_input_that_is_corrected_in_place(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """Materialize's input is a materialized view ``SELECT sum(key)::INT``: here a table
    whose one row is replaced (an overwrite, as a view's correction is); the task sees
    the inserted rows of each correction."""
    definition = """CREATE CONTINUAL TASK audit_log (count INT) ON INPUT anomalies AS (
    INSERT INTO audit_log SELECT * FROM anomalies WHERE sum > 1;
)"""
    ns = "mz_audit"
    schema = pa.schema([("sum", pa.int32())])
    catalog = spark_catalog_config.load()
    anomalies = create_managed_table(catalog, f"{ns}.anomalies", schema)
    mv_input: list[int] = [1]
    log: Rows = Counter()

    def correct(time: int) -> None:
        replace_contents(anomalies, time, pa.table({"sum": [sum(mv_input)]}, schema=schema))

    correct(10)
    log.update((s,) for s in [sum(mv_input)] if s > 1)  # the snapshot at the as-of
    ct_tick(spark, spark_catalog_config, definition, ns, 10)
    assert rows_of(catalog.load_table(f"{ns}.audit_log")) == log == Counter()
    mv_input += [2, 3]
    correct(20)
    log.update((s,) for s in [sum(mv_input)] if s > 1)  # 6 replaces 1: inserted 6
    ct_tick(spark, spark_catalog_config, definition, ns, 20)
    assert rows_of(catalog.load_table(f"{ns}.audit_log")) == log == Counter({(6,): 1})


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


RETAIN_SUGAR = """CREATE CONTINUAL TASK retain
    FROM RETAIN append_only
    WHILE (ts_col + INTERVAL '2s' > mz_now())"""
#: The same, spelled out: what the sugar stands for, with a column list.
RETAIN_STATEMENTS = """CREATE CONTINUAL TASK retain (val STRING, ts_col TIMESTAMPTZ)
ON INPUT append_only AS (
    DELETE FROM retain WHERE NOT (ts_col + INTERVAL '2s' > mz_now());
    INSERT INTO retain SELECT * FROM append_only WHERE ts_col + INTERVAL '2s' > mz_now();
)"""


#: The epoch-ms spelling over a timestamp column (issue 59): Spark types the operand
#: ``unix_millis(ts_col) + 2000`` as a number, so ``mz_now()`` is the number ``t``.
RETAIN_EPOCH_MS = """CREATE CONTINUAL TASK retain
    FROM RETAIN append_only
    WHILE (unix_millis(ts_col) + 2000 > mz_now())"""
#: ``mz_now()`` inside arithmetic with a number, compared with a number.
RETAIN_EPOCH_MS_SHIFTED = """CREATE CONTINUAL TASK retain
    FROM RETAIN append_only
    WHILE (unix_millis(ts_col) > mz_now() - 2000)"""


RETAINS = [
    ("mz_retain", RETAIN_SUGAR),
    ("mz_retain_ddl", RETAIN_STATEMENTS),
    ("mz_retain_ms", RETAIN_EPOCH_MS),
    ("mz_retain_ms2", RETAIN_EPOCH_MS_SHIFTED),
]


@pytest.mark.parametrize(("ns", "definition"), RETAINS)
def test_ct_retain_compares_mz_now_with_timestamps(
    spark: Any, spark_catalog_config: CatalogConfig, ns: str, definition: str
) -> None:
    """``WHILE (ts_col + INTERVAL '2s' > mz_now())``: Materialize's retention idiom.

    Failed before issue 43: ``mz_now()`` was a number, which Spark does not
    compare with a timestamp (and the ``FROM RETAIN`` sugar did not parse).
    The epoch-ms spellings failed before issue 59: ``ts_col`` in the operand
    made ``mz_now()`` a timestamp, and Spark refuses ``BIGINT > TIMESTAMP``.
    """
    schema = pa.schema([("val", pa.string()), ("ts_col", pa.timestamp("us", tz="UTC"))])
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.append_only", schema)
    t0 = 1_800_000_000_000
    advance(source, t0)
    ct_tick(spark, spark_catalog_config, definition, ns, t0)
    kept: dict[str, int] = {}

    def keep(ts: int, now: int) -> bool:
        return ts + 2000 > now

    def insert(time: int, rows: list[tuple[str, int]]) -> None:
        append_rows(source, time, [(v, _utc(ts)) for v, ts in rows], schema)
        for val in [v for v, ts in kept.items() if not keep(ts, time)]:
            del kept[val]
        kept.update({v: ts for v, ts in rows if keep(ts, time)})
        ct_tick(spark, spark_catalog_config, definition, ns, time)

    def held() -> Counter[str]:
        return Counter(r[0] for r in rows_of(catalog.load_table(f"{ns}.retain")))

    t1 = t0 + 1000
    insert(t1, [("1s", t1 - 1000), ("1m", t1 - 60_000)])
    assert held() == Counter(kept.keys()) == Counter({"1s": 1})
    t2 = t1 + 2500  # the 1s row aged out, but no input time: nothing is written
    advance(source, t2)
    ct_tick(spark, spark_catalog_config, definition, ns, t2)
    assert held() == Counter({"1s": 1})
    t3 = t2 + 10
    insert(t3, [("0s", t3)])
    assert held() == Counter(kept.keys()) == Counter({"0s": 1})


def _first_tick(
    spark: Any, config: CatalogConfig, ns: str, definition: str, schema: pa.Schema, row: dict
) -> Callable[[], Any]:
    """The first tick of ``definition`` over ``ns.foo`` holding ``row``: write, then append."""
    catalog = config.load()
    source = create_managed_table(catalog, f"{ns}.foo", schema)
    replace_contents(source, 10, pa.Table.from_pylist([row], schema))
    description = ct_mint(config, definition, ns, 10)

    def tick() -> Any:
        report = run_continual(spark, config, definition, ns, description)
        return ct_append(report, description, definition, ns)

    return tick


@pytest.mark.parametrize(
    ("ns", "declared", "input_type", "value", "outcome"),
    [
        (
            "mz_err_bool",
            "BOOL",
            pa.int32(),
            1,
            'column "key" is of type boolean but expression is of type int',
        ),
        (
            "mz_err_int",
            "INT",
            pa.string(),
            "1",
            'column "key" is of type int but expression is of type string',
        ),
        ("mz_ok_bigint", "BIGINT", pa.int32(), 7, 7),
        ("mz_ok_string", "STRING", pa.int32(), 7, "7"),
    ],
)
def test_ct_errors_types_follow_ansi_store_assignment(
    spark: Any,
    spark_catalog_config: CatalogConfig,
    ns: str,
    declared: str,
    input_type: pa.DataType,
    value: Any,
    outcome: Any,
) -> None:
    """Refused at the first tick, naming the statement and the column; nothing created.

    Failed before issue 43: the INT was cast to a BOOL and ``true`` written.
    """
    definition = (
        f"CREATE CONTINUAL TASK nope (key {declared}) ON INPUT foo AS (\n"
        "    INSERT INTO nope SELECT * FROM foo;\n)"
    )
    schema = pa.schema([("key", input_type)])
    tick = _first_tick(spark, spark_catalog_config, ns, definition, schema, {"key": value})
    catalog = spark_catalog_config.load()
    if ns.startswith("mz_ok"):  # assignable: the snapshot's row, converted
        assert tick()["appended"]
        assert rows_of(catalog.load_table(f"{ns}.nope")) == Counter({(outcome,): 1})
        return
    with pytest.raises(QueryError) as caught:
        tick()
    message = str(caught.value)
    assert message == f"statement 1 (INSERT INTO nope SELECT * FROM foo): {outcome}"
    assert not catalog.table_exists(f"{ns}.nope")  # nothing created, nothing written


@pytest.mark.parametrize(
    ("ns", "statement"),
    [
        ("mz_err_name", "INSERT INTO nope SELECT missing FROM foo"),
        ("mz_err_delete", "DELETE FROM nope WHERE missing > 1"),
    ],
)
def test_ct_errors_unresolved_names_speak_of_the_definition(
    spark: Any, spark_catalog_config: CatalogConfig, ns: str, statement: str
) -> None:
    definition = f"CREATE CONTINUAL TASK nope (key INT) ON INPUT foo AS (\n    {statement};\n)"
    tick = _first_tick(spark, spark_catalog_config, ns, definition, KEY, {"key": 1})
    with pytest.raises(QueryError) as caught:
        tick()
    message = str(caught.value)
    assert message.startswith(f"statement 1 ({statement}): ")
    assert "`missing`" in message and "__ct" not in message
    assert not spark_catalog_config.load().table_exists(f"{ns}.nope")


def test_an_insert_reading_the_output_sees_only_its_columns(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """``SELECT * FROM <output>`` inside the statements is the output's columns, as in
    Materialize (the job's row addresses stay internal): each key is recorded once."""
    definition = """CREATE CONTINUAL TASK seen (key INT) ON INPUT foo AS (
    INSERT INTO seen SELECT DISTINCT * FROM foo WHERE key NOT IN (SELECT * FROM seen);
)"""
    ns = "mz_seen"
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.foo", KEY)
    seen: set[int] = set()
    for time, keys in ((10, [1, 2, 2]), (20, [2, 3]), (30, [1, 4])):
        append_rows(source, time, [(k,) for k in keys], KEY)
        seen.update(keys)
        ct_tick(spark, spark_catalog_config, definition, ns, time)
    assert rows_of(catalog.load_table(f"{ns}.seen")) == Counter((k,) for k in seen)


def test_an_inferred_task_keeps_its_output_columns_and_its_history(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    """Columns taken from ``SELECT key, val * 2 AS twice``; later ticks append at input times."""
    definition = """CREATE CONTINUAL TASK doubled ON INPUT src AS (
    INSERT INTO doubled SELECT key, CAST(val * 2 AS BIGINT) AS twice FROM src WHERE val > 0;
)"""
    ns = "mz_inferred"
    catalog = spark_catalog_config.load()
    source = create_managed_table(catalog, f"{ns}.src", KV)
    advance(source, 10)
    ct_tick(spark, spark_catalog_config, definition, ns, 10)
    written = [(20, [(1, 5), (2, -1)]), (30, [(3, 4)])]
    for time, rows in written:
        append_rows(source, time, rows, KV)
    ct_tick(spark, spark_catalog_config, definition, ns, 30)
    output = catalog.load_table(f"{ns}.doubled")
    assert [(f.name, str(f.field_type)) for f in output.schema().fields] == [
        ("key", "int"),
        ("twice", "long"),
    ]
    expected = Counter((k, v * 2) for _, rows in written for k, v in rows if v > 0)
    assert rows_of(output) == expected
    assert [t for t, _ in Timeline.of(output).data_times()] == [20, 30]


@pytest.mark.parametrize(
    ("ns", "select", "message"),
    [
        ("mz_unnamed", "SELECT key, max(val) FROM foo GROUP BY key",
         r"column 2 \(max\(val\)\) needs a name"),
        ("mz_untyped", "SELECT key, NULL AS nothing FROM foo",
         r'column "nothing" has no type \(NULL\)'),
    ],
)  # fmt: skip
def test_inferred_columns_need_a_name_and_a_type(
    spark: Any, spark_catalog_config: CatalogConfig, ns: str, select: str, message: str
) -> None:
    definition = f"CREATE CONTINUAL TASK nope ON INPUT foo AS (INSERT INTO nope {select};)"
    tick = _first_tick(spark, spark_catalog_config, ns, definition, KV, {"key": 1, "val": 2})
    with pytest.raises(QueryError, match=rf"^statement 1 \(INSERT INTO nope .*\): {message}"):
        tick()
    assert not spark_catalog_config.load().table_exists(f"{ns}.nope")
