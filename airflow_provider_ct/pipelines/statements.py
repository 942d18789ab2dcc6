"""The statements of a pipeline's SQL files, each with the file and line it starts on.

A file is cut into statements at the semicolons outside parentheses (a
continual task's body holds its own), with sqlglot's Spark tokenizer, so
comments and strings never cut one. Each statement's header (``CREATE
MATERIALIZED VIEW name (cols) PARTITIONED BY (...) TBLPROPERTIES (...)
COMMENT '...' AS``) is read here from the tokens; the query after ``AS`` is
parsed with sqlglot by :mod:`.datasets`, whose errors are shifted to the
file's lines. SDP's headers are not sqlglot's (``STREAMING TABLE``, ``FLOW``),
which is why the header is ours and the query is sqlglot's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from airflow_provider_ct.exceptions import PipelineError

MATERIALIZED_VIEW = "materialized view"
STREAMING_TABLE = "streaming table"
FLOW = "flow"
TEMPORARY_VIEW = "temporary view"
CONTINUAL_TASK = "continual task"

#: Statements refused by their first words, with what to write instead.
_REFUSED = {
    ("CREATE", "TABLE"): "CREATE TABLE is not supported: a pipeline defines the datasets it "
    "maintains (MATERIALIZED VIEW, STREAMING TABLE); create its input tables outside it",
    ("CREATE", "VIEW"): "a plain CREATE VIEW is not supported: write CREATE MATERIALIZED VIEW "
    "(kept up to date) or CREATE TEMPORARY VIEW (inlined into its readers)",
    ("SET",): "SET is not supported in a pipeline's SQL: put Spark settings under "
    "'configuration:' in the spec file",
}


@dataclass(frozen=True)
class Statement:
    """One ``CREATE ...`` of a SQL file, its header read, its query still text."""

    kind: str
    #: The name as written (lower-cased), qualified or not.
    name: str
    path: str
    line: int
    #: The query after ``AS`` (a flow: the ``SELECT`` after ``INSERT INTO t [BY NAME]``).
    query: str | None = None
    query_line: int = 0
    #: Declared columns: (name, type or None).
    columns: tuple[tuple[str, str | None], ...] = ()
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    comment: str | None = None
    #: A flow's target table.
    target: str | None = None
    #: The whole statement's text (a continual task's definition).
    text: str = ""
    #: The namespace of unqualified names (``USE SCHEMA`` before it, else the spec's).
    database: str | None = None
    #: From a Python file (``@dp.*``): its query is recorded SQL, whose lines are not
    #: the file's, so every error names the decorator's line.
    python: bool = False
    #: Why the dataset is recomputed in full each tick, when its definition says so.
    full_reason: str | None = None
    #: A dataset that reads no table: ``spark.range``'s ``(start, end, step)``.
    constant: tuple[int, int, int] | None = None

    def error(self, message: str, line: int | None = None) -> PipelineError:
        return PipelineError(
            message, path=self.path, line=self.line if self.python else line or self.line
        )


def read_statements(path: Path, shown: str, database: str | None) -> list[Statement]:
    """Every statement of one SQL file, in order; errors name ``shown`` and the line."""
    text = path.read_text()
    try:
        tokens = Spark().tokenize(text)
    except TokenError as exc:
        raise PipelineError(f"does not tokenize as Spark SQL: {exc}", path=shown, line=1) from None
    statements: list[Statement] = []
    for chunk in _split(tokens):
        header = _Header(chunk, text, shown, database)
        use = header.use()
        if use is not None:
            database = use
            continue
        statements.append(header.statement())
    return statements


def _split(tokens: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        if token.token_type == TokenType.SEMICOLON and depth <= 0:
            chunks.append([])
            depth = 0
        else:
            chunks[-1].append(token)
    return [c for c in chunks if c]


class _Header:
    """A cursor over one statement's tokens, reading its header."""

    def __init__(self, tokens: list[Token], text: str, path: str, database: str | None) -> None:
        self.tokens, self.text, self.path, self.database = tokens, text, path, database
        self.at = 0

    # -- the cursor ---------------------------------------------------------
    def _peek(self, offset: int = 0) -> Token | None:
        index = self.at + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def _word(self, offset: int = 0) -> str:
        token = self._peek(offset)
        return token.text.upper() if token is not None else ""

    def _take(self, *words: str) -> bool:
        if all(self._word(i) == w for i, w in enumerate(words)):
            self.at += len(words)
            return True
        return False

    def _error(self, message: str, token: Token | None = None) -> PipelineError:
        token = token or self._peek() or self.tokens[-1]
        return PipelineError(message, path=self.path, line=token.line)

    def _rest(self) -> tuple[str, int]:
        """The text from the cursor to the statement's end, and its first line."""
        first = self._peek()
        if first is None:
            raise self._error("the statement ends where its query should start")
        return self.text[first.start : self.tokens[-1].end + 1], first.line

    def _name(self) -> str:
        token = self._peek()
        if token is None or token.token_type in (TokenType.L_PAREN, TokenType.ALIAS):
            raise self._error("expected a name")
        parts = [token.text]
        self.at += 1
        while self._peek() is not None and self._peek().token_type == TokenType.DOT:  # type: ignore[union-attr]
            following = self._peek(1)
            if following is None:
                raise self._error("a name ends with '.'")
            parts.append(following.text)
            self.at += 2
        return ".".join(parts).lower()

    def _parenthesized(self) -> list[list[Token]]:
        """The comma-separated items of ``( ... )`` at the cursor, as token lists."""
        opening = self._peek()
        if opening is None or opening.token_type != TokenType.L_PAREN:
            raise self._error("expected '('")
        self.at += 1
        items: list[list[Token]] = [[]]
        depth = 1
        while (token := self._peek()) is not None:
            self.at += 1
            if token.token_type == TokenType.L_PAREN:
                depth += 1
            elif token.token_type == TokenType.R_PAREN:
                depth -= 1
                if depth == 0:
                    return [i for i in items if i]
            if token.token_type == TokenType.COMMA and depth == 1:
                items.append([])
            else:
                items[-1].append(token)
        raise self._error("'(' is never closed", opening)

    def _source(self, tokens: list[Token]) -> str:
        return self.text[tokens[0].start : tokens[-1].end + 1]

    # -- statements ---------------------------------------------------------
    def use(self) -> str | None:
        """``USE [SCHEMA|DATABASE] name``: the namespace of later unqualified names."""
        if self._word() != "USE":
            return None
        self.at += 1
        if self._take("CATALOG"):
            raise self._error("USE CATALOG is not supported: give 'catalog:' in the spec file")
        self._take("SCHEMA") or self._take("DATABASE")
        name = self._name()
        if "." in name:
            raise self._error(f"USE {name}: give the namespace alone")
        return name

    def statement(self) -> Statement:
        first = self.tokens[0]
        words = tuple(self._word(i) for i in range(2))
        for prefix, why in _REFUSED.items():
            if words[: len(prefix)] == prefix:
                raise self._error(why, first)
        if not self._take("CREATE"):
            raise self._error(
                f"expected a CREATE statement, got {self._source(self.tokens)[:60]!r}", first
            )
        self._take("OR", "REFRESH") or self._take("OR", "REPLACE")
        base: dict[str, Any] = {"path": self.path, "line": first.line, "database": self.database}
        base["text"] = self._source(self.tokens)
        if self._take("MATERIALIZED", "VIEW"):
            return self._dataset(MATERIALIZED_VIEW, base)
        if self._take("STREAMING", "TABLE"):
            return self._dataset(STREAMING_TABLE, base)
        if self._take("TEMPORARY", "VIEW") or self._take("TEMP", "VIEW"):
            return self._dataset(TEMPORARY_VIEW, base)
        if self._take("FLOW"):
            return self._flow(base)
        if self._take("CONTINUAL", "TASK"):
            return Statement(CONTINUAL_TASK, self._name(), **base)
        if self._word() in ("TABLE", "VIEW"):
            raise self._error(_REFUSED[("CREATE", self._word())], first)
        raise self._error(
            f"unsupported statement {self._source(self.tokens[:4])!r}: a pipeline holds CREATE "
            "MATERIALIZED VIEW, STREAMING TABLE, FLOW, TEMPORARY VIEW and CONTINUAL TASK",
            first,
        )

    def _dataset(self, kind: str, base: dict[str, Any]) -> Statement:
        self._take("IF", "NOT", "EXISTS")
        name = self._name()
        clauses: dict[str, Any] = {}
        if self._peek() is not None and self._peek().token_type == TokenType.L_PAREN:  # type: ignore[union-attr]
            clauses["columns"] = tuple(self._column(item) for item in self._parenthesized())
        while (token := self._peek()) is not None and token.token_type != TokenType.ALIAS:
            self._clause(kind, clauses)
        if self._peek() is None:
            if kind != STREAMING_TABLE:
                raise self._error(f"{kind} {name} has no AS query", self.tokens[0])
            return Statement(kind, name, **base, **clauses)  # a target of flows
        self.at += 1  # AS
        query, line = self._rest()
        return Statement(kind, name, query=query, query_line=line, **base, **clauses)

    def _clause(self, kind: str, clauses: dict[str, Any]) -> None:
        token = self._peek()
        assert token is not None
        if kind != TEMPORARY_VIEW and (
            token.token_type == TokenType.PARTITION_BY or self._take("PARTITIONED", "BY")
        ):
            if token.token_type == TokenType.PARTITION_BY:
                self.at += 1
            items = self._parenthesized()
            clauses["partition_by"] = tuple(self._source(i) for i in items)
        elif kind != TEMPORARY_VIEW and self._take("TBLPROPERTIES"):
            clauses["properties"] = dict(self._property(i) for i in self._parenthesized())
        elif token.token_type == TokenType.COMMENT:
            following = self._peek(1)
            if following is None or following.token_type != TokenType.STRING:
                raise self._error("COMMENT needs a string")
            clauses["comment"] = following.text
            self.at += 2
        else:
            raise self._error(
                f"unexpected {token.text!r} in CREATE {kind.upper()}: expected a column list, "
                "PARTITIONED BY, TBLPROPERTIES, COMMENT or AS",
                token,
            )

    def _column(self, tokens: list[Token]) -> tuple[str, str | None]:
        name = tokens[0].text.lower()
        rest = [t for t in tokens[1:]]
        for index, token in enumerate(rest):  # drop COMMENT '...', NOT NULL
            if token.token_type in (TokenType.COMMENT, TokenType.NOT):
                rest = rest[:index]
                break
        return name, self._source(rest) if rest else None

    def _property(self, tokens: list[Token]) -> tuple[str, str]:
        eq = next((i for i, t in enumerate(tokens) if t.token_type == TokenType.EQ), None)
        if eq is None or eq == 0 or eq == len(tokens) - 1:
            raise self._error("TBLPROPERTIES expects 'key' = 'value' pairs", tokens[0])
        key = "".join(t.text for t in tokens[:eq])
        return key, "".join(t.text for t in tokens[eq + 1 :])

    def _flow(self, base: dict[str, Any]) -> Statement:
        name = self._name()
        if self._peek() is not None and self._peek().token_type == TokenType.COMMENT:  # type: ignore[union-attr]
            self.at += 2
        if not self._take("AS", "INSERT", "INTO"):
            raise self._error(f"expected CREATE FLOW {name} AS INSERT INTO <table> SELECT ...")
        target = self._name()
        self._take("BY", "NAME")
        query, line = self._rest()
        return Statement(FLOW, name, query=query, query_line=line, target=target, **base)
