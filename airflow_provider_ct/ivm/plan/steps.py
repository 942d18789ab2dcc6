"""The plan's words: each strategy's reason and its steps, as ``explain`` prints them.

Split from :mod:`.planner`, which decides the strategy: these say what a
decided plan does, for the report, ``report_only`` and the UI, and change
with the docs' wording, not with the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_ct.ivm.plan.block import Block
    from airflow_provider_ct.ivm.plan.in_place import InPlace
    from airflow_provider_ct.ivm.plan.nested import Nested


def in_place_reason(shape: InPlace) -> str:
    if shape.extrema:
        return (
            f"{shape.functions()} kept in place: each affected group's state plus the aggregate "
            "of the signed change; only groups whose MIN/MAX a deletion removed are read again"
        )
    return (
        f"{shape.functions()} kept in place: each affected group's state plus the aggregate "
        "of the signed change, no group recomputed"
    )


def in_place_steps(block: Block, shape: InPlace) -> tuple[str, ...]:
    steps = [
        block_step(0, block, (*block.semi, *block.params)),
        "aggregate the signed change per group: row count, and per argument its sum and "
        "non-NULL count",
        "add it to the groups' kept state; compute their rows; correct only their rows",
    ]
    if block.semi:
        steps.insert(
            1,
            f"semi-joins over {', '.join(block.semi)}: their changes are kept by key on the "
            "driver (the keys entering or leaving the subquery, read at both snapshots); a "
            "tick the driver does not take runs in full",
        )
    if block.params:
        steps.insert(
            1,
            f"scalar subqueries over {', '.join(block.params)} compared with the rows: a value "
            "of each snapshot; the rows whose comparison the new value flips are added or "
            "removed, found on the driver; a tick the driver does not take runs in full",
        )
    if shape.extrema:
        steps[-2] += "; per MIN/MAX, the extremum of the inserted and of the deleted values"
        steps.insert(
            len(steps) - 1,
            "a group whose deleted extremum reaches its kept one (or an inserted one) is read "
            "again from the new inputs, restricted to those groups' keys (by key on the "
            "driver, else one Spark job)",
        )
    return tuple(steps)


def linear_reason(block: Block) -> str:
    if block.left_join is not None:
        return "a LEFT JOIN of two tables: delta rules with the changed join keys"
    if block.outer is not None:
        return (
            f"a join of {len(block.inputs)} tables with outer joins: a delta rule per read, "
            "restricted to the changed join keys where an outer join null-extends rows"
        )
    if len(block.inputs) > 1:
        return f"an inner join of {len(block.inputs)} tables: delta rules"
    return "a projection and filter: the view's change is the query over the input's change"


def block_step(index: int, block: Block, maintained: tuple[str, ...] = ()) -> str:
    """The block's line of the plan; ``maintained``: subquery tables kept in place."""
    rule = "left-join delta rule" if block.left_join else "delta rule per input"
    if block.outer is not None:
        rule = "outer-join delta rules: " + block.outer.explain(block.occurrences)
    step = f"block {index}: reads {', '.join(block.inputs)}; {rule}"
    fixed = [n for n in block.fixed if n not in maintained]
    if fixed and block.keyed:
        step += (
            f"; its subqueries read {', '.join(fixed)}, tied to the block by a key: a tick "
            "that changes them recomputes the rows of the keys the changes hold, from both "
            "snapshots restricted to those keys (fetched by key on the driver when it can); "
            "else by each subquery's own rule when the tables' columns do not confirm the "
            "tie; in full when (refresh='auto') Spark's reads of the keys reach about "
            "every file"
        )
    elif fixed:
        step += (
            f"; its subqueries read {', '.join(fixed)}: fixed filters of the delta rules; "
            "a tick that changes one adds, per changed table, the block's rows as they "
            "were whose subqueries' values it moves, bounded by each subquery's rule "
            "(tied: the rows of the values its changed rows hold in the tie; value: the "
            "rows between its two values; whole: none, and the tick runs in full)"
        )
    return step


def nested_steps(inner: tuple[str, ...], nested: Nested) -> tuple[str, ...]:
    """An in-place inner select's steps, then the outer query's over its rows."""
    outer = ", ".join(nested.outer_inputs) or "nothing else"
    return (
        f"{nested.what} over an aggregate kept in place:",
        *inner[:-1],
        "add it to the groups' kept state; compute every group's row from the state",
        f"recompute the rest of the query over those rows (it also reads {outer}); correct "
        "the target by the difference",
    )
