"""TPC-DS for bench/tpcds_bench.py: the queries as views, the inputs, their changes, the oracle.

Kept apart from the run so the oracle can be read on its own: the bench
notes every input's snapshot id right after its own changes, and DuckDB runs
each query's DuckDB text over those snapshots, read by PyIceberg; nothing the
product pinned or recorded is read for it.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

NS = "tpcds"
TARGETS = "tpcds_views"
#: Inputs whose row-level changes write delete files (the others' rewrite data files).
MERGE_ON_READ = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}
#: Each busy tick's changes, ``{k}`` the tick's number: deleted sales and returns,
#: re-inserted copies of others, updates of a fact and two dimensions.
CHANGES = (
    "DELETE FROM {t}.store_sales WHERE pmod(ss_ticket_number, 97) = {k}",
    "INSERT INTO {t}.store_sales SELECT * FROM {t}.store_sales"
    " WHERE pmod(ss_ticket_number, 89) = {k}",
    "UPDATE {t}.store_sales SET ss_quantity = ss_quantity + 1 WHERE pmod(ss_item_sk, 61) = {k}",
    "DELETE FROM {t}.catalog_sales WHERE pmod(cs_order_number, 97) = {k}",
    "INSERT INTO {t}.catalog_sales SELECT * FROM {t}.catalog_sales"
    " WHERE pmod(cs_order_number, 89) = {k}",
    "DELETE FROM {t}.web_sales WHERE pmod(ws_order_number, 97) = {k}",
    "INSERT INTO {t}.web_sales SELECT * FROM {t}.web_sales WHERE pmod(ws_order_number, 89) = {k}",
    "DELETE FROM {t}.store_returns WHERE pmod(sr_ticket_number, 97) = {k}",
    "DELETE FROM {t}.catalog_returns WHERE pmod(cr_order_number, 97) = {k}",
    "DELETE FROM {t}.web_returns WHERE pmod(wr_order_number, 97) = {k}",
    "DELETE FROM {t}.inventory WHERE pmod(inv_item_sk, 53) = {k}",
    "UPDATE {t}.item SET i_current_price = i_current_price + 1 WHERE pmod(i_item_sk, 17) = {k}",
    "UPDATE {t}.customer SET c_birth_year = c_birth_year + 1 WHERE pmod(c_customer_sk, 31) = {k}",
)
CHANGED = sorted({re.findall(r"\{t\}\.(\w+)", c)[0] for c in CHANGES})


@dataclass(frozen=True)
class TpcdsView:
    """One query as a view: its Spark SQL (as the view and as Spark runs it) and DuckDB text."""

    number: int
    spark_sql: str
    spark_run_sql: str
    duckdb_sql: str

    @property
    def target(self) -> str:
        return f"{TARGETS}.q{self.number:02d}"

    def reads_changed(self) -> bool:
        """Whether the query reads a table the busy ticks change (then each is busy for it)."""
        tree = sqlglot.parse_one(self.spark_sql, read="spark")
        return any(t.db == NS and t.name in CHANGED for t in tree.find_all(exp.Table))


def _name_outputs(tree: exp.Expr) -> None:
    """Name every unnamed or repeated output column ``c<i>`` (a table's columns need names)."""
    select: Any = tree
    while isinstance(select, exp.SetOperation | exp.Subquery):
        select = select.left if isinstance(select, exp.SetOperation) else select.this
    if not isinstance(select, exp.Select):
        return
    seen: set[str] = set()
    for i, projection in enumerate(list(select.expressions)):
        if isinstance(projection, exp.Star) or isinstance(projection.this, exp.Star):
            continue
        name = projection.alias_or_name if isinstance(projection, exp.Alias | exp.Column) else ""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") or name.lower() in seen:
            inner = projection.this if isinstance(projection, exp.Alias) else projection
            projection.replace(exp.alias_(inner.copy(), f"c{i}"))
            name = f"c{i}"
        seen.add(name.lower())


def views(texts: dict[str, str], numbers: list[int] | None, tables: set[str]) -> list[TpcdsView]:
    """The queries (``numbers``, default all) as views over ``tpcds.<table>``."""
    out = []
    for key, text in sorted(texts.items(), key=lambda kv: int(kv[0])):
        if numbers and int(key) not in numbers:
            continue
        duck = sqlglot.parse_one(text, read="duckdb")
        duck.set("order", None)
        duck.set("limit", None)
        _name_outputs(duck)
        spark, run = duck.copy(), duck.copy()
        ctes = {c.alias_or_name.lower() for c in duck.find_all(exp.CTE)}
        for tree, catalog in ((spark, None), (run, "ct")):
            for table in tree.find_all(exp.Table):
                if table.name.lower() in tables and table.name.lower() not in ctes:
                    table.set("db", exp.to_identifier(NS))
                    if catalog:
                        table.set("catalog", exp.to_identifier(catalog))
        out.append(
            TpcdsView(
                int(key), spark.sql(dialect="spark"), run.sql(dialect="spark"), duck.sql("duckdb")
            )
        )
    return out


def normalized(rows: Any) -> Counter[tuple[Any, ...]]:
    """Whole numbers as ints, others to 6 significant digits (decimal and double averages)."""

    def number(v: Any) -> Any:
        if isinstance(v, Decimal | float) and not isinstance(v, bool):
            return int(v) if v == int(v) else float(f"{float(v):.6g}")
        return v

    return Counter(tuple(number(v) for v in row) for row in rows)


class Inputs:
    """The TPC-DS tables as managed Iceberg inputs, and the snapshots the bench noted."""

    def __init__(self, config: Any, folder: Path) -> None:
        import pyarrow.parquet as pq

        from airflow_provider_ct.core.tables import create_managed_table

        self.config, self.catalog = config, config.load()
        self.catalog.create_namespace_if_not_exists(NS)
        self.catalog.create_namespace_if_not_exists(TARGETS)
        self.tables: list[str] = []
        for path in sorted(folder.glob("*.parquet")):
            data = pq.read_table(path)
            props = MERGE_ON_READ if path.stem in {*CHANGED, "item", "customer"} else None
            table = create_managed_table(
                self.catalog, f"{NS}.{path.stem}", data.schema, properties=props
            )
            table.append(data)
            self.tables.append(path.stem)
        self.changed = set(self.tables)
        self.recorded: dict[str, int] = {}
        self._con: Any = None

    def change(self, spark: Any, step: int) -> None:
        for text in CHANGES:
            spark.sql(text.format(t=f"ct.{NS}", k=step)).collect()
        self.changed = set(CHANGED)
        self._con = None

    def seal(self, tick_time: int) -> None:
        """Note the changed inputs' snapshots, stamp them just before ``tick_time``, seal it."""
        from airflow_provider_ct.core.commit import compare_and_append
        from airflow_provider_ct.core.frontier import Frontier
        from airflow_provider_ct.core.timeline import Timeline

        for name in self.tables:
            table = self.catalog.load_table(f"{NS}.{name}")
            if name in self.changed:
                self.recorded[name] = table.metadata.current_snapshot().snapshot_id
            for upper, at in (((tick_time - 500), tick_time - 500), (tick_time, None)):
                if name not in self.changed and at is not None:
                    continue
                table.refresh()
                result = compare_and_append(
                    table,
                    expected_upper=Timeline.of(table).upper,
                    new_upper=Frontier.sealing(upper),
                    batch_id=f"bench-{upper}-{uuid.uuid4().hex[:8]}",
                    time=at,
                )
                assert result.landed, result
        self.changed = set()

    def oracle(self, view: TpcdsView) -> Counter[tuple[Any, ...]]:
        """DuckDB's rows of the query over the snapshots the bench noted."""
        if self._con is None:
            import duckdb

            self._con = duckdb.connect()
            for name in self.tables:
                data = (
                    self.catalog.load_table(f"{NS}.{name}")
                    .scan(snapshot_id=self.recorded[name])
                    .to_arrow()
                )
                self._con.register(f"{name}_rows", data)
                self._con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_rows")
                self._con.unregister(f"{name}_rows")
        return normalized(self._con.execute(view.duckdb_sql).fetchall())

    def spark_rows(self, spark: Any, view: TpcdsView) -> Counter[tuple[Any, ...]]:
        return normalized(tuple(r) for r in spark.sql(view.spark_run_sql).collect())

    def view_rows(self, view: TpcdsView) -> Counter[tuple[Any, ...]]:
        arrow = self.catalog.load_table(view.target).scan().to_arrow()
        columns = [arrow.column(n).to_pylist() for n in arrow.column_names]
        return normalized(zip(*columns, strict=True))

    def tick(
        self, spark: Any, view: TpcdsView, tick_time: int, conn: str, refresh: str = "auto"
    ) -> Any:
        """Mint, write (``refresh``: ``auto`` or ``full``) and append one tick of the view."""
        from pyiceberg.exceptions import NoSuchTableError

        from airflow_provider_ct.core.mint import mint
        from airflow_provider_ct.core.query import parse_query
        from airflow_provider_ct.core.timeline import Timeline
        from airflow_provider_ct.operators.append import AppendOperator
        from airflow_provider_ct.spark.write_job import run_write

        parsed = parse_query(view.spark_sql, target=view.target)
        inputs = {n: Timeline.of(self.catalog.load_table(n)) for n in parsed.inputs}
        try:
            target = Timeline.of(self.catalog.load_table(view.target))
        except NoSuchTableError:
            target = None
        decision = mint(target=view.target, target_timeline=target, time=tick_time, inputs=inputs)
        if decision.description is None:
            raise RuntimeError(f"the mint refused the tick: {decision.reason}")
        report = run_write(
            spark, self.config, view.spark_sql, decision.description, refresh=refresh
        )
        appended = AppendOperator(task_id="append", report=report.to_json(), iceberg_conn_id=conn)
        if not appended.execute({}).get("appended"):
            raise RuntimeError("the append did not land")
        return report
