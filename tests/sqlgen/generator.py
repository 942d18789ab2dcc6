"""A seeded random generator of view queries over :mod:`.schema`'s three inputs.

It composes the operators issue 58 asks incremental maintenance to compose
over: scans, filters, projections, inner/left/right/full outer and comma
joins, semi- and anti-joins (``EXISTS``, ``NOT EXISTS``, ``IN``, ``NOT IN``
over columns with NULLs, scalar subqueries, correlated or not, in ``WHERE``
and in the select list), aggregates (``SUM``, ``COUNT``, ``AVG``, ``MIN``,
``MAX``, ``COUNT(DISTINCT)``, with and without ``GROUP BY``, ``HAVING``),
``GROUPING SETS``/``ROLLUP``/``CUBE``, ``DISTINCT``, ``UNION [ALL]``,
``INTERSECT [ALL]``, ``EXCEPT [ALL]``, windows (partitioned or not, ranks,
running sums, over an aggregate), top-k (``ORDER BY ... LIMIT`` and
``ROW_NUMBER``/``RANK`` per partition), CTEs (read once or twice) and derived
tables nested to any depth.

Why each query means the same in Spark and DuckDB (the oracle), so results
compare exactly: no division (integer division differs), no ``DOUBLE`` but
``AVG`` of integers (compared rounded), every ``ORDER BY`` spells its NULL
order, an ``ORDER BY ... LIMIT`` orders by every output column (rows it
cannot tell apart are equal rows), ``ROW_NUMBER`` only numbers rows whose
every output column it orders by, string functions only where NULL means
the same (``||``, not ``concat``), and scalar subqueries are aggregates
without ``GROUP BY`` (one row always).

Deterministic: query ``i`` of seed ``s`` is a function of ``(s, i)`` alone,
so any query of a long run is generated again from its two numbers.
Tables are written ``{f}``, ``{d1}``, ``{d2}``; :meth:`Generated.sql` names them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from tests.sqlgen.exprs import Col, Exprs
from tests.sqlgen.schema import BY_NAME, DATE, DBL, DEC, INT, STR, TABLES

Cols = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sub:
    """A generated query or block: its text and its output columns (name, type)."""

    sql: str
    cols: Cols


@dataclass(frozen=True)
class Generated:
    """One generated query: how to make it again, its text, what it reads and composes."""

    seed: int
    index: int
    template: str
    tables: frozenset[str]
    features: tuple[str, ...]

    def sql(self, names: Mapping[str, str]) -> str:
        """The query over the given table names (``f``/``d1``/``d2`` -> qualified name)."""
        return self.template.format(**names)


def generate(seed: int, index: int) -> Generated:
    """Query ``index`` of ``seed`` (independent of every other index)."""
    builder = _Builder(random.Random(f"sqlgen:{seed}:{index}"))
    template = builder.top()
    return Generated(
        seed, index, template, frozenset(builder.tables), tuple(sorted(builder.exprs.features))
    )


class _Builder:
    """Builds one query; knows the CTEs defined so far and the aliases used."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.exprs = Exprs(rng, self.subquery_source)
        self.tables: set[str] = set()
        self.ctes: dict[str, Cols] = {}
        self.cte_reads: dict[str, int] = {}
        self.aliases = 0
        #: Set once the CTEs are defined: the outermost relation's first source reads one.
        self.read_cte = False

    def feature(self, name: str) -> None:
        self.exprs.features.add(name)

    def alias(self) -> str:
        self.aliases += 1
        return f"t{self.aliases}"

    # -- the query and its relations --------------------------------------------------------
    def top(self) -> str:
        """``[WITH ...]`` and the outermost relation."""
        parts = []
        if self.rng.random() < 0.3:
            for i in range(self.rng.choice((1, 1, 2))):
                sub = self.relation(1, top=False)
                name = f"c{i}"
                self.ctes[name], self.cte_reads[name] = sub.cols, 0
                parts.append(f"{name} AS ({sub.sql})")
        self.read_cte = bool(parts)
        body = self.relation(self.rng.choices((0, 1, 2), (4, 4, 2))[0], top=True)
        if not parts:
            return body.sql
        reads = max(self.cte_reads.values())
        self.feature("cte" if reads < 2 else "cte_read_twice")
        if len(parts) == 2:
            self.feature("two_ctes")
        return "WITH " + ", ".join(parts) + " " + body.sql

    def relation(self, depth: int, top: bool) -> Sub:
        r = self.rng.random()
        if r < 0.12:
            return self.set_operation(depth)
        if r < 0.22:
            return self.top_k_per_partition(depth)
        return self.block(depth, top)

    def source(self, depth: int) -> tuple[str, str, Cols]:
        """A ``FROM`` item: (its text, its alias, its columns)."""
        alias = self.alias()
        kinds = ["table"] * 5 + ["cte"] * (4 if self.ctes else 0) + ["derived"] * (2 * depth)
        kind = "cte" if self.read_cte else self.rng.choice(kinds)
        self.read_cte = False
        if kind == "derived":
            sub = self.relation(depth - 1, top=False)
            self.feature("derived_table" if depth < 2 else "derived_table_nested")
            return f"({sub.sql}) AS {alias}", alias, sub.cols
        name, cols = self.named_source(cte_weight=1000 if kind == "cte" else 0)
        return f"{name} AS {alias}", alias, cols

    def named_source(self, cte_weight: int) -> tuple[str, Cols]:
        """A base table or (with ``cte_weight``) a CTE: its name in the query and its columns."""
        if self.ctes and self.rng.random() < cte_weight / (cte_weight + 3):
            name = self.rng.choice(sorted(self.ctes))
            self.cte_reads[name] += 1
            return name, self.ctes[name]
        table = self.rng.choices(TABLES, (3, 2, 1))[0]
        self.tables.add(table.name)
        return "{" + table.name + "}", table.columns

    def subquery_source(self) -> tuple[str, str, Cols]:
        """The table (or CTE) a subquery of ``WHERE`` or the select list reads."""
        alias = self.alias()
        name, cols = self.named_source(cte_weight=2)
        if not any(t == INT for _, t in cols):  # a subquery ties by an integer column
            name, cols = "{d1}", BY_NAME["d1"].columns
            self.tables.add("d1")
        return f"{name} AS {alias}", alias, cols

    def from_clause(self, depth: int) -> tuple[str, list[Col], list[str]]:
        """``FROM`` with its joins: the text, the columns in scope, conjuncts for ``WHERE``."""
        text, alias, cols = self.source(depth)
        scope = [Col(f"{alias}.{n}", t) for n, t in cols]
        conjuncts: list[str] = []
        for _ in range(self.rng.choices((0, 1, 2), (5, 4, 1))[0]):
            right, r_alias, r_cols = self.source(depth)
            right_scope = [Col(f"{r_alias}.{n}", t) for n, t in r_cols]
            on = self.exprs.join_condition(scope, right_scope)
            kind = self.rng.choices(
                ("JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", ","), (4, 3, 1, 1, 2)
            )[0]
            self.feature({"JOIN": "inner_join", ",": "comma_join"}.get(kind, kind.lower()[:-5]))
            if kind == ",":
                text += f", {right}"
                conjuncts.append(on)
            else:
                self.feature("outer_join" if kind != "JOIN" else "join")
                text += f" {kind} {right} ON {on}"
            scope += right_scope
        return text, scope, conjuncts

    def where(self, scope: list[Col], conjuncts: list[str]) -> str:
        preds = list(conjuncts)
        for _ in range(self.rng.choices((0, 1, 2), (3, 5, 2))[0]):
            if self.rng.random() < 0.35:
                preds.append(self.exprs.subquery_predicate(scope))
            else:
                preds.append(self.exprs.predicate(scope))
        return f" WHERE {' AND '.join(preds)}" if preds else ""

    # -- a SELECT block ---------------------------------------------------------------------
    def block(self, depth: int, top: bool) -> Sub:
        text, scope, conjuncts = self.from_clause(depth)
        where = self.where(scope, conjuncts)
        shape = self.rng.choices(
            ("project", "aggregate", "grouping", "distinct", "window", "window_agg"),
            (4, 5, 1, 1, 2, 1),
        )[0]
        select, cols, tail = self.select_list(shape, scope)
        sql = f"SELECT {select} FROM {text}{where}{tail}"
        if self.rng.random() < (0.25 if top else 0.08):
            sql += self.order_limit(cols)
        return Sub(sql, cols)

    def select_list(self, shape: str, scope: list[Col]) -> tuple[str, Cols, str]:
        """The select list of a block of ``shape``, its columns, and what follows ``WHERE``."""
        if shape in ("aggregate", "window_agg"):
            return self.exprs.aggregate(scope, over=shape == "window_agg")
        if shape == "grouping":
            return self.exprs.grouping_sets(scope)
        items = self.exprs.projection(scope, self.rng.randint(1, 3), scalar=shape == "project")
        if shape == "window":
            items += self.exprs.windows(scope)
        select = ", ".join(f"{sql} AS {name}" for name, sql, _ in items)
        if shape == "distinct":
            self.feature("distinct")
            select = "DISTINCT " + select
        return select, tuple((name, t) for name, _, t in items), ""

    def order_limit(self, cols: Cols) -> str:
        """``ORDER BY`` every output column (a total order up to equal rows) ``LIMIT n``."""
        self.feature("order_by_limit")
        keys = [
            f"{n} {self.rng.choice(('ASC', 'DESC'))} NULLS {self.rng.choice(('FIRST', 'LAST'))}"
            for n, _ in self.rng.sample(cols, len(cols))
        ]
        return f" ORDER BY {', '.join(keys)} LIMIT {self.rng.randint(1, 6)}"

    # -- set operations and top-k per partition --------------------------------------------
    def set_operation(self, depth: int) -> Sub:
        types = [self.rng.choice((INT, INT, STR, DEC, DATE)) for _ in range(self.rng.randint(1, 3))]
        left = self.typed_block(depth, types)
        right = self.typed_block(depth, types)
        op = self.rng.choices(
            ("UNION ALL", "UNION", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"),
            (4, 3, 2, 2, 1, 1),
        )[0]
        self.feature(op.lower().replace(" ", "_"))
        return Sub(f"{left} {op} {right}", tuple((f"c{i}", t) for i, t in enumerate(types)))

    def typed_block(self, depth: int, types: list[str]) -> str:
        """A branch of a set operation: a block whose columns have ``types``, named ``c0``..."""
        text, scope, conjuncts = self.from_clause(max(depth - 1, 0))
        where = self.where(scope, conjuncts)
        if self.rng.random() < 0.3:
            select, group = self.exprs.typed_aggregate(scope, types)
            return f"SELECT {select} FROM {text}{where}{group}"
        items = [f"{self.exprs.expr(scope, t)} AS c{i}" for i, t in enumerate(types)]
        distinct = "DISTINCT " if self.rng.random() < 0.15 else ""
        return f"SELECT {distinct}{', '.join(items)} FROM {text}{where}"

    def top_k_per_partition(self, depth: int) -> Sub:
        """The first rows per partition by ``ROW_NUMBER`` (over every output column) or a rank."""
        text, scope, conjuncts = self.from_clause(max(depth - 1, 0))
        where = self.where(scope, conjuncts)
        usable = [c for c in scope if c.type != DBL] or [Col("1", INT)]
        part = self.rng.choice(usable)
        order = self.rng.sample(usable, min(len(usable), self.rng.randint(1, 2)))
        by = ", ".join(
            f"{c.sql} {self.rng.choice(('ASC', 'DESC'))} NULLS {self.rng.choice(('FIRST', 'LAST'))}"
            for c in order
        )
        shown = [part, *order]
        fn = "ROW_NUMBER()"
        if self.rng.random() < 0.4:
            fn = self.rng.choice(("RANK()", "DENSE_RANK()"))
            shown += self.rng.sample(usable, min(len(usable), 1))  # ranks tie: any column
        self.feature("topk_" + fn[:-2].lower())
        names = [f"p{i}" for i in range(len(shown))]
        inner = ", ".join(f"{c.sql} AS {n}" for c, n in zip(shown, names, strict=True))
        alias = self.alias()
        sql = (
            f"SELECT {', '.join(names)}, rn FROM (SELECT {inner}, {fn} OVER (PARTITION BY "
            f"{part.sql} ORDER BY {by}) AS rn FROM {text}{where}) AS {alias} "
            f"WHERE rn <= {self.rng.randint(1, 3)}"
        )
        return Sub(sql, (*((n, c.type) for n, c in zip(names, shown, strict=True)), ("rn", INT)))
