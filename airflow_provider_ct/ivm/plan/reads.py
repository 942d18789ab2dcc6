"""Each read of a table in a block, keyed: a table read twice is two inputs of the rules."""

from __future__ import annotations


def occurrence_key(name: str, index: int) -> str:
    """The key of the ``index``-th (0-based) read of input ``name`` in a block.

    Why: the delta rules bind each *read* of a table, not each table: in
    ``Δ(A⋈A')`` the first read's change joins the second read as it was and
    the second's joins the first as it is now. The first read keeps the
    input's name, so a binding keyed by names binds every read alike.
    """
    return name if index == 0 else f"{name}#{index + 1}"


def occurrence_keys(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """:func:`occurrence_key` of each name, counting the reads of each input in order."""
    seen: dict[str, int] = {}
    keys = []
    for name in names:
        keys.append(occurrence_key(name, seen.get(name, 0)))
        seen[name] = seen.get(name, 0) + 1
    return tuple(keys)


def subquery_key(name: str) -> str:
    """The key of every read of input ``name`` inside a block's subqueries.

    Why apart from :func:`occurrence_key`: a tick that changes a table read
    in a subquery applies that change with the block's own reads as they
    were (:mod:`.subquery_changes`), so the subquery's read of a table the
    block reads too needs a binding of its own.
    """
    return f"{name}@sub"
