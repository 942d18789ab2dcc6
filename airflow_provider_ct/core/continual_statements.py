"""A continual task's statements, checked as far as the definition alone allows.

Materialize plans a continual task's statements at ``CREATE`` and refuses a
definition there; the DAG-parse equivalent here is this module, which needs
no catalog and no JVM. It refuses what the text alone shows to be wrong:

* a statement that is not ``DELETE FROM <output>`` or ``INSERT INTO <output>
  SELECT ...``;
* an ``INSERT`` whose ``SELECT`` is too wide or too narrow for the target
  columns, counted before ``*`` is expanded where the count is certain (a
  ``*`` stands for at least one column, so ``SELECT *, 'x'`` into one column
  is already too wide; ``SELECT FROM t`` into any is too narrow);
* a task without a column list that reads its own output (its columns could
  only be guessed) or whose ``INSERT``\\ s disagree on their width.

What needs the tables' schemas (a ``*``'s width, the types) is checked by
the job before it creates or writes anything
(:mod:`airflow_provider_ct.spark.continual_types`). Every message starts
with ``statement N`` (counted from 1) and quotes the statement as written,
never the rewritten query the job runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from airflow_provider_ct.exceptions import QueryError

#: Materialize's words for an INSERT whose widths differ.
MORE_EXPRESSIONS = "INSERT has more expressions than target columns"
MORE_TARGETS = "INSERT has more target columns than expressions"


@dataclass(frozen=True)
class Statement:
    kind: str  # "delete" or "insert"
    #: The parsed statement (sqlglot, Spark dialect), table names qualified.
    expression: Any
    #: For INSERT with a column list: the target columns, in order.
    columns: tuple[str, ...] = ()
    #: Its number in the definition, from 1.
    index: int = 0
    #: The statement as written (shortened), for error messages.
    text: str = ""
    #: True when it reads the task's output (every DELETE does).
    reads_output: bool = False

    @property
    def label(self) -> str:
        """``statement N (text)``: how every error names this statement."""
        return f"statement {self.index} ({self.text})"


def _table_name(table: exp.Table) -> str:
    return f"{table.db}.{table.name}".lower()


def _reads(tree: Any, output: str) -> bool:
    return any(_table_name(t) == output for t in tree.find_all(exp.Table) if t.db)


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 100 else flat[:97] + "..."


def classify(tree: Any, index: int, text: str, output: str) -> Statement:
    """One statement of the body: a DELETE from or an INSERT into the output."""
    text = _shorten(text)
    if isinstance(tree, exp.Delete):
        target = tree.this
        if isinstance(target, exp.Table) and _table_name(target) == output:
            return Statement("delete", tree, (), index, text, reads_output=True)
    elif isinstance(tree, exp.Insert):
        target = tree.this
        cols: tuple[str, ...] = ()
        if isinstance(target, exp.Schema):
            cols = tuple(c.name.lower() for c in target.expressions)
            target = target.this
        if isinstance(target, exp.Table) and _table_name(target) == output:
            if not isinstance(tree.expression, exp.Query):
                raise QueryError(f"statement {index} ({text}) must INSERT INTO {output} SELECT ...")
            reads = _reads(tree.expression, output)
            return Statement("insert", tree, cols, index, text, reads_output=reads)
    raise QueryError(
        f"statement {index} ({text}) must be DELETE FROM {output} ... or INSERT INTO "
        f"{output} SELECT ..."
    )


def projection_width(statement: Statement) -> tuple[int, bool]:
    """(columns the SELECT names, whether a ``*`` may add more).

    A ``*`` (or ``t.*``) counts as one: it expands to at least one column.
    """
    query = statement.expression.expression
    projected = list(query.selects)
    stars = sum(1 for p in projected if isinstance(p, exp.Star) or p.find(exp.Star))
    return len(projected), stars > 0


def width_error(statement: Statement, produced: int, targets: list[str]) -> QueryError:
    """The error for an INSERT producing ``produced`` columns into ``targets``."""
    words = MORE_EXPRESSIONS if produced > len(targets) else MORE_TARGETS
    return QueryError(
        f"{statement.label}: {words} ({produced} expression(s) for {len(targets)} target "
        f"column(s): {', '.join(targets)})"
    )


def check_widths(statements: list[Statement], names: list[str]) -> None:
    """Refuse an INSERT whose SELECT cannot fit its target columns (``names``: declared)."""
    for statement in statements:
        if statement.kind != "insert":
            continue
        unknown = [c for c in statement.columns if c not in names]
        if unknown:
            raise QueryError(f"{statement.label} inserts unknown columns {unknown}")
        targets = list(statement.columns) or names
        produced, star = projection_width(statement)
        if produced > len(targets) or (produced < len(targets) and not star):
            raise width_error(statement, produced, targets)


def check_inferred(statements: list[Statement], name: str) -> None:
    """A task without a column list: its INSERTs must agree and not read the output.

    Materialize guesses such a task's columns to be its input's when a
    statement reads the output, and refuses it later if the guess is wrong;
    here the column list is required outright (docs/continual-tasks.md).
    """
    for statement in statements:
        if statement.reads_output:
            raise QueryError(
                f"{statement.label} reads the task's own output {name}, so the task must "
                f"declare its columns: CREATE CONTINUAL TASK {name.split('.')[-1]} "
                "(col type, ...) ON INPUT ..."
            )
        if statement.columns:
            raise QueryError(
                f"{statement.label} names target columns, but the task declares none: "
                "declare the task's columns or drop the INSERT's column list"
            )
    first: tuple[Statement, int] | None = None
    for statement in statements:
        produced, star = projection_width(statement)
        if produced == 0:
            raise QueryError(
                f"{statement.label} selects no columns: a task without a column list "
                "takes its columns from its INSERTs' SELECTs"
            )
        if star:
            continue  # widths compared by the job, once the * is expanded
        if first is None:
            first = (statement, produced)
        elif produced != first[1]:
            targets = [f"column {i + 1}" for i in range(first[1])]
            raise width_error(statement, produced, targets)
