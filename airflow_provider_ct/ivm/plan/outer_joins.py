"""A block's chain of joins with outer joins in it: the rule each read's change follows.

The ``linear`` strategy sums, per read of a table, the query over that
read's change (the reads before it as they are now, the ones after it as
they were). That is exact for a read every join above it is *linear* in:
the right side of an inner join or of a ``RIGHT JOIN``, the left side of an
inner join or of a ``LEFT JOIN`` (each of its rows produces its output rows
on its own). Elsewhere a changed row also changes *other* rows of the
output: losing the last match null-extends a preserved row, gaining one
removes the null-extended row. For those reads this module names, before
any work, the one table whose rows such a change can reach, and the key
that bounds them.

Joins associate to the left (``((T0 J1 T1) J2 T2) ...``). For the read at
position ``p``, the joins on its way to the result are ``Jp`` (it is the
right side) and every later ``Jq`` (its subtree is the left side). A read
with no non-linear join on that way is *plain*. A read with exactly one is
*restricted*: the query is evaluated twice, over the read as it is and as
it was, with one other read restricted to the keys the change holds, and
the difference is the read's share of the view's change:

- ``Jp`` is a ``LEFT``/``FULL JOIN`` (the read is its optional or one full
  side): the table on the other side of ``Jp``'s first equality (``Tj.c =
  Tp.d``, ``j < p``) is restricted to the values of ``d`` the change holds.
  Left-side rows with other values of ``c`` match no changed row, so their
  output is the same in both evaluations; a row the restriction null-extends
  has ``c`` NULL, matches nothing in either, and cancels.
- a later ``Jq`` is a ``RIGHT``/``FULL JOIN`` whose equality ties ``Tq`` to
  a column ``c`` of this very read: ``Tq`` is restricted to the values of
  ``c`` the change holds (the left side's rows that change are exactly the
  rows of changed ``Tp`` rows, since ``Tp`` is linear below ``Jq``).

Either way every join above the restricted one is linear, so each row's
output is its own and the rows the restriction drops or null-extends give
the same output in both evaluations. The changing read itself is
restricted too (null-safe: a changed row with a NULL key is kept), which
only drops rows that match nothing restricted in either evaluation. Both
narrowings only save work (the difference over the whole reads is the
same), so a read whose table a subquery of the block also reads is not
narrowed: the subquery's read is bound as that table is, and must see
every row.

Refused, with the reason: a read with two non-linear joins on its way, a
``RIGHT``/``FULL JOIN`` tied to a read other than the changing one, an
outer join with no equality of a column of each side, and a ``RIGHT`` or
``FULL JOIN`` after a cross or comma join (Spark binds ``a, b RIGHT JOIN
c`` as ``a, (b RIGHT JOIN c)``, not as the chain read left to right).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from airflow_provider_ct.ivm.plan.refusals import NotIncremental

INNER = "INNER"
LEFT = "LEFT"
RIGHT = "RIGHT"
FULL = "FULL"
OUTER_KINDS = (LEFT, RIGHT, FULL)


@dataclass(frozen=True)
class KeyPair:
    """One ``ON`` equality of a join: a column of an earlier read and one of the joined read."""

    owner: int
    owner_column: str
    column: str


@dataclass(frozen=True)
class JoinStep:
    """The join that brings in the read at ``position`` (1-based in the chain)."""

    position: int
    kind: str
    pairs: tuple[KeyPair, ...] = ()


@dataclass(frozen=True)
class ReadRule:
    """How a change of the read at ``position`` is maintained (see the module docstring).

    ``restricted is None``: plain, the query over the read's change. Else
    the read at ``restricted`` is narrowed to its ``restricted_column``
    values found in the change's ``change_column``, and the query runs
    over the changing read as it is and as it was (itself narrowed on
    ``change_column``, null-safe).
    """

    position: int
    restricted: int | None = None
    restricted_column: str = ""
    change_column: str = ""
    #: Whether the two reads are narrowed to the keys (an optimisation: the difference is
    #: the same over whole reads); not when a subquery reads a table of theirs, whose
    #: reads are bound alike and must see every row.
    narrowed: bool = True

    def explain(self, reads: tuple[str, ...]) -> str:
        name = reads[self.position]
        if self.restricted is None:
            return f"{name}: the query over its change"
        if not self.narrowed:
            return f"{name}: the query over it now minus as it was (whole: a subquery reads it)"
        return (
            f"{name}: the query over it now minus as it was, {reads[self.restricted]} "
            f"restricted to the {self.restricted_column} values of the changed "
            f"{self.change_column}"
        )


@dataclass(frozen=True)
class OuterJoins:
    """A block's joins (one per read after the first) and the rule of each read's change."""

    steps: tuple[JoinStep, ...]
    rules: tuple[ReadRule, ...]

    def explain(self, reads: tuple[str, ...]) -> str:
        kinds = ", ".join(f"{s.kind} JOIN {reads[s.position]}" for s in self.steps)
        return f"joins {kinds}; per read: " + "; ".join(r.explain(reads) for r in self.rules)


def outer_joins(
    joins: list[Any], tables: list[Any], names: list[str], fixed: tuple[str, ...] = ()
) -> OuterJoins:
    """The block's chain of joins and a rule for a change of each of its reads.

    :param joins: the select's joins, in order; ``tables``: its FROM table and
        each joined one; ``names``: their inputs; ``fixed``: the inputs its
        subqueries read. Raises :class:`NotIncremental`.
    """
    aliases = [t.alias_or_name.lower() for t in tables]
    steps = tuple(_step(i + 1, join, aliases) for i, join in enumerate(joins))
    crossed = False
    for step, join in zip(steps, joins, strict=True):
        if step.kind in (RIGHT, FULL) and crossed:
            raise NotIncremental(
                f"a {step.kind} JOIN after a cross or comma join is recomputed in full"
            )
        crossed = crossed or (join.kind or "").upper() == "CROSS"
    rules = tuple(_rule(p, steps, aliases) for p in range(len(names)))
    rules = tuple(
        replace(r, narrowed=False)
        if r.restricted is not None and {names[r.position], names[r.restricted]} & set(fixed)
        else r
        for r in rules
    )
    return OuterJoins(steps, rules)


def _step(position: int, join: Any, aliases: list[str]) -> JoinStep:
    """The join bringing in read ``position``: its kind and, for an outer join, its keys."""
    side = (join.side or "").upper()
    if not side:
        return JoinStep(position, INNER)
    on = join.args.get("on")
    if on is None or on.find(exp.Subquery):
        raise NotIncremental(f"a {side} JOIN whose ON is missing or holds a subquery")
    on = on.unnest()  # ON (a = b AND c = d), as TPC-DS writes it
    conjuncts = [c.unnest() for c in on.flatten()] if isinstance(on, exp.And) else [on]
    earlier = {a: i for i, a in enumerate(aliases[:position])}
    pairs = tuple(p for c in conjuncts if (p := _pair(c, aliases[position], earlier)) is not None)
    if not pairs:
        raise NotIncremental(
            f"a {side} JOIN whose ON has no equality of a column of each side, both qualified"
        )
    return JoinStep(position, side, pairs)


def _pair(conjunct: Any, joined: str, earlier: dict[str, int]) -> KeyPair | None:
    """``earlier.x = joined.y`` (either order) as a :class:`KeyPair`; anything else ``None``."""
    if not isinstance(conjunct, exp.EQ):
        return None
    left, right = conjunct.this, conjunct.expression
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return None
    if right.table.lower() != joined:
        left, right = right, left
    owner = earlier.get(left.table.lower())
    if right.table.lower() != joined or owner is None:
        return None
    return KeyPair(owner, left.name, right.name)


def _rule(position: int, steps: tuple[JoinStep, ...], aliases: list[str]) -> ReadRule:
    """The rule of read ``position``'s change, or :class:`NotIncremental` naming the join."""
    crossing = []
    if position >= 1 and steps[position - 1].kind in (LEFT, FULL):
        crossing.append(steps[position - 1])
    crossing += [s for s in steps[position:] if s.kind in (RIGHT, FULL)]
    if not crossing:
        return ReadRule(position)
    alias = aliases[position]
    if len(crossing) > 1:
        raise NotIncremental(
            f"a change of {alias} reaches two outer joins ({crossing[0].kind} and "
            f"{crossing[1].kind}): recomputed in full"
        )
    step = crossing[0]
    if step.position == position:
        pair = step.pairs[0]
        return ReadRule(position, pair.owner, pair.owner_column, pair.column)
    own = [p for p in step.pairs if p.owner == position]
    if not own:
        raise NotIncremental(
            f"the {step.kind} JOIN of {aliases[step.position]} is not tied to {alias} by an "
            f"equality, so a change of {alias} does not bound the rows it moves: recomputed "
            "in full"
        )
    return ReadRule(position, step.position, own[0].column, own[0].owner_column)
