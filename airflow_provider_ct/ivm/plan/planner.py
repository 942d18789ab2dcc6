"""Which incremental strategy a view's query allows, decided from its SQL alone.

The planner reads the query with sqlglot (no Spark) and picks one of:

* ``linear``: a ``UNION ALL`` of blocks, each a projection and filter over one
  table or an inner join of several. The view's change is the query over the
  inputs' changes (delta rules: ``Δ(A⋈B) = ΔA⋈B_old + A_new⋈ΔB``, and so on
  for more inputs); a table read twice (``nation n1, nation n2``) is two
  inputs there, one per read (:func:`~.reads.occurrence_key`).
* ``linear`` over ``A LEFT JOIN B ON <equalities>``: ``ΔA ⟕ B_old``, plus,
  for the join keys ``K`` that occur in ``ΔB``, ``A_new|K ⟕ B_new`` minus
  ``A_new|K ⟕ B_old`` (the rows of ``A`` outside ``K`` see the same ``B``).
* ``linear`` over other outer joins (:mod:`.outer_joins`): per read, the
  query over its change, or (one outer join null-extends on its way) over
  it now minus as it was with one other read narrowed to the changed keys.
* ``group``: ``GROUP BY`` (or ``SELECT DISTINCT``) at the top of such a
  block: every group whose key occurs in the change of the rows below the
  aggregation is recomputed from the new inputs, and only those groups' rows
  of the target are corrected. Exact for every deterministic aggregate
  (``SUM``, ``COUNT``, ``AVG``, ``MIN``, ``MAX``, ``COUNT(DISTINCT)``...) and
  for ``HAVING``.
* ``partition``: a ``group`` plan one of whose grouping keys is the day of an
  input column (``CAST(ts AS DATE)``, ``TO_DATE(ts)``, ``DATE(ts)``): the
  affected days also become ranges of that column (``ts >= d AND ts <
  d + 1``), which Spark hands to Iceberg's scan planning, so only the files
  of the changed days are read (pruned by partition values, such as a
  ``days(ts)`` partition, and by column statistics), and the target's rows
  of those days are the only ones compared and corrected.
* ``aggregate``: a ``GROUP BY`` (or an aggregate without one) whose select
  list holds only the keys and bare ``SUM``, ``COUNT`` and ``AVG`` calls:
  each affected group's new value is its kept state plus the aggregate of
  the signed change (:mod:`.in_place`); no group is recomputed. The plan
  keeps the ``group``/``partition`` (or ``full``) plan it falls back to when
  the write job finds inexact argument types.
* ``aggregate`` under the rest of the query (:mod:`.nested`): a CTE, an
  aggregating derived table, ``HAVING`` or ``ORDER BY ... LIMIT`` over a
  select that keeps its aggregates in place; the plan's blocks and
  aggregates are that select's, and :attr:`Plan.nested` is the query
  recomputed over its groups' rows every tick.
* ``top``: ``ORDER BY ... LIMIT`` over such a block (:mod:`.top_k`): the
  view's rows with the block's change applied, sorted and cut again.
* ``full``: anything else (windows, subqueries outside ``WHERE``, derived
  tables and CTEs other than those, ``LIMIT`` without ``ORDER BY``, ``UNION``
  without ``ALL``, outer joins :mod:`.outer_joins` finds no rule for,
  aggregates without ``GROUP BY`` that are not kept in place,
  nondeterministic calls), with the reason.

A derived table that only projects and filters, read alone by the query
(``SELECT ... FROM (SELECT ...) AS t``), is merged into it first
(:mod:`.flatten`), so TPC-H's q7, q8 and q9 are plain blocks here; a
leading ``RIGHT JOIN`` is planned as the ``LEFT JOIN`` it equals
(:mod:`.right_joins`). A
subquery in ``WHERE`` is a fixed filter of every strategy while the tables
it reads do not change (:mod:`.subqueries`; a tick that changes
one runs in full, :mod:`.decision`).

Only the shape is decided here. Whether a tick can use the plan also depends
on the target's history (drift, rollbacks, expired input snapshots: see
:mod:`airflow_provider_ct.ivm.plan.history`) and on the sizes the settings
weigh (:mod:`airflow_provider_ct.core.settings`). The SQL a tick runs for
the plan is written by :mod:`airflow_provider_ct.ivm.plan.rewrites`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.query import (
    ParsedQuery,
    input_name,
    nondeterministic_calls,
    normalize_table_name,
)
from airflow_provider_ct.exceptions import QueryError
from airflow_provider_ct.ivm.plan.block import Block
from airflow_provider_ct.ivm.plan.flatten import flatten_derived_tables
from airflow_provider_ct.ivm.plan.group_keys import (
    KeyColumns,
    KeyRange,
    affected_keys_steps,
    key_columns,
    key_ranges,
    output_key_positions,
    single_reads,
)
from airflow_provider_ct.ivm.plan.in_place import InPlace, in_place_shape
from airflow_provider_ct.ivm.plan.keyed import keyed_shape
from airflow_provider_ct.ivm.plan.left_join import (
    left_join,
    qualify_outer_join_columns,
)
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.nested import Nested, split_nested
from airflow_provider_ct.ivm.plan.outer_joins import outer_joins
from airflow_provider_ct.ivm.plan.parameters import parameter_tables
from airflow_provider_ct.ivm.plan.refusals import NotIncremental
from airflow_provider_ct.ivm.plan.right_joins import as_left_joins
from airflow_provider_ct.ivm.plan.select_shape import (
    block_tables,
    check_linear_select,
    has_own_aggregate,
    is_count_star,
    outer_join,
    qualified_name,
    union_all_leaves,
)
from airflow_provider_ct.ivm.plan.steps import (
    block_step,
    in_place_reason,
    in_place_steps,
    linear_reason,
    nested_steps,
)
from airflow_provider_ct.ivm.plan.subqueries import (
    fixed_subquery_tables,
    projected_subquery,
    semi_tables,
)
from airflow_provider_ct.ivm.plan.top_k import TOP, TopK, top_k_split, top_reason, top_step
from airflow_provider_ct.ivm.plan.using import using_as_on
from airflow_provider_ct.ivm.plan.windows import own_windows, window_keys

LINEAR = "linear"
GROUP = "group"
PARTITION = "partition"
AGGREGATE = "aggregate"
FULL = "full"
#: Strategies that recompute the groups a change affects.
GROUPED = (GROUP, PARTITION)


@dataclass(frozen=True)
class Plan:
    """The strategy for a query, and enough of its shape to run it."""

    strategy: str
    reason: str
    blocks: tuple[Block, ...] = ()
    #: ``group``: 0-based positions of the grouping keys in the select list.
    key_positions: tuple[int, ...] = ()
    #: ``group``: the grouping expressions, in Spark SQL, in the block's scope.
    key_sql: tuple[str, ...] = ()
    steps: tuple[str, ...] = field(default=())
    #: ``group``: the grouping keys that are input columns, with their equal columns.
    key_columns: tuple[KeyColumns, ...] = ()
    #: ``partition``: the grouping keys that are days of input columns.
    key_ranges: tuple[KeyRange, ...] = ()
    #: ``aggregate``: the aggregates kept in place, and the plan to fall back to.
    in_place: InPlace | None = None
    #: ``aggregate`` of a CTE, derived table or top-k: the query over the kept groups'
    #: rows, recomputed every tick (:mod:`.nested`); the other fields are the inner's.
    nested: Nested | None = None
    #: An optional split's (:attr:`Nested.optional`): the plan the query has without
    #: it, which a tick whose inner cannot stay in place falls back to.
    unnested: Plan | None = None
    #: ``top``: the order and limit kept over the blocks' rows (:mod:`.top_k`).
    top: TopK | None = None

    @property
    def incremental(self) -> bool:
        return self.strategy != FULL

    @property
    def fixed_inputs(self) -> frozenset[str]:
        """The tables the plan reads in subqueries: a tick that changes one is maintained by
        the keyed rule or each subquery's own (:mod:`.subquery_changes`), found when the
        tick computes, else runs in full."""
        return frozenset(n for b in self.blocks for n in b.fixed)

    @property
    def semi_inputs(self) -> frozenset[str]:
        """The tables read only by semi-joins: an in-place tick may maintain their changes."""
        return frozenset(n for b in self.blocks for n in b.semi)

    @property
    def param_inputs(self) -> frozenset[str]:
        """The tables read only by parameters: an in-place tick may maintain their changes."""
        return frozenset(n for b in self.blocks for n in b.params)

    @property
    def driver_kept_inputs(self) -> frozenset[str]:
        """Tables whose changes only the driver maintains under an in-place plan: those read
        only by semi-joins or by parameters."""
        return self.semi_inputs | self.param_inputs

    @property
    def keyed_inputs(self) -> frozenset[str]:
        """The tables read in keyed subqueries: a tick that changes them recomputes the keys
        their changes hold (:mod:`.keyed`), unless the tick finds the tie does not hold."""
        return frozenset(n for b in self.blocks if b.keyed for n in b.fixed)

    @property
    def grouped(self) -> bool:
        """Whether the tick recomputes affected groups (``group`` or ``partition``)."""
        return self.strategy in GROUPED

    def fallback(self, why: str) -> Plan:
        """The plan without in-place aggregates (``group``, ``partition`` or ``full``)."""
        if self.in_place is None:
            return self
        if self.unnested is not None:  # the query as it is, without the split
            own = self.unnested
            return replace(own, reason=f"{own.reason} (not in place: {why})")
        reason = self.in_place.fallback_reason
        return replace(
            self,
            strategy=self.in_place.fallback,
            reason=f"{reason} (not in place: {why})" if reason else f"not in place: {why}",
            in_place=None,
            nested=None,
        )

    def explain(self) -> list[str]:
        """Human-readable lines, like ``EXPLAIN``: the strategy, why, and the steps."""
        return [f"strategy: {self.strategy}", f"why: {self.reason}", *self.steps]


#: Input name -> its column names, when the caller has read the inputs' schemas.
InputColumns = Mapping[str, Collection[str]]


def plan_query(parsed: ParsedQuery, columns: InputColumns | None = None) -> Plan:
    """The incremental strategy for ``parsed`` (``full`` with the reason if none).

    :param columns: the inputs' column names, where known (the write job
        knows them): they place an outer join's unqualified ``ON`` columns,
        and a ``USING`` join's keys (:mod:`.using`).
    """
    tree = parsed.expression
    if columns:
        tree = using_as_on(tree, parsed.catalog_name, columns)
        tree = qualify_outer_join_columns(tree, parsed.catalog_name, columns)
    try:
        return _plan_tree(tree, parsed.catalog_name)
    except NotIncremental as exc:
        return Plan(FULL, str(exc))


def choose_plan(
    parsed: ParsedQuery, refresh: RefreshMode, columns: InputColumns | None = None
) -> Plan:
    """The query's incremental plan under ``refresh`` (``full``: none)."""
    if refresh is RefreshMode.FULL:
        return Plan(FULL, "refresh='full'")
    plan = plan_query(parsed, columns)
    if refresh is RefreshMode.INCREMENTAL and not plan.incremental:
        raise QueryError(f"refresh='incremental', but the query is not incremental: {plan.reason}")
    return plan


def _plan_tree(tree: Any, catalog_name: str) -> Plan:
    calls = nondeterministic_calls(tree)
    if calls:
        raise NotIncremental(f"the query calls nondeterministic functions {calls}")
    tree = as_left_joins(flatten_derived_tables(tree))
    split = split_nested(tree, catalog_name)
    nested = None if split is None else _nested_plan(split, tree, catalog_name)
    if nested is not None:
        return nested
    if tree.find(exp.With) or tree.find(exp.CTE):
        raise NotIncremental("a WITH clause (CTE) inside the query is recomputed in full")
    if isinstance(tree, exp.Select):
        return _plan_select(tree, catalog_name)
    leaves = union_all_leaves(tree)
    blocks = tuple(_block(leaf, catalog_name) for leaf in leaves)
    for leaf in leaves:
        check_linear_select(leaf)
    steps = tuple(block_step(i, b) for i, b in enumerate(blocks))
    return Plan(LINEAR, f"UNION ALL of {len(blocks)} linear blocks", blocks, steps=steps)


def _nested_plan(split: tuple[Any, Nested] | str, tree: Any, catalog_name: str) -> Plan | None:
    """The inner select's in-place plan, with the outer query over its rows (:mod:`.nested`);
    None when the query is planned as it is (an optional split whose inner is not kept).

    :param tree: the query before the split (an optional split falls back to its plan).
    """
    if isinstance(split, str):
        raise NotIncremental(split)
    inner, nested = split
    try:
        plan = _plan_tree(inner, catalog_name)
    except NotIncremental:
        if nested.optional:
            return None
        raise
    if nested.optional and (plan.strategy != AGGREGATE or plan.nested is not None):
        return None
    if plan.nested is not None:  # one outer query over the kept rows, not two
        raise NotIncremental(
            f"{nested.what} is recomputed in full: it holds {plan.nested.what} over an "
            "aggregate itself, and one query around a kept aggregate is maintained, not two"
        )
    if plan.strategy != AGGREGATE or plan.in_place is None:
        raise NotIncremental(
            f"{nested.what} is recomputed in full unless its aggregates are kept in place: "
            f"{plan.reason}"
        )
    fallback = f"{nested.what} is recomputed in full without its aggregates kept in place"
    unnested = _own_plan(tree, catalog_name) if nested.optional else None
    return replace(
        plan,
        reason=f"{nested.what} over an aggregate kept in place: {plan.reason}; the query "
        "around it recomputed over the groups' rows",
        steps=nested_steps(plan.steps, nested),
        in_place=replace(plan.in_place, fallback=FULL, fallback_reason=fallback),
        nested=nested,
        unnested=unnested,
    )


def _own_plan(select: Any, catalog_name: str) -> Plan:
    """The plan of a select planned as it is, without a split (``full`` if it has none)."""
    try:
        return _plan_select(select, catalog_name)
    except NotIncremental as exc:
        return Plan(FULL, str(exc))


def _plan_select(select: Any, catalog_name: str) -> Plan:
    if select.args.get("limit") is not None and _plain_rows(select):
        return _top_plan(select, catalog_name)
    block = _block(select, catalog_name)
    if own_windows(select):
        return _window_plan(select, block)
    group = select.args.get("group")
    distinct = select.args.get("distinct")
    if group is None and not distinct:
        if has_own_aggregate(select):
            return _scalar_in_place(select, block)
        check_linear_select(select)
        return Plan(LINEAR, linear_reason(block), (block,), steps=(block_step(0, block),))
    _check_grouped_select(select, group, distinct)
    items = list(select.expressions)
    if distinct:
        positions = tuple(range(len(items)))
        keys = tuple(i.unalias().sql(dialect="spark") for i in items)
        if any(i.find(exp.AggFunc) for i in items):
            raise NotIncremental("SELECT DISTINCT over aggregates is recomputed in full")
    else:
        positions, keys = output_key_positions(select, items)
    plan = _grouped_plan(select, block, positions, keys, distinct=bool(distinct))
    shape = in_place_shape(select, items, positions)
    if not isinstance(shape, InPlace):
        return plan
    return replace(
        plan,
        strategy=AGGREGATE,
        reason=f"{'SELECT DISTINCT' if distinct else 'GROUP BY'} {', '.join(keys)}: "
        f"{in_place_reason(shape)}",
        steps=in_place_steps(block, shape),
        in_place=replace(shape, fallback=plan.strategy, fallback_reason=plan.reason),
    )


def _plain_rows(select: Any) -> bool:
    """Rows neither grouped, deduplicated, aggregated nor windowed (a top-k's input)."""
    return not (
        select.args.get("group") is not None
        or select.args.get("distinct")
        or has_own_aggregate(select)
        or own_windows(select)
    )


def _top_plan(select: Any, catalog_name: str) -> Plan:
    """``ORDER BY ... LIMIT`` over a linear select: the top kept by :mod:`.top_k`'s rule."""
    split = top_k_split(select)
    if isinstance(split, str):
        raise NotIncremental(split)
    inner, top = split
    block = _block(inner, catalog_name)
    check_linear_select(inner)
    steps = (block_step(0, block), top_step(top))
    return Plan(TOP, top_reason(top, linear_reason(block)), (block,), steps=steps, top=top)


def _window_plan(select: Any, block: Block) -> Plan:
    """Windows with ``PARTITION BY``: a ``group`` (or ``partition``) plan over their keys."""
    if has_own_aggregate(select):
        raise NotIncremental("window functions over an aggregate are recomputed in full")
    found = window_keys(select)
    if isinstance(found, str):
        raise NotIncremental(found)
    positions, keys = found
    plan = _grouped_plan(select, block, positions, keys, distinct=False)
    what = "days" if plan.key_ranges else "partitions"
    reason = (
        f"windows PARTITION BY {', '.join(keys)}: the {what} whose keys occur in the change "
        "are recomputed (whole partitions, restricted below the windows), and only their "
        "rows of the target are corrected"
    )
    return replace(plan, reason=reason)


def _check_grouped_select(select: Any, group: Any, distinct: Any) -> None:
    """Raise :class:`NotIncremental` for a ``GROUP BY``/``DISTINCT`` no grouped plan handles."""
    if select.args.get("limit") or select.args.get("offset"):
        raise NotIncremental("LIMIT is recomputed in full")
    if distinct and (group is not None or distinct.args.get("on")):
        raise NotIncremental("SELECT DISTINCT with GROUP BY or DISTINCT ON is recomputed in full")
    if group is not None and (group.args.get("rollup") or group.args.get("cube")):
        raise NotIncremental("ROLLUP / CUBE / GROUPING SETS are recomputed in full")
    if group is not None and group.args.get("grouping_sets"):
        raise NotIncremental("GROUPING SETS are recomputed in full")
    items = list(select.expressions)
    if any(isinstance(i, exp.Star) or (i.find(exp.Star) and not is_count_star(i)) for i in items):
        raise NotIncremental("SELECT * with GROUP BY / DISTINCT is recomputed in full")


def _grouped_plan(
    select: Any, block: Block, positions: tuple[int, ...], keys: tuple[str, ...], *, distinct: bool
) -> Plan:
    """The ``group`` (or, with day keys, ``partition``) plan of a grouped block."""
    reason = (
        f"GROUP BY {', '.join(keys)}: groups whose keys occur in the change are recomputed"
        if not distinct
        else "SELECT DISTINCT: rows whose values occur in the change are recomputed"
    )
    tables = zip(block_tables(select), block.inputs, strict=True)
    aliases = {t.alias_or_name.lower(): name for t, name in tables}
    columns = () if block.outer_joined else key_columns(select, aliases, keys)
    ranges = () if distinct or block.outer is not None else key_ranges(aliases, keys)
    if block.repeated:
        columns, ranges = single_reads(columns, ranges, block.repeated)
    steps = (
        block_step(0, block),
        *affected_keys_steps(keys, columns, ranges),
        "recompute those groups over the new inputs; correct only their rows of the target",
    )
    if ranges:
        days = ", ".join(keys[r.index] for r in ranges)
        reason = (
            f"GROUP BY {', '.join(keys)}: only the days of {days} whose inputs changed are "
            "recomputed, reading only those days' files of the inputs and correcting only "
            "their rows"
        )
    strategy = PARTITION if ranges else GROUP
    return Plan(strategy, reason, (block,), positions, keys, steps, columns, ranges)


def _scalar_in_place(select: Any, block: Block) -> Plan:
    """An aggregate without ``GROUP BY``: one group, kept in place, else recomputed in full."""
    if select.args.get("limit") or select.args.get("offset"):
        raise NotIncremental("LIMIT is recomputed in full")
    shape = in_place_shape(select, list(select.expressions), ())
    if not isinstance(shape, InPlace):
        raise NotIncremental(
            f"an aggregate without GROUP BY (one group) is recomputed in full: {shape}"
        )
    fallback = "an aggregate without GROUP BY (one group) is recomputed in full"
    return Plan(
        AGGREGATE,
        f"one group (no GROUP BY): {in_place_reason(shape)}",
        (block,),
        steps=in_place_steps(block, shape),
        in_place=replace(shape, fallback=FULL, fallback_reason=fallback),
    )


def _block(select: Any, catalog_name: str) -> Block:
    """The tables of one SELECT, joined inner or by one LEFT JOIN, and its subqueries' tables."""
    fixed = fixed_subquery_tables(select, catalog_name)
    if isinstance(fixed, str):
        raise NotIncremental(fixed)
    tables = block_tables(select)
    joins = list(select.args.get("joins") or [])
    if not all(isinstance(t, exp.Table) and t.name for t in tables):
        raise NotIncremental("a join of something other than a table is recomputed in full")
    if any(t.args.get("joins") or t.find(exp.Lateral) for t in tables):
        raise NotIncremental("LATERAL views are recomputed in full")
    if any(input_name(t, catalog_name) is None for t in tables):
        raise NotIncremental("a CTE joined as a table is recomputed in full")
    names = [normalize_table_name(qualified_name(t), catalog_name) for t in tables]
    left = left_join(select, joins, tables, names)
    if left is not None and fixed:
        left = None  # the outer joins' rule, which subqueries may stand beside
    outer = None
    if left is None and outer_join(select) is not None:
        outer = outer_joins(joins, tables, names, fixed)
    if outer is not None and fixed:
        # Subqueries beside outer joins are fixed filters of each row (a tick that changes
        # their tables adds their brackets, :mod:`.subquery_changes`): none is kept by key
        # or on the driver, whose routes join inner or by the one LEFT JOIN.
        return Block(select, tuple(names), None, fixed, outer=outer)
    semi = semi_tables(select, catalog_name, fixed)
    # a subquery in the select list: the driver's keyed routes evaluate no such value
    keyed = bool(fixed) and keyed_shape(select) is None and not projected_subquery(select)
    params = () if keyed else parameter_tables(select, catalog_name, fixed)
    return Block(select, tuple(names), left, fixed, semi, keyed, params, outer)
