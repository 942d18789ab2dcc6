"""The views, inputs and input changes of bench/view_bench.py.

Kept apart from the timing code so the data can be read (and trusted) on its
own. Everything is generated in Spark SQL from ``range()`` with hash-derived
values, never ``rand()``: the same seed gives the same rows, and the same
expressions can run inside ``UPDATE ... SET`` (Spark refuses nondeterministic
ones there). Strings are hex digests and amounts come from 64-bit hashes, so
the data does not compress away and a bench on it measures real bytes.

Two views:

* ``projection``: ``SELECT id, s, d FROM src``, one row per input row;
* ``join_agg``: ``orders JOIN customers`` grouped per customer with ``SUM``,
  ``COUNT`` and ``MAX`` (amounts are ``DECIMAL``, so every method's sums are
  exactly equal and the methods can be compared row for row).

A change updates, deletes and inserts rows (a third each) at random keys
spread over the whole table, with Spark ``UPDATE``/``DELETE``/``INSERT`` on
merge-on-read Iceberg tables, as an upstream job would. Because the bench
makes the change it also knows its keys, and writes them to a ``touched``
table: what the dbt-incremental baseline needs in advance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Iceberg table properties of every input and baseline target: row-level
#: changes write delete files instead of rewriting data files.
MOR = (
    "'format-version'='2', 'write.delete.mode'='merge-on-read', "
    "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'"
)
#: Data files per generated input (what a modest upstream job would leave).
INPUT_FILES = 8
#: Customers per order (TPC-H has 10 orders per customer).
ORDERS_PER_CUSTOMER = 10
#: The table holding the keys a change touched (view key values), per namespace.
TOUCHED = "touched"


def _hash(expr: str, seed: int, modulus: int) -> str:
    """A pseudo-random integer in ``[0, modulus)`` derived from ``expr``."""
    return f"pmod(xxhash64({expr}, {seed}), {modulus})"


def _text(expr: str, seed: int, chars: int) -> str:
    """``chars`` hex characters (at most 128) derived from ``expr``."""
    return f"substring(sha2(concat(cast({expr} AS STRING), '/{seed}'), 512), 1, {chars})"


def _double(expr: str, seed: int) -> str:
    return f"({_hash(expr, seed, 1_000_000_007)} / 1000000007.0)"


def _price(expr: str, seed: int) -> str:
    return f"CAST({_hash(expr, seed, 100_000_000)} / 100 AS DECIMAL(12,2))"


def _date(expr: str, seed: int) -> str:
    return f"date_add(DATE'1992-01-01', CAST({_hash(expr, seed, 2400)} AS INT))"


@dataclass(frozen=True)
class Change:
    """Rows of one input a tick updates, deletes and inserts (a third each)."""

    updates: int
    deletes: int
    inserts: int

    @classmethod
    def of(cls, rows: int) -> Change:
        third = rows // 3
        return cls(updates=rows - 2 * third, deletes=third, inserts=third)

    @property
    def rows(self) -> int:
        return self.updates + self.deletes + self.inserts

    def updated(self, key: str, seed: int, rows: int) -> str:
        """Predicate: the keys (of ``rows`` at the start) this change updates."""
        return f"{_hash(key, seed, rows)} < {self.updates}"

    def deleted(self, key: str, seed: int, rows: int) -> str:
        h = _hash(key, seed, rows)
        return f"{h} >= {self.updates} AND {h} < {self.updates + self.deletes}"

    def updated_or_deleted(self, key: str, seed: int, rows: int) -> str:
        return f"{_hash(key, seed, rows)} < {self.updates + self.deletes}"


def _apply(
    spark: Any,
    table: str,
    key: str,
    rows: int,
    change: Change,
    seed: int,
    set_clause: str,
    insert_select: str,
) -> None:
    """Update, delete, then insert: three commits, as separate upstream statements would.

    Keys ``0 .. rows-1`` exist at the start; inserts take ``rows ..``.
    """
    if change.updates:
        spark.sql(f"UPDATE {table} SET {set_clause} WHERE {change.updated(key, seed, rows)}")
    if change.deletes:
        spark.sql(f"DELETE FROM {table} WHERE {change.deleted(key, seed, rows)}")
    if change.inserts:
        spark.sql(f"INSERT INTO {table} {insert_select}")


# --- projection: SELECT id, s, d FROM src ---------------------------------------------------


def build_projection(spark: Any, ns: str, rows: int, seed: int) -> None:
    spark.sql(
        f"CREATE TABLE ct.{ns}.src USING iceberg TBLPROPERTIES ({MOR}) AS "
        f"SELECT /*+ REPARTITION({INPUT_FILES}) */ id, {_text('id', seed, 16)} AS s, "
        f"{_double('id', seed + 1)} AS d FROM range({rows})"
    )


def change_projection(spark: Any, ns: str, rows: int, changed: int, seed: int) -> dict[str, int]:
    """Change about ``changed`` rows of ``src``; ``touched`` gets every changed id."""
    change = Change.of(changed)
    _apply(
        spark,
        f"ct.{ns}.src",
        "id",
        rows,
        change,
        seed,
        set_clause=f"s = {_text('id', seed + 2, 16)}, d = {_double('id', seed + 3)}",
        insert_select=(
            f"SELECT id, {_text('id', seed + 4, 16)} AS s, {_double('id', seed + 5)} AS d "
            f"FROM range({rows}, {rows + change.inserts})"
        ),
    )
    spark.sql(
        f"CREATE TABLE ct.{ns}.{TOUCHED} USING iceberg AS SELECT id AS k "
        f"FROM range({rows + change.inserts}) "
        f"WHERE {change.updated_or_deleted('id', seed, rows)} OR id >= {rows}"
    )
    return {"src": change.rows}


PROJECTION_SQL = "SELECT id, s, d FROM ct.{ns}.src"
PROJECTION_TOUCHED_SQL = (
    "SELECT id, s, d FROM ct.{ns}.src WHERE id IN (SELECT k FROM ct.{ns}." + TOUCHED + ")"
)


# --- join_agg: orders JOIN customers GROUP BY customer ----------------------------------------


def customers_for(orders: int) -> int:
    return max(1, orders // ORDERS_PER_CUSTOMER)


def build_join_agg(spark: Any, ns: str, rows: int, seed: int) -> None:
    """``rows`` orders over ``rows / 10`` customers, customer keys drawn at random."""
    customers = customers_for(rows)
    spark.sql(
        f"CREATE TABLE ct.{ns}.customers USING iceberg TBLPROPERTIES ({MOR}) AS "
        f"SELECT /*+ REPARTITION({INPUT_FILES}) */ id AS c_custkey, "
        f"{_text('id', seed, 18)} AS c_name, {_text('id', seed + 1, 40)} AS c_address, "
        f"{_price('id', seed + 2)} AS c_acctbal FROM range({customers})"
    )
    spark.sql(
        f"CREATE TABLE ct.{ns}.orders USING iceberg TBLPROPERTIES ({MOR}) AS "
        f"SELECT /*+ REPARTITION({INPUT_FILES}) */ id AS o_orderkey, "
        f"{_hash('id', seed + 3, customers)} AS o_custkey, "
        f"{_price('id', seed + 4)} AS o_totalprice, {_date('id', seed + 5)} AS o_orderdate, "
        f"{_text('id', seed + 6, 48)} AS o_comment FROM range({rows})"
    )


def change_join_agg(spark: Any, ns: str, rows: int, changed: int, seed: int) -> dict[str, int]:
    """Change about ``changed`` orders and the same share of customers.

    Half the updated orders move to another customer (two groups change), and
    inserted orders may belong to inserted customers (new groups); deleted
    customers take their groups with them. ``touched`` gets every customer
    key whose group may have changed: old and new customers of changed orders,
    and changed customers.
    """
    customers = customers_for(rows)
    orders_change = Change.of(changed)
    customers_change = Change.of(max(3, changed * customers // rows) if changed else 0)
    customers_after = customers + customers_change.inserts
    t_orders, t_customers = f"ct.{ns}.orders", f"ct.{ns}.customers"
    # Old customers of the orders about to change (known before the change, like a CDC feed).
    spark.sql(
        f"CREATE TABLE ct.{ns}.{TOUCHED}_raw USING iceberg AS SELECT o_custkey AS k "
        f"FROM {t_orders} WHERE {orders_change.updated_or_deleted('o_orderkey', seed, rows)} "
        f"UNION ALL SELECT id AS k FROM range({customers_after}) "
        f"WHERE {customers_change.updated_or_deleted('id', seed + 10, customers)} "
        f"OR id >= {customers}"
    )
    new_customer = _hash("o_orderkey", seed + 11, customers_after)
    _apply(
        spark,
        t_orders,
        "o_orderkey",
        rows,
        orders_change,
        seed,
        set_clause=(
            f"o_totalprice = {_price('o_orderkey', seed + 12)}, "
            f"o_orderdate = {_date('o_orderkey', seed + 13)}, "
            f"o_custkey = IF(pmod(o_orderkey, 2) = 0, {new_customer}, o_custkey)"
        ),
        insert_select=(
            f"SELECT id, {_hash('id', seed + 14, customers_after)}, {_price('id', seed + 15)}, "
            f"{_date('id', seed + 16)}, {_text('id', seed + 17, 48)} "
            f"FROM range({rows}, {rows + orders_change.inserts})"
        ),
    )
    _apply(
        spark,
        t_customers,
        "c_custkey",
        customers,
        customers_change,
        seed + 10,
        set_clause=f"c_name = {_text('c_custkey', seed + 18, 18)}",
        insert_select=(
            f"SELECT id, {_text('id', seed + 19, 18)}, {_text('id', seed + 20, 40)}, "
            f"{_price('id', seed + 21)} FROM range({customers}, {customers_after})"
        ),
    )
    # New customers of updated and inserted orders (orders keep their keys).
    spark.sql(
        f"INSERT INTO ct.{ns}.{TOUCHED}_raw SELECT o_custkey FROM {t_orders} "
        f"WHERE {orders_change.updated('o_orderkey', seed, rows)} OR o_orderkey >= {rows}"
    )
    spark.sql(
        f"CREATE TABLE ct.{ns}.{TOUCHED} USING iceberg AS "
        f"SELECT DISTINCT k FROM ct.{ns}.{TOUCHED}_raw"
    )
    return {"orders": orders_change.rows, "customers": customers_change.rows}


JOIN_AGG_SQL = (
    "SELECT c.c_custkey, c.c_name, SUM(o.o_totalprice) AS total_price, COUNT(*) AS order_count, "
    "MAX(o.o_orderdate) AS last_order_date "
    "FROM ct.{ns}.orders o JOIN ct.{ns}.customers c ON o.o_custkey = c.c_custkey "
    "GROUP BY c.c_custkey, c.c_name"
)
#: The dbt-incremental idiom: the same query over the touched groups only
#: (both sides filtered, as one would write it by hand).
JOIN_AGG_TOUCHED_SQL = (
    "SELECT c.c_custkey, c.c_name, SUM(o.o_totalprice) AS total_price, COUNT(*) AS order_count, "
    "MAX(o.o_orderdate) AS last_order_date "
    "FROM ct.{ns}.orders o JOIN ct.{ns}.customers c ON o.o_custkey = c.c_custkey "
    "WHERE o.o_custkey IN (SELECT k FROM ct.{ns}." + TOUCHED + ") "
    "AND c.c_custkey IN (SELECT k FROM ct.{ns}." + TOUCHED + ") "
    "GROUP BY c.c_custkey, c.c_name"
)


@dataclass(frozen=True)
class ViewCase:
    """One view of the bench: its query, its key, and how to make and change its inputs."""

    name: str
    #: The view's query, ``{ns}`` standing for the namespace.
    sql_template: str
    #: The query restricted to the keys in ``touched`` (baseline (c)).
    touched_sql_template: str
    #: Unique key of the view's rows (the group key; ``id`` for the projection).
    key: str
    #: Every other column.
    values: tuple[str, ...]
    #: ``build(spark, ns, rows, seed)`` creates the inputs.
    build: Callable[[Any, str, int, int], None]
    #: ``change(spark, ns, rows, changed_rows, seed)`` changes them, fills ``touched``
    #: and returns the rows changed per input.
    change: Callable[[Any, str, int, int, int], dict[str, int]]

    def sql(self, ns: str) -> str:
        return self.sql_template.format(ns=ns)

    def touched_sql(self, ns: str) -> str:
        return self.touched_sql_template.format(ns=ns)

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.key, *self.values)


PROJECTION = ViewCase(
    name="projection",
    sql_template=PROJECTION_SQL,
    touched_sql_template=PROJECTION_TOUCHED_SQL,
    key="id",
    values=("s", "d"),
    build=build_projection,
    change=change_projection,
)
JOIN_AGG = ViewCase(
    name="join_agg",
    sql_template=JOIN_AGG_SQL,
    touched_sql_template=JOIN_AGG_TOUCHED_SQL,
    key="c_custkey",
    values=("c_name", "total_price", "order_count", "last_order_date"),
    build=build_join_agg,
    change=change_join_agg,
)
VIEWS = {v.name: v for v in (PROJECTION, JOIN_AGG)}
