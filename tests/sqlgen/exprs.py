"""The generator's expressions: scalars, predicates, subqueries, aggregates and windows.

Split from :mod:`.generator` (which composes relations) so each stays small.
Every choice here keeps the query's meaning the same in Spark and DuckDB
(see the generator's docstring): no division, typed literals where a type
matters, explicit NULL order, scalar subqueries that are aggregates
without ``GROUP BY``, no bare literal in ``GROUP BY`` (Spark reads an
integer there as a column position).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tests.sqlgen.schema import DATE, DBL, DEC, INT, STR

Cols = tuple[tuple[str, str], ...]
#: (the select item's alias, its SQL, its type)
Item = tuple[str, str, str]


@dataclass(frozen=True)
class Col:
    """A column in scope: its qualified reference (``t3.k1``) and type."""

    sql: str
    type: str

    @property
    def name(self) -> str:
        return self.sql.rsplit(".", 1)[-1]


LITERALS = {INT: "2", DEC: "CAST(1.25 AS DECIMAL(9,2))", STR: "'k'", DATE: "DATE '2024-03-02'"}


def _usable(scope: list[Col]) -> list[Col]:
    return [c for c in scope if c.type != DBL]


class Exprs:
    """Random expressions over a scope; ``features`` collects what the query composed."""

    def __init__(self, rng: random.Random, subquery_source: Callable[[], tuple[str, str, Cols]]):
        self.rng = rng
        #: A table or CTE for a subquery: (text with alias, alias, columns).
        self.subquery_source = subquery_source
        self.features: set[str] = set()

    def pick(self, scope: list[Col], kind: str | None = None) -> Col | None:
        pool = [c for c in _usable(scope) if kind is None or c.type == kind]
        return self.rng.choice(pool) if pool else None

    def direction(self) -> str:
        return f"{self.rng.choice(('ASC', 'DESC'))} NULLS {self.rng.choice(('FIRST', 'LAST'))}"

    # -- scalars ----------------------------------------------------------------------------
    def expr(self, scope: list[Col], kind: str) -> str:
        """An expression of type ``kind``: mostly a column, sometimes a function of one."""
        col = self.pick(scope, kind)
        if col is None:
            strings = self.pick(scope, STR)
            if kind == INT and strings is not None:
                return f"LENGTH({strings.sql})"
            return LITERALS[kind]
        c = col.sql
        if self.rng.random() < 0.6:
            return c
        k = self.rng.randint(-2, 5)
        options = {
            INT: [f"{c} + {k}", f"{c} * 2", f"COALESCE({c}, {k})", f"ABS({c})"],
            DEC: [f"{c} * 2", f"{c} + 1.50", f"COALESCE({c}, 0.00)"],
            STR: [f"UPPER({c})", f"COALESCE({c}, 'none')", f"SUBSTRING({c}, 1, 1)", f"{c} || '_'"],
            DATE: [f"COALESCE({c}, DATE '2024-03-02')"],
        }[kind]
        if kind == INT and self.rng.random() < 0.2:
            return f"CASE WHEN {self.simple(scope)} THEN {c} ELSE {k} END"
        return self.rng.choice(options)

    def simple(self, scope: list[Col]) -> str:
        """A comparison of one column with constants (NULLs in ``IN`` lists included)."""
        col = self.pick(scope)
        if col is None:
            return "1 = 1"
        c, k = col.sql, self.rng.randint(-1, 6)
        if self.rng.random() < 0.12:
            return f"{c} IS {self.rng.choice(('', 'NOT '))}NULL"
        options = {
            INT: [
                f"{c} {self.rng.choice(('=', '<>', '<', '<=', '>', '>='))} {k}",
                f"{c} IN (1, 2, NULL)",
                f"{c} NOT IN (1, 3)",
                f"{c} BETWEEN 1 AND 4",
            ],
            STR: [f"{c} = 'a'", f"{c} LIKE 'a%'", f"{c} IN ('a', 'c')", f"{c} <> 'b'"],
            DEC: [f"{c} > 20.00", f"{c} <= 5.50"],
            DATE: [f"{c} >= DATE '2024-03-02'", f"{c} = DATE '2024-03-01'"],
        }[col.type]
        return self.rng.choice(options)

    def predicate(self, scope: list[Col]) -> str:
        r = self.rng.random()
        if r < 0.12:
            self.features.add("or")
            return f"({self.simple(scope)} OR {self.simple(scope)})"
        if r < 0.2:
            return f"NOT ({self.simple(scope)})"
        ints = [c for c in scope if c.type == INT]
        if r < 0.28 and len(ints) > 1:
            a, b = self.rng.sample(ints, 2)
            return f"{a.sql} {self.rng.choice(('=', '<', '<>'))} {b.sql}"
        return self.simple(scope)

    def join_condition(self, left: list[Col], right: list[Col]) -> str:
        """Equal integer columns (same names first), sometimes with a filter in ``ON``."""
        li = [c for c in left if c.type == INT]
        ri = [c for c in right if c.type == INT]
        same = [(a, b) for a in li for b in ri if a.name == b.name]
        if same and self.rng.random() < 0.8:
            a, b = self.rng.choice(same)
        elif li and ri:
            a, b = self.rng.choice(li), self.rng.choice(ri)
        else:
            a, b = self.rng.choice(_usable(left)), self.rng.choice(_usable(right))
            if a.type != b.type:
                return "1 = 1"
        on = f"{a.sql} = {b.sql}"
        if self.rng.random() < 0.25:
            self.features.add("join_filter_in_on")
            on += f" AND {self.simple(right)}"
        return on

    # -- subqueries -------------------------------------------------------------------------
    def subquery_predicate(self, scope: list[Col]) -> str:
        """``[NOT] EXISTS``, ``[NOT] IN`` or a comparison with a scalar subquery."""
        outer = self.pick(scope, INT)
        if outer is None:
            return self.predicate(scope)
        text, x, cols = self.subquery_source()
        inner = [Col(f"{x}.{n}", t) for n, t in cols]
        ic = self.rng.choice([c for c in inner if c.type == INT]).sql
        other = self.rng.choice([c for c in inner if c.type == INT]).sql
        filt = self.simple(inner) if self.rng.random() < 0.5 else ""
        where, also = (f" WHERE {filt}", f" AND {filt}") if filt else ("", "")
        op = self.rng.choice(("=", "<", ">", "<=", ">=", "<>"))
        agg = self.rng.choice(("MAX", "MIN", "SUM", "AVG"))
        kind = self.rng.choice(
            ("exists", "not_exists", "in", "not_in", "scalar", "scalar_corr", "count_corr")
        )
        self.features.add(kind)
        o = outer.sql
        return {
            "exists": f"EXISTS (SELECT 1 FROM {text} WHERE {ic} = {o}{also})",
            "not_exists": f"NOT EXISTS (SELECT 1 FROM {text} WHERE {ic} = {o}{also})",
            "in": f"{o} IN (SELECT {ic} FROM {text}{where})",
            "not_in": f"{o} NOT IN (SELECT {ic} FROM {text}{where})",
            "scalar": f"{o} {op} (SELECT {agg}({other}) FROM {text}{where})",
            "scalar_corr": f"{o} {op} (SELECT {agg}({other}) FROM {text} WHERE {ic} = {o}{also})",
            "count_corr": f"(SELECT COUNT(*) FROM {text} WHERE {ic} = {o}{also}) {op} 1",
        }[kind]

    def scalar_select(self, scope: list[Col]) -> Item | None:
        """A correlated scalar subquery as an output column (zero rows: COUNT 0, MAX NULL)."""
        outer = self.pick(scope, INT)
        if outer is None:
            return None
        text, x, cols = self.subquery_source()
        ints = [f"{x}.{n}" for n, t in cols if t == INT]
        fn = self.rng.choice(("COUNT(*)", f"MAX({self.rng.choice(ints)})"))
        self.features.add("scalar_subquery_select")
        tie = self.rng.choice(ints)
        return ("cs", f"(SELECT {fn} FROM {text} WHERE {tie} = {outer.sql})", INT)

    # -- select lists -----------------------------------------------------------------------
    def projection(self, scope: list[Col], n: int, scalar: bool) -> list[Item]:
        items: list[Item] = []
        for i in range(n):
            col = self.pick(scope)
            kind = col.type if col is not None else INT
            items.append((f"c{i}", self.expr(scope, kind), kind))
        extra = self.scalar_select(scope) if scalar and self.rng.random() < 0.12 else None
        return items + ([extra] if extra else [])

    def windows(self, scope: list[Col]) -> list[Item]:
        """One or two window functions, partitioned or over the whole input."""
        items: list[Item] = []
        for i in range(self.rng.randint(1, 2)):
            part = self.pick(scope) if self.rng.random() < 0.7 else None
            self.features.add("window_partitioned" if part else "window_global")
            over = f"PARTITION BY {part.sql}" if part else ""
            order = self.pick(scope)
            ordered = f"{over} ORDER BY {order.sql if order else 1} {self.direction()}".strip()
            value = self.pick(scope, INT) or Col("1", INT)
            any_col = self.pick(scope) or Col("1", INT)
            fn, kind = self.rng.choice(
                (
                    (f"SUM({value.sql}) OVER ({over})", INT),
                    (f"COUNT(*) OVER ({over})", INT),
                    (
                        f"{self.rng.choice(('MIN', 'MAX'))}({any_col.sql}) OVER ({over})",
                        any_col.type,
                    ),
                    (f"{self.rng.choice(('RANK', 'DENSE_RANK'))}() OVER ({ordered})", INT),
                    (f"SUM({value.sql}) OVER ({ordered})", INT),
                )
            )
            self.features.add("window_ordered" if "ORDER BY" in fn else "window_unordered")
            items.append((f"w{i}", fn, kind))
        return items

    def aggregate_call(self, scope: list[Col], allow_avg: bool) -> tuple[str, str]:
        """One aggregate function call and its type."""
        col = self.pick(scope)
        ints = self.pick(scope, INT)
        decs = self.pick(scope, DEC)
        choices: list[tuple[str, str]] = [("COUNT(*)", INT)]
        if col is not None:
            choices += [
                (f"COUNT({col.sql})", INT),
                (f"{self.rng.choice(('MIN', 'MAX'))}({col.sql})", col.type),
                (f"COUNT(DISTINCT {col.sql})", INT),
            ]
        if ints is not None:
            choices += [(f"SUM({ints.sql})", INT)] * 2
            if allow_avg:
                choices.append((f"AVG({ints.sql})", DBL))
        if decs is not None:
            choices.append((f"SUM({decs.sql})", DEC))
        sql, kind = self.rng.choice(choices)
        self.features.add("agg_" + sql.split("(")[0].lower() + ("_distinct" * ("DISTINCT" in sql)))
        return sql, kind

    # -- aggregate blocks -------------------------------------------------------------------
    def aggregate(self, scope: list[Col], over: bool) -> tuple[str, Cols, str]:
        """``GROUP BY`` keys (or none), aggregates, ``HAVING``; ``over``: a window over them."""
        typed: dict[str, str] = {}  # key -> its type (the column's it was made from)
        for _ in range(self.rng.choice((1, 1, 2, 2) if over else (0, 1, 1, 2, 2))):
            col = self.pick(scope)
            if col is not None:
                key = col.sql if self.rng.random() < 0.75 else self.expr(scope, col.type)
                typed.setdefault(key, col.type)
        keys = list(typed)
        self.features.add("group_by" if keys else "aggregate_no_group_by")
        items: list[Item] = [(f"g{i}", k, typed[k]) for i, k in enumerate(keys)]
        if items and self.rng.random() < 0.12:
            self.features.add("group_key_not_output")
            items.pop(self.rng.randrange(len(items)))
        calls = [self.aggregate_call(scope, allow_avg=i > 0) for i in range(self.rng.randint(1, 3))]
        items += [(f"a{i}", sql, kind) for i, (sql, kind) in enumerate(calls)]
        if over:
            items.append(self.window_over(calls[0], keys))
        tail = f" GROUP BY {', '.join(keys)}" if keys else ""
        if self.rng.random() < 0.25:
            self.features.add("having")
            tail += f" HAVING {self.having(scope)}"
        select = ", ".join(f"{sql} AS {name}" for name, sql, _ in items)
        return select, tuple((name, kind) for name, _, kind in items), tail

    def having(self, scope: list[Col]) -> str:
        ints = self.pick(scope, INT)
        options = [f"COUNT(*) > {self.rng.randint(0, 2)}"]
        if ints is not None:
            options += [
                f"SUM({ints.sql}) >= {self.rng.randint(-2, 8)}",
                f"MAX({ints.sql}) IS NOT NULL",
                f"COUNT(DISTINCT {ints.sql}) > 1 OR MIN({ints.sql}) IS NULL",
            ]
        return self.rng.choice(options)

    def window_over(self, first: tuple[str, str], keys: list[str]) -> Item:
        """A window over the block's first aggregate: a rank, a share of all, per partition."""
        self.features.add("window_over_aggregate")
        agg, kind = first
        part = f"PARTITION BY {keys[0]}" if keys and len(keys) > 1 else ""
        if kind not in (INT, DEC) or self.rng.random() < 0.4:
            return ("r", f"RANK() OVER (ORDER BY {agg} {self.direction()})", INT)
        fn = self.rng.choice(("SUM", "MAX"))
        return ("r", f"{fn}({agg}) OVER ({part})", kind)

    def grouping_sets(self, scope: list[Col]) -> tuple[str, Cols, str]:
        """``ROLLUP``, ``CUBE`` or ``GROUPING SETS`` over two columns."""
        distinct = list({c.sql: c for c in _usable(scope)}.values())
        if len(distinct) < 2:
            return self.aggregate(scope, over=False)
        a, b = self.rng.sample(distinct, 2)
        kind = self.rng.choice(("ROLLUP", "CUBE", "SETS3", "SETS2"))
        self.features.add("grouping_" + kind.lower())
        group = {
            "ROLLUP": f"ROLLUP ({a.sql}, {b.sql})",
            "CUBE": f"CUBE ({a.sql}, {b.sql})",
            "SETS3": f"GROUPING SETS (({a.sql}, {b.sql}), ({a.sql}), ())",
            "SETS2": f"GROUPING SETS (({a.sql}), ({b.sql}))",
        }[kind]
        items: list[Item] = [("g0", a.sql, a.type), ("g1", b.sql, b.type)]
        calls = [self.aggregate_call(scope, allow_avg=i > 0) for i in range(self.rng.randint(1, 2))]
        items += [(f"a{i}", sql, k) for i, (sql, k) in enumerate(calls)]
        if self.rng.random() < 0.35:  # alone, or summed as TPC-DS q70/q86's lochierarchy
            self.features.add("grouping_function")
            both = f"GROUPING({a.sql}) + GROUPING({b.sql})"
            items.append(("gr", self.rng.choice((f"GROUPING({a.sql})", both)), INT))
        select = ", ".join(f"{sql} AS {name}" for name, sql, _ in items)
        # The empty grouping set over no rows: DuckDB (as the SQL standard) gives one row
        # of empty aggregates, Spark none. Keeping only groups with rows means one thing.
        having = " HAVING COUNT(*) > 0" if kind != "SETS2" else ""
        return select, tuple((name, k) for name, _, k in items), f" GROUP BY {group}{having}"

    def typed_aggregate(self, scope: list[Col], types: list[str]) -> tuple[str, str]:
        """A set operation's aggregate branch: a key of ``types[0]``, aggregates of the rest."""
        key = self.expr(scope, types[0])
        items = [f"{key} AS c0"]
        for i, kind in enumerate(types[1:], start=1):
            if kind == INT:
                ints = self.pick(scope, INT)
                call = f"SUM({ints.sql})" if ints and self.rng.random() < 0.5 else "COUNT(*)"
            else:
                call = f"{self.rng.choice(('MIN', 'MAX'))}({self.expr(scope, kind)})"
            items.append(f"{call} AS c{i}")
        self.features.add("set_branch_aggregate")
        if key in LITERALS.values():  # Spark reads ``GROUP BY 2`` as a column position
            return ", ".join(items), ""
        return ", ".join(items), f" GROUP BY {key}"
