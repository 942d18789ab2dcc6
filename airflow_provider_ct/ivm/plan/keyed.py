"""Subqueries tied to the block by a key: the rows of the keys a change touches, read twice.

A subquery in ``WHERE`` is a fixed filter of the delta rules only while the
tables it reads do not change (:mod:`.subqueries`). Many subqueries are
*keyed*: tied to the outer row by an equality with one of its columns,

* ``l_quantity < (SELECT 0.2 * AVG(l_quantity) FROM lineitem l2 WHERE
  l2.l_partkey = p_partkey)`` (a correlated scalar, TPC-H q17; q2's ``MIN``),
* ``EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = l1.l_orderkey
  AND l2.l_suppkey <> l1.l_suppkey)`` (q21: other correlated conjuncts
  are fine once one equality ties it),
* ``o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey
  HAVING SUM(l_quantity) > 300)`` (q18: the ``IN`` ties its column to the
  subquery's one output, grouped by that output or not grouped at all).

For an outer row whose key column holds ``k``, such a subquery's value
depends on that row and on the subquery's rows whose tied column is ``k``,
nothing else. So, when every changed table holds the key (a block column in
the key's equality class, or the tied column of each subquery reading it),
the rows below the aggregation change only at the keys ``K`` the changes
hold, and exactly by ``P_new|K - P_old|K``: the block over the inputs as
they are and as they were, both restricted to ``K`` (outside, below and
inside the subqueries). No state is kept; the cost is a restricted read of
each input at both snapshots (:mod:`airflow_provider_ct.spark.ivm.keyed`).

Two steps, as with semi-joins: the *shape* is told from the SQL when the
query is planned (:func:`keyed_shape`); which column of which table each
side of a tie is needs the tables' columns (TPC-H writes ``p_partkey =
ps_partkey`` unqualified), so the tie is *placed* when a tick runs
(:func:`place_keyed`). ``NOT IN`` is never keyed: one NULL in the subquery
makes it unknown for every outer row, so no key bounds what a change moves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.scopes import (
    Classes,
    block_equalities,
    both_own,
    column_equalities,
    direct_subqueries,
    in_tie,
    negated_within,
    resolve,
    subquery_owner,
    table_scope,
)

#: ``(input, alias, column)``: one table column, as a scope of the query names it.
Member = tuple[str, str, str]


@dataclass(frozen=True)
class Tie:
    """How one subquery is tied to the block: an ``IN``'s output, or a correlated equality."""

    #: The outer side: the block's column (``alias``, ``column``), lower-cased.
    outer: tuple[str, str]
    #: The inner side as the subquery writes it (restricted in the subquery's ``WHERE``).
    inner: Any
    #: ``(input, alias, column)`` of the inner side when it is a column of the subquery's tables.
    member: Member | None


@dataclass(frozen=True)
class Bridge:
    """A block input without the key, joined by an equality to an input that holds it.

    A row below the aggregation that a change of ``input`` adds or removes
    joins a row of ``via`` whose ``via_column`` equals the changed row's
    ``column``; its key is that row's ``via_key``. So the keys of the
    change are ``via``'s keys of the rows the changed values join, read
    from ``via`` as it is (a row of ``via`` that changed too brings its
    keys itself). TPC-H q18's ``customer``, joined to ``orders`` by
    ``c_custkey = o_custkey``, changes on every tick of the bench.
    """

    input: str
    column: str
    via: str
    via_column: str
    via_key: str
    #: Whether it bridges ``input``'s read in a subquery inside a subquery (through that
    #: subquery's tied table), not its read in the block.
    nested: bool = False


@dataclass(frozen=True)
class KeyedRead:
    """A block whose subqueries are all tied to one key, placed with the tables' columns."""

    #: The block's columns in the key's equality class.
    members: tuple[Member, ...]
    #: Per subquery (in :func:`direct_subqueries` order), its tied side's SQL in its own scope.
    inner_sql: tuple[str, ...]
    #: Per subquery, the input whose column its tied side is (None: an expression).
    inner_inputs: tuple[str | None, ...]
    #: The subqueries' tied columns, where they are table columns.
    inner_members: tuple[Member, ...]
    #: Per input read in a subquery, whether every subquery that reads it is tied by
    #: one of its columns (a change of it then moves only the keys it holds).
    tied_inputs: frozenset[str]
    #: Inputs read in subqueries.
    subquery_inputs: frozenset[str]
    #: Inputs of the block each of whose reads there has a member column.
    keyed_block_inputs: frozenset[str] = frozenset()
    #: Block inputs without the key whose changes' keys are read through a join.
    bridges: tuple[Bridge, ...] = ()
    #: Inputs a subquery reads neither tied by the key nor bridged (their changes move
    #: keys no column bounds).
    uncovered: frozenset[str] = frozenset()

    def key_columns(self, name: str) -> list[str]:
        """The columns of input ``name`` that hold the key (block and subquery sides)."""
        found = [c for n, _, c in (*self.members, *self.inner_members) if n == name]
        return list(dict.fromkeys(found))

    def unkeyed(self, changed: Collection[str], block_inputs: Collection[str]) -> str | None:
        """Why a change of ``changed`` is not bounded by the key, or None."""
        for name in sorted(changed):
            if name in self.uncovered:
                return f"{name} changed and is read in a subquery that it does not tie by the key"
            bridged = any(b.input == name and not b.nested for b in self.bridges)
            if name in block_inputs and name not in self.keyed_block_inputs and not bridged:
                return (
                    f"{name} changed and holds no column equal to the subqueries' key, nor "
                    "joins a table that holds it by an equality"
                )
        return None

    def restricted_columns(self, name: str, block_inputs: Collection[str]) -> list[str]:
        """The key columns input ``name`` may be read restricted by, or none.

        Only when every read of it holds the key: each of its reads in the
        block is a member, and each subquery that reads it ties it. A read
        that does not (TPC-H q18's ``customer``, bridged) needs its rows of
        every key.
        """
        in_block = name in block_inputs
        if in_block and name not in self.keyed_block_inputs:
            return []
        if name in self.subquery_inputs and name not in self.tied_inputs:
            return []
        return self.key_columns(name)

    def restrict(self, select: Any, keys: Any, restricted: Collection[str] = frozenset()) -> Any:
        """A copy of ``select`` keeping only rows whose key is in ``keys`` (a one-column query).

        Outside the subqueries every member column is restricted; inside,
        each tied side is, so a subquery that aggregates aggregates only the
        keys' rows.

        :param restricted: inputs the tick reads already restricted to ``keys``
            on their :meth:`restricted_columns`
            (:mod:`airflow_provider_ct.spark.ivm.keyed`): their members and ties
            need no condition here (a row of such an input whose key columns
            are equal has its key in ``keys``).
        """
        tree = select.copy()
        subs = direct_subqueries(tree)  # before the keys' own subqueries join the tree
        for name, alias, column in self.members:
            if name not in restricted:
                ref = exp.column(column, table=alias, quoted=True)
                tree.where(_null_safe_in(ref, keys), copy=False)
        for sub, inner, owner in zip(subs, self.inner_sql, self.inner_inputs, strict=True):
            if owner is None or owner not in restricted:
                ref = exp.maybe_parse(inner, dialect="spark")
                sub.where(exp.In(this=ref, query=exp.Subquery(this=keys.copy())), copy=False)
        return tree


def _null_safe_in(ref: Any, keys: Any) -> Any:
    """``ref`` is one of ``keys``, NULL matching NULL: a row of a NULL key depends on no
    subquery row (no equality holds), but its own change is a change at that key."""
    match = exp.NullSafeEQ(this=exp.column("__ct_k0", table="__ct_keys"), expression=ref)
    query = keys.copy()
    query.set("expressions", [exp.Literal.number(1)])
    from_ = query.args["from_"]
    from_.this.set("alias", exp.TableAlias(this=exp.to_identifier("__ct_keys")))
    return exp.Exists(this=query.where(match, copy=False))


def keyed_shape(select: Any) -> str | None:
    """Why ``select``'s subqueries cannot all be keyed, judged from the SQL alone; None if
    they may be (the tick places the ties, :func:`place_keyed`)."""
    subs = direct_subqueries(select)
    if not subs:
        return "the block has no subquery"
    for sub in subs:
        why = _tied_shape(sub, select)
        for nested in direct_subqueries(sub):
            if why is None and direct_subqueries(nested):
                why = "a subquery three levels deep is not keyed"
            why = why or _tied_shape(nested, sub)
        if why is not None:
            return why
    return None


def _tied_shape(sub: Any, parent: Any) -> str | None:
    """Why subquery ``sub`` of ``parent`` has no tie to it, from the SQL alone, or None."""
    own = {t.alias_or_name.lower() for t in sub.find_all(exp.Table)}
    ties = [c for c in column_equalities(sub) if not both_own(c, own)]
    if in_tie(sub) is None and not ties:
        return "a subquery not tied to the block by an equality (or an IN) is not keyed"
    node = subquery_owner(sub)
    if isinstance(node, exp.In) and negated_within(node, parent):
        return "NOT IN is not keyed: a NULL in the subquery makes it unknown everywhere"
    return None


def place_keyed(
    select: Any, columns: Mapping[str, Collection[str]], catalog_name: str
) -> KeyedRead | str:
    """The key that ties every subquery of ``select`` to it, or why there is none.

    :param columns: input name -> its column names (the pinned snapshots').
    """
    lower = {name: {c.lower() for c in cols} for name, cols in columns.items()}
    outer = table_scope(select, catalog_name)
    classes = Classes()
    pairs = []
    for conjunct in block_equalities(select):
        left = resolve(conjunct.this, [outer], lower)
        right = resolve(conjunct.expression, [outer], lower)
        if left is not None and right is not None:
            classes.union(left[2:], right[2:])
            pairs.append((left[1:], right[1:]))
    ties: list[Tie] = []
    nested = _Nested()
    for sub in direct_subqueries(select):
        inner = table_scope(sub, catalog_name)
        tie = tie_of(sub, outer, inner, lower, classes)
        if isinstance(tie, str):
            return tie
        ties.append(tie)
        why = nested.place(sub, inner, tie, lower, catalog_name)
        if why is not None:
            return why
    root = classes.find(ties[0].outer)
    if any(classes.find(t.outer) != root for t in ties):
        return "the subqueries are tied to different keys of the block"
    members = tuple(sorted((outer[a], a, c) for a, c in classes.members(root) if a in outer))
    keyed_inputs = frozenset(
        name
        for name in set(outer.values())
        if all(any(m[1] == a for m in members) for a, n in outer.items() if n == name)
    )
    untied = _untied(select, ties, catalog_name)
    return KeyedRead(
        members=members,
        inner_sql=tuple(t.inner.sql(dialect="spark") for t in ties),
        inner_inputs=tuple(None if t.member is None else t.member[0] for t in ties),
        inner_members=(*(t.member for t in ties if t.member is not None), *nested.members),
        tied_inputs=_tied_inputs(ties, untied, nested),
        subquery_inputs=frozenset(
            name
            for sub in direct_subqueries(select)
            for name in table_scope(sub, catalog_name).values()
        )
        | nested.inputs,
        keyed_block_inputs=keyed_inputs,
        bridges=(*_bridges(pairs, members, keyed_inputs, list(outer.values())), *nested.bridges),
        uncovered=frozenset(untied | nested.uncovered),
    )


def _bridges(
    pairs: list[tuple[Member, Member]],
    members: tuple[Member, ...],
    keyed_inputs: frozenset[str],
    reads: list[str],
) -> tuple[Bridge, ...]:
    """The first equality joining each block input without the key (read once) to a read
    that holds it."""
    key_of = {alias: column for _, alias, column in members}
    found: dict[str, Bridge] = {}
    for left, right in pairs:
        for (name, _, column), (via, alias, via_column) in ((left, right), (right, left)):
            if name in keyed_inputs or reads.count(name) != 1 or alias not in key_of:
                continue
            found.setdefault(name, Bridge(name, column, via, via_column, key_of[alias]))
    return tuple(found.values())


def _tied_inputs(ties: list[Tie], untied: set[str], nested: _Nested) -> frozenset[str]:
    """Inputs every subquery reading them ties by one of their columns (and reads once):
    ``untied`` are those a direct subquery reads otherwise (:func:`_untied`)."""
    tied = {t.member[0] for t in ties if t.member is not None} | nested.tied
    return frozenset(tied - untied - nested.untied)


def _untied(select: Any, ties: list[Tie], catalog_name: str) -> set[str]:
    """Inputs a subquery of the block reads other than by its tie (or reads twice)."""
    untied: set[str] = set()
    for sub, tie in zip(direct_subqueries(select), ties, strict=True):
        names = list(table_scope(sub, catalog_name).values())
        for name in names:
            once = names.count(name) == 1
            if tie.member is None or tie.member[0] != name or not once:
                untied.add(name)
    return untied


def tie_of(
    sub: Any,
    outer: dict[str, str],
    inner: dict[str, str],
    lower: Mapping[str, set[str]],
    classes: Classes,
) -> Tie | str:
    """The tie of one subquery to a block column (one in a known class first), or why none."""
    by_in = in_tie(sub)
    if by_in is not None:
        outer_side, output = by_in
        ref = resolve(outer_side, [outer], lower)
        if ref is None:
            return f"IN's column {outer_side.sql(dialect='spark')} is not a column of the block"
        placed = resolve(output, [inner], lower)
        return Tie(ref[2:], output, None if placed is None else placed[1:])
    found: list[Tie] = []
    for conjunct in column_equalities(sub):
        sides = (conjunct.this, conjunct.expression)
        a = resolve(sides[0], [inner, outer], lower)
        b = resolve(sides[1], [inner, outer], lower)
        if a is None or b is None or a[0] == b[0]:
            continue  # a side not placed, or both in one scope: no tie
        inner_ref, outer_ref, inner_side = (a, b, sides[0]) if a[0] == 0 else (b, a, sides[1])
        found.append(Tie(outer_ref[2:], inner_side, inner_ref[1:]))
    if not found:
        return "a subquery is not tied to a column of the block by an equality"
    known = [t for t in found if t.outer in classes.parent]
    return (known or found)[0]


class _Nested:
    """The ties of the subqueries inside a block's subqueries (TPC-H q20's two, inside its
    ``IN`` over ``partsupp``), gathered while the block's own are placed.

    A subquery ``N`` inside a subquery ``S`` is read per row of ``S``. When an
    equality (or ``N``'s ``IN``) ties a column of ``N``'s table to a column of
    ``S`` equal to ``S``'s tied column (q20's ``l_suppkey = ps_suppkey``),
    ``N``'s rows of a key are its rows whose column holds the key: that table
    is tied like ``S``'s own. Otherwise, when it ties to another column of
    ``S``'s tied table (q20's ``ps_partkey IN (SELECT p_partkey ...)``), a
    changed row of ``N``'s table moves the keys of the tied table's rows it
    joins: a :class:`Bridge` through that table, read as it is.
    """

    def __init__(self) -> None:
        self.members: list[Member] = []
        self.bridges: list[Bridge] = []
        self.inputs: set[str] = set()
        self.tied: set[str] = set()
        self.untied: set[str] = set()
        self.uncovered: set[str] = set()

    def place(
        self,
        sub: Any,
        inner: dict[str, str],
        tie: Tie,
        lower: Mapping[str, set[str]],
        catalog_name: str,
    ) -> str | None:
        """Place the ties of ``sub``'s own subqueries; why one has none, or None."""
        subs = direct_subqueries(sub)
        if not subs:
            return None
        if tie.member is None:
            return "a subquery tied by an expression holds subqueries of its own: not keyed"
        key_input, key_alias, key_column = tie.member
        classes = Classes()
        for conjunct in column_equalities(sub):
            left = resolve(conjunct.this, [inner], lower)
            right = resolve(conjunct.expression, [inner], lower)
            if left is not None and right is not None:
                classes.union(left[2:], right[2:])
        root = classes.find((key_alias, key_column))
        for nested in subs:
            scope = table_scope(nested, catalog_name)
            names = list(scope.values())
            self.inputs.update(names)
            pairs = _nested_pairs(nested, scope, inner, lower)
            keyed = [m for m, p in pairs if classes.find(p) == root and names.count(m[0]) == 1]
            via = [(m, p) for m, p in pairs if p[0] == key_alias]
            if keyed:
                self.members.append(keyed[0])
                self.tied.add(covered := keyed[0][0])
            elif via:
                (covered, _, column), (_, via_column) = via[0]
                bridge = Bridge(covered, column, key_input, via_column, key_column, nested=True)
                self.bridges.append(bridge)
            else:
                return "a subquery inside a subquery tied to neither the key nor its table"
            self.untied.update(n for n in names if not keyed or n != covered)
            self.uncovered.update(n for n in names if n != covered or names.count(n) > 1)
        return None


def _nested_pairs(
    nested: Any, scope: dict[str, str], parent: dict[str, str], lower: Mapping[str, set[str]]
) -> list[tuple[Member, tuple[str, str]]]:
    """``nested``'s ties to its parent subquery: ``(its member, the parent's (alias,
    column))`` for its ``IN``'s output and each equality between the two scopes."""
    found: list[tuple[Member, tuple[str, str]]] = []
    by_in = in_tie(nested)
    if by_in is not None:
        outer_side = resolve(by_in[0], [parent], lower)
        output = resolve(by_in[1], [scope], lower)
        if outer_side is not None and output is not None:
            found.append((output[1:], outer_side[2:]))
    for conjunct in column_equalities(nested):
        a = resolve(conjunct.this, [scope, parent], lower)
        b = resolve(conjunct.expression, [scope, parent], lower)
        if a is not None and b is not None and {a[0], b[0]} == {0, 1}:
            mine, theirs = (a, b) if a[0] == 0 else (b, a)
            found.append((mine[1:], theirs[2:]))
    return found
