"""A query no rule maintains whole, split into parts that are maintained, and the query over them.

The planner's rules match a shape at the top of a query; a ``WITH`` clause
or a derived table they do not know made the whole view run in full, even
where each CTE alone is an aggregate or a join the rules maintain. Here
such a query is taken apart, as a person would write it as a pipeline:

* every CTE of the query's ``WITH`` (in order: a later one may read an
  earlier one) and every derived table in a ``FROM`` or ``JOIN`` (outside
  ``WHERE``/select-list subqueries, which may be correlated) becomes a
  **part**: a query of its own, kept in a table of the view
  (``<target>__ct_part_<digest>``) and maintained by the same planner and
  write job as any view, pinned to the same input snapshots as the tick;
* a query or part that reads inputs and that no strategy maintains whole
  is reshaped the same way: a set operation into its branches (each a
  part, then the operation over them), a grouped select into its groups
  (a part, :mod:`.aggregate_split`; with ``ROLLUP``/``CUBE``/``GROUPING
  SETS``, its finest groups, :mod:`.grouping_sets_split`) and the rest of
  it over them, an
  ungrouped select with windows, ``DISTINCT`` or ``ORDER BY ... LIMIT``
  into the rows they read (a part, :mod:`.rows_split`) and the rest;
* the query that is left reads the parts as tables: the write job plans
  it over them like any query (a join of parts, a projection of one, a
  grouping of one are maintained from the parts' changes, which the view's
  batches pin in ``ct.parts``), else recomputes it in full over them.

A part is kept only when its columns are named (every select item an alias
or a column, ``*`` only from one source, no two alike, no untyped
``NULL``): its table needs typed, named columns, and the query over it
must find the names it used. The split is worth it only when every part
that reads an input of the view is maintained incrementally; otherwise
that part would be recomputed in full over the inputs, and the split would
cost what a full refresh costs, plus the parts' writes. Then
:func:`compose` says why not, and the view runs in full as before.

Why parts are tables and not the operators' state in memory: a part's
table is written exactly once per tick by compare-and-append, carries the
pins it reflects, outlives the job, and can be as large as the lakehouse.
Nothing here needs Spark: the split is SQL to SQL (sqlglot), decided where
the planner is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import nondeterministic_calls, parse_query
from airflow_provider_ct.core.tables import is_part_of, part_table_name
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.ivm.plan.aggregate_split import GROUPS_ALIAS, split_groups
from airflow_provider_ct.ivm.plan.grouping_sets_split import SETS_ALIAS, split_grouping_sets
from airflow_provider_ct.ivm.plan.partitions_split import PARTITIONS_ALIAS, split_partitions
from airflow_provider_ct.ivm.plan.planner import InputColumns, Plan, plan_query
from airflow_provider_ct.ivm.plan.rows_split import ROWS_ALIAS, split_rows
from airflow_provider_ct.ivm.plan.select_shape import is_count_star

#: The strategy a composed tick reports (and records as ``ct.refresh``).
COMPOSED = "composed"


#: How a select no strategy maintains is cut, in order: what the part below holds, the
#: alias the rest reads it under, and whether the cut is only worth it when a strategy
#: maintains the part (else the next cut is tried).
_SELECT_SPLITS = (
    (split_grouping_sets, "finest groups", SETS_ALIAS, False),
    (split_groups, "groups", GROUPS_ALIAS, False),
    (split_partitions, "partitions", PARTITIONS_ALIAS, True),
    (split_rows, "rows", ROWS_ALIAS, False),
)


class _NotSplit(Exception):
    """Why a query is not taken apart (the message is the reason)."""


@dataclass(frozen=True)
class Part:
    """A CTE or derived table kept in a table of the view, and its own plan."""

    table: str
    sql: str
    #: What the part read as written (``WITH c AS``: ``c``; a derived table: its alias).
    label: str
    plan: Plan
    #: Whether it reads an input of the view (not only other parts).
    reads_inputs: bool


@dataclass(frozen=True)
class Composition:
    """The parts, in the order they are ticked, and the query over them."""

    parts: tuple[Part, ...]
    sql: str
    #: The plan of the query over the parts (the write job plans it again, knowing the
    #: parts' columns).
    top: Plan

    def explain(self) -> list[str]:
        lines = [f"composed of {len(self.parts)} part(s), each kept in a table of the view:"]
        for part in self.parts:
            plan = part.plan
            lines.append(f"  {part.label} -> {part.table}: {plan.strategy} ({plan.reason})")
        top = self.top
        if top.incremental:
            lines.append(f"the query over the parts, from their changes: {top.strategy}")
            lines.extend(f"  {step}" for step in top.steps)
        else:
            lines.append(f"the query over the parts, recomputed in full over them ({top.reason})")
        return lines

    @property
    def reason(self) -> str:
        kept = ", ".join(f"{p.label} ({p.plan.strategy})" for p in self.parts)
        return f"{len(self.parts)} part(s) maintained in tables of the view ({kept})"


def compose(
    sql: str, target: str, catalog_name: str, columns: InputColumns | None = None
) -> Composition | str:
    """The query split into maintained parts and the query over them, or why not.

    :param columns: the inputs' column names, where known (the write job knows
        them): each part is planned with them, as its own tick will plan it.
    """
    try:
        tree = parse_query(sql, target=target, catalog_name=catalog_name).expression
        calls = nondeterministic_calls(tree)
        if calls:
            raise _NotSplit(f"the query calls nondeterministic functions {calls}")
        splitter = _Splitter(target, catalog_name, columns)
        top = splitter.reshaped(splitter.split(tree.copy()), "the query")
        if not splitter.parts:
            raise _NotSplit("no CTE or derived table to keep apart")
        top = splitter.inline_unneeded(top)
        parts = tuple(splitter.parts.values())
        full = [p for p in parts if p.reads_inputs and not p.plan.incremental]
        if full:
            first = full[0]
            raise _NotSplit(
                f"the part {first.label} would be recomputed in full: {first.plan.reason}"
            )
        top_sql = top.sql(dialect="spark")
        top_plan = plan_query(
            parse_query(top_sql, target=target, catalog_name=catalog_name), columns
        )
    except (_NotSplit, QueryError) as exc:
        return f"not split into parts: {exc}"
    return Composition(parts, top_sql, top_plan)


class _Splitter:
    """Walks a query, turning its CTEs and derived tables into parts (deduplicated by SQL)."""

    def __init__(self, target: str, catalog_name: str, columns: InputColumns | None) -> None:
        self.target, self.catalog_name, self.columns = target, catalog_name, columns
        self.parts: dict[str, Part] = {}

    def split(self, tree: Any) -> Any:
        """``tree`` (a copy the caller owns) reading parts for its CTEs and derived tables."""
        tree = self._split_ctes(tree)
        for sub in list(tree.find_all(exp.Subquery)):
            if sub.root() is not tree or not _derived_table(sub):
                continue
            alias = sub.args.get("alias")
            if alias is not None and alias.args.get("columns"):
                raise _NotSplit(f"the derived table {sub.alias} names its columns in its alias")
            label = sub.alias or "a derived table"
            table = self._part(sub.this.copy(), label)
            sub.replace(_table_node(table, sub.alias))
        return tree

    def _split_ctes(self, tree: Any) -> Any:
        with_ = tree.args.get("with_") or tree.args.get("with")
        if with_ is None:
            return tree
        if with_.args.get("recursive"):
            raise _NotSplit("a recursive WITH is not taken apart")
        names: dict[str, str] = {}
        for cte in with_.expressions:
            if cte.args.get("alias") is not None and cte.args["alias"].args.get("columns"):
                raise _NotSplit(f"the CTE {cte.alias} names its columns in its alias")
            body = _renamed(cte.this.copy(), names)
            names[cte.alias.lower()] = self._part(body, cte.alias)
        tree.set("with_", None)
        tree.set("with", None)
        return _renamed(tree, names)

    def reshaped(self, tree: Any, label: str) -> Any:
        """``tree`` over parts of its own when it reads an input and no strategy maintains it
        whole: a set operation over its branches, a grouped select over its groups
        (:mod:`.aggregate_split`), a windowed one over its rows with the partition keys
        (:mod:`.partitions_split`) or over the rows its windows or limit read
        (:mod:`.rows_split`); else ``tree`` itself."""
        if not self._reads_inputs(tree):
            return tree
        if self._maintained(tree):
            return tree
        if isinstance(tree, exp.SetOperation):
            return self._branches(tree, label)
        if not isinstance(tree, exp.Select):
            return tree
        for splitter, what, alias, only_maintained in _SELECT_SPLITS:
            split = splitter(tree)
            if split is None or (only_maintained and not self._maintained(split[0])):
                continue
            below, rest = split
            table = self._part(below, f"the {what} of {label}", own_groups=True)
            placeholder = next(t for t in rest.find_all(exp.Table) if t.name == alias)
            placeholder.replace(_table_node(table, alias))
            return rest
        return tree

    def _maintained(self, tree: Any) -> bool:
        """Whether a strategy maintains ``tree`` whole."""
        parsed = parse_query(tree.sql(dialect="spark"), catalog_name=self.catalog_name)
        return plan_query(parsed, self.columns).incremental

    def _branches(self, tree: Any, label: str) -> Any:
        """The set operation with each branch a part: ``SELECT * FROM <part>`` in its place.

        A branch after the first takes the first one's column names (a set
        operation's columns are the first branch's, matched by position).
        """
        leaves = _leaves(tree)
        names = [item.alias_or_name for item in leaves[0].expressions]
        for number, leaf in enumerate(leaves, start=1):
            if len(leaf.expressions) != len(names) or any(
                isinstance(i, exp.Star) or (i.find(exp.Star) and not is_count_star(i))
                for i in leaf.expressions
            ):
                raise _NotSplit(f"branch {number} of {label} selects * or another width")
            body = leaf.copy()
            body.set(
                "expressions",
                [
                    exp.alias_(i.unalias().copy(), n)
                    for i, n in zip(body.expressions, names, strict=True)
                ],
            )
            table = self._part(body, f"branch {number} of {label}")
            leaf.replace(exp.select("*").from_(_table_node(table, None)))
        return tree

    def inline_unneeded(self, top: Any) -> Any:
        """``top`` with the parts only it reads that read no input written back in as derived
        tables, and those parts dropped.

        A part that only projects, filters, joins or groups other parts
        reads nothing the query over the parts could not read itself, and
        would cost a write job each tick. A part another part reads stays
        (that part's plan reads its changes).
        """
        while True:
            needed = {t for p in self.parts.values() for t in _part_reads(p.sql, self.target)}
            spare = [p for p in self.parts.values() if not p.reads_inputs and p.table not in needed]
            spare = [
                p for p in spare if p.table in _part_reads(top.sql(dialect="spark"), self.target)
            ]
            if not spare:
                return top
            for part in spare:
                del self.parts[part.table]
                body = parse_query(part.sql, catalog_name=self.catalog_name).expression
                for node in list(top.find_all(exp.Table)):
                    if f"{node.db}.{node.name}".lower() == part.table:
                        node.replace(
                            exp.Subquery(
                                this=body.copy(),
                                alias=exp.TableAlias(this=exp.to_identifier(node.alias_or_name)),
                            )
                        )

    def _reads_inputs(self, tree: Any) -> bool:
        return any(
            t.args.get("db") and not is_part_of(f"{t.db}.{t.name}".lower(), self.target)
            for t in tree.find_all(exp.Table)
        )

    def _part(self, body: Any, label: str, *, own_groups: bool = False) -> str:
        """The table of the part ``body`` (split itself first), added once.

        :param own_groups: ``body`` is a query's groups or rows, split off already.
        """
        if body.find(exp.Lateral):
            raise _NotSplit(f"{label} holds a LATERAL view")
        body = self.split(body)
        if not own_groups:
            body = self.reshaped(body, label)
        _check_names(body, label)
        restated = self._restated_part(body)
        if restated is not None:
            return restated
        sql = body.sql(dialect="spark")
        digest = hashlib.sha256(sql.encode()).hexdigest()[:12]
        table = part_table_name(self.target, digest)
        if table not in self.parts:
            parsed = parse_query(sql, target=table, catalog_name=self.catalog_name)
            reads_inputs = any(not is_part_of(name, self.target) for name in parsed.inputs)
            plan = plan_query(parsed, self.columns)
            self.parts[table] = Part(table, sql, label, plan, reads_inputs)
        return table

    def _restated_part(self, body: Any) -> str | None:
        """The part ``body`` only restates (all its columns, as named, in order), or None.

        ``WITH u AS (SELECT a, b FROM (SELECT ... UNION ALL SELECT ...) s)``
        (what a transpiler makes of a CTE over a union) would otherwise be a
        second part holding the same rows as ``s``'s, ticked after it with the
        same change: a write job and a copy of the rows for nothing.
        """
        if not isinstance(body, exp.Select) or any(
            body.args.get(arg) is not None for arg in _CLAUSES_BESIDE_FROM
        ):
            return None
        source = body.args.get("from_") or body.args.get("from")
        node = source.this if source is not None else None
        if not isinstance(node, exp.Table):
            return None
        part = self.parts.get(f"{node.db}.{node.name}".lower())
        if part is None:
            return None
        items = body.expressions
        if not all(isinstance(i.unalias(), exp.Column) for i in items):
            return None
        if any(i.alias_or_name.lower() != i.unalias().name.lower() for i in items):
            return None  # renamed: the readers would not find the part's names
        restated = [i.alias_or_name.lower() for i in items]
        named = parse_query(part.sql, catalog_name=self.catalog_name).expression.named_selects
        return part.table if restated == [n.lower() for n in named] else None


#: A select's clauses besides its list and ``FROM``: with any, it restates no part.
_CLAUSES_BESIDE_FROM = (
    "joins",
    "where",
    "group",
    "having",
    "distinct",
    "order",
    "limit",
    "offset",
    "qualify",
    "laterals",
    "with",
    "with_",
)


def _derived_table(sub: Any) -> bool:
    """Whether ``sub`` is a subquery in ``FROM``/``JOIN`` outside any predicate subquery."""
    if not isinstance(sub.parent, exp.From | exp.Join) or not isinstance(sub.this, exp.Query):
        return False
    node: Any = sub.parent
    while node is not None:
        if isinstance(node, exp.Subquery) and not isinstance(node.parent, exp.From | exp.Join):
            return False
        if isinstance(node, exp.Exists | exp.In):
            return False
        node = node.parent
    return True


def _leaves(tree: Any) -> list[Any]:
    """The selects a set operation combines, in order (nested set operations flattened)."""
    if isinstance(tree, exp.SetOperation):
        return [*_leaves(tree.left), *_leaves(tree.right)]
    if isinstance(tree, exp.Select):
        return [tree]
    if isinstance(tree, exp.Subquery) and not tree.alias:  # (SELECT ...) EXCEPT (SELECT ...)
        return _leaves(tree.this)
    raise _NotSplit(f"a set operation's branch {tree.sql(dialect='spark')[:60]} is not a select")


def _check_names(body: Any, label: str) -> None:
    """Refuse a part whose columns a table could not hold under the names the query uses.

    ``*`` is kept where it reads one source (a table's columns have
    distinct names); beside a join it could name two columns alike.
    """
    first = _leaves(body)[0] if isinstance(body, exp.SetOperation) else body
    single = isinstance(first, exp.Select) and not first.args.get("joins")
    seen: set[str] = set()
    if not isinstance(first, exp.Select):
        raise _NotSplit(f"{label} is not a select")
    for item in first.expressions:
        if isinstance(item, exp.Star) or (item.find(exp.Star) and not is_count_star(item)):
            if single:
                continue
            raise _NotSplit(f"{label} selects * beside a join")
        if not isinstance(item, exp.Alias | exp.Column):
            raise _NotSplit(f"{label} has an output without a name ({item.sql(dialect='spark')})")
        if isinstance(item.unalias(), exp.Null):
            raise _NotSplit(f"{label} outputs an untyped NULL ({item.alias_or_name}), no table's")
        name = item.alias_or_name.lower()
        if not name or name in seen:
            raise _NotSplit(f"{label} has two outputs named {name!r}")
        seen.add(name)


def _renamed(tree: Any, names: dict[str, str]) -> Any:
    """``tree`` with every read of a CTE in ``names`` turned into a read of its part's table."""
    if not names:
        return tree
    for table in list(tree.find_all(exp.Table)):
        if table.args.get("db") or table.name.lower() not in names:
            continue
        table.replace(_table_node(names[table.name.lower()], table.alias_or_name))
    return tree


def _table_node(table: str, alias: str | None) -> Any:
    node = exp.to_table(table)
    return exp.alias_(node, alias, table=True) if alias else node


def _part_reads(sql: str, target: str) -> set[str]:
    """The parts of ``target`` that ``sql`` reads."""
    tree = parse_query(sql).expression if sql else None
    names = (f"{t.db}.{t.name}".lower() for t in tree.find_all(exp.Table)) if tree else ()
    return {n for n in names if is_part_of(n, target)}
