"""A block's filter and expressions over Arrow rows, with Spark's results or not at all.

In-place aggregates over one input need, per changed row, the block's
``WHERE``, grouping keys and aggregate arguments: small work that a Spark
job costs 0.1-0.9 s for. This evaluates them with ``pyarrow.compute`` on the
driver, for a deliberately small part of Spark SQL: columns, literals,
``CAST``, ``+ - *``, ``/`` of decimals, and unary minus, comparisons, ``AND``/``OR``/``NOT``
(three-valued), ``IS [NOT] NULL``, ``BETWEEN``, ``IN (literals)``, ``CASE
WHEN``, ``COALESCE``, ``LIKE``. Anything else raises :class:`NotOnDriver` and the tick
asks Spark.

Spark's semantics are kept by construction rather than re-implemented:
the caller gives every node's Spark type (Spark's analyzer computes them
for one ``SELECT`` of the nodes, without running a job), each node is
computed exactly by Arrow and then cast *safely* to that type. Where Spark
rounds by rule (a decimal ``+ - * /`` whose scale its type reduced: half
up, :func:`_rounded` and :mod:`.spark_division`) the exact value is
rounded so first; anything else Spark would have rounded (a ``CAST`` to
a smaller scale), or an integer Spark would have wrapped, does not survive
a safe cast: the evaluation stops with :class:`NotOnDriver` instead of
giving another answer. Floating-point nodes are refused (their results depend on the
order of operations).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from airflow_provider_ct.ivm.driver.spark_division import spark_divide


class NotOnDriver(Exception):
    """This expression, type or value is left to Spark; the message says which."""


Value = Any  # a pyarrow Array, ChunkedArray or Scalar

_COMPARE: dict[type, str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
}
_ARITHMETIC: dict[type, str] = {
    exp.Add: "add_checked",
    exp.Sub: "subtract_checked",
    exp.Mul: "multiply_checked",
}


def node_key(node: Any) -> str:
    """The name a node's Spark type is looked up by: its Spark SQL."""
    return str(node.sql(dialect="spark"))


def typed_nodes(nodes: list[Any]) -> list[Any]:
    """Every sub-expression of ``nodes`` whose Spark type the evaluation needs, once each."""
    seen: dict[str, Any] = {}
    for root in nodes:
        for node in root.walk():
            if isinstance(node, _TYPED):
                seen.setdefault(node_key(node), node)
    return list(seen.values())


#: The nodes whose values are cast to their Spark type (the others are boolean logic).
_TYPED = (
    exp.Column,
    exp.Literal,
    exp.Null,
    exp.Cast,
    exp.Neg,
    exp.Case,
    exp.Coalesce,
    exp.Extract,
    exp.Div,
    *_ARITHMETIC,
)


class ArrowEvaluator:
    """Evaluates expressions over ``rows`` (one input's columns) with Spark's types.

    :param rows: the input's rows; columns are matched case-insensitively,
        and a qualifier must be ``alias`` (the block reads one table).
    :param types: :func:`node_key` -> the Arrow type of the node's Spark type.
    """

    def __init__(
        self,
        rows: pa.Table,
        alias: str,
        types: Mapping[str, pa.DataType],
        names: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        self.rows = rows
        self.alias = alias.lower()
        self.types = types
        #: (qualifier or "", column), lower-cased -> the rows' column.
        self._names = dict(names) if names is not None else {}
        if names is None:
            for name in rows.column_names:
                self._names[(self.alias, name.lower())] = name
                self._names[("", name.lower())] = name
        self._rules: dict[type, Callable[[Any], Value]] = {
            exp.Column: self._column,
            exp.Literal: self._literal,
            exp.Boolean: lambda node: pa.scalar(bool(node.this)),
            exp.Null: lambda node: self._typed(pa.scalar(None), node),
            exp.Cast: self._cast,
            exp.TryCast: self._cast,
            exp.Neg: lambda node: self._typed(pc.negate_checked(self.value(node.this)), node),
            exp.And: lambda node: pc.and_kleene(self.value(node.left), self.value(node.right)),
            exp.Or: lambda node: pc.or_kleene(self.value(node.left), self.value(node.right)),
            exp.Not: lambda node: pc.invert(self.value(node.this)),
            exp.Is: self._is_null,
            exp.Between: self._between,
            exp.In: self._in,
            exp.Case: self._case,
            exp.Coalesce: self._coalesce,
            exp.Like: self._like,
            exp.Extract: self._extract,
            exp.Substring: self._substring,
            exp.Upper: lambda node: self._ascii_case(node, pc.utf8_upper),
            exp.Lower: lambda node: self._ascii_case(node, pc.utf8_lower),
            exp.DPipe: self._concat,
            exp.Concat: self._concat,
            exp.Div: self._divide,
        }

    @classmethod
    def joined(cls, rows: pa.Table, types: Mapping[str, pa.DataType]) -> ArrowEvaluator:
        """Over joined rows whose columns are named ``alias.column`` (:mod:`.driver_join`).

        A qualified column is found by its alias; an unqualified one when
        exactly one alias has it (Spark's analysis refused the others).
        """
        names: dict[tuple[str, str], str] = {}
        owners: dict[str, list[str]] = {}
        for name in rows.column_names:
            alias, _, column = name.lower().partition(".")
            names[(alias, column)] = name
            owners.setdefault(column, []).append(name)
        names.update({("", c): found[0] for c, found in owners.items() if len(found) == 1})
        return cls(rows, "", types, names)

    def value(self, node: Any) -> Value:
        """``node`` over every row (an array) or as a constant (a scalar)."""
        while isinstance(node, exp.Paren):
            node = node.this
        rule = self._rules.get(type(node))
        if node.args.get("negate") and type(node) is not exp.Like:  # a NOT folded into a node
            raise NotOnDriver(f"{node_key(node)}: a negated {type(node).__name__} is Spark's")
        try:
            if rule is not None:
                return rule(node)
            if type(node) in _COMPARE:
                return self._compare(node)
            if type(node) in _ARITHMETIC:
                return self._arithmetic(node)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise NotOnDriver(f"{node_key(node)}: {exc}") from None
        raise NotOnDriver(f"{type(node).__name__} ({node_key(node)}) is evaluated by Spark")

    def mask(self, condition: Any) -> pa.Array:
        """Rows a ``WHERE`` keeps: where it is true (not false, not NULL)."""
        kept = self.value(condition)
        if isinstance(kept, pa.Scalar):
            kept = pa.array([kept.as_py()] * self.rows.num_rows, pa.bool_())
        kept = pc.fill_null(kept, False)
        return kept.combine_chunks() if isinstance(kept, pa.ChunkedArray) else kept

    def column(self, node: Any) -> pa.Array:
        """``node`` as one value per row, of its Spark type."""
        out = self.value(node)
        if isinstance(out, pa.Scalar):
            return pa.array([out.as_py()] * self.rows.num_rows, out.type)
        return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out

    # -- typing ---------------------------------------------------------------------------
    def _spark_type(self, node: Any) -> pa.DataType:
        found = self.types.get(node_key(node))
        if found is None:
            raise NotOnDriver(f"no Spark type for {node_key(node)}")
        if pa.types.is_floating(found):
            raise NotOnDriver(f"{node_key(node)} is floating point")
        return found

    def _typed(self, value: Value, node: Any) -> Value:
        """``value`` as the node's Spark type, if that loses nothing (else Spark decides)."""
        target = self._spark_type(node)
        if value.type == target:
            return value
        try:
            if pa.types.is_integer(value.type) and pa.types.is_decimal(target):
                # Arrow sizes an integer's decimal by its type, not its values: widen first.
                value = value.cast(pa.decimal128(38, min(target.scale, 18)), safe=True)
            return value.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise NotOnDriver(f"{node_key(node)} as {target}: {exc}") from None

    # -- rules ----------------------------------------------------------------------------
    def _column(self, node: Any) -> Value:
        name = self._names.get((node.table.lower(), node.name.lower()))
        if name is None or node.args.get("db"):
            raise NotOnDriver(f"column {node_key(node)} is not one of the input's")
        return self._typed(self.rows.column(name), node)

    def _literal(self, node: Any) -> Value:
        if node.is_string:
            return self._typed(pa.scalar(node.this, pa.string()), node)
        target = self._spark_type(node)
        if pa.types.is_decimal(target):
            from decimal import Decimal

            return pa.scalar(Decimal(node.this), target)
        if pa.types.is_integer(target):
            return pa.scalar(int(node.this), target)
        raise NotOnDriver(f"literal {node.this} of type {target}")

    def _cast(self, node: Any) -> Value:
        return self._typed(self.value(node.this), node)

    def _compare(self, node: Any) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        return self._compared(_COMPARE[type(node)], left, right, node)

    def _compared(self, function: str, left: Value, right: Value, node: Any) -> Value:
        """``left <function> right``; NULL (of no type) against anything is NULL."""
        if pa.types.is_null(left.type) or pa.types.is_null(right.type):
            return pa.nulls(self.rows.num_rows, pa.bool_())
        _comparable(left.type, right.type, node)
        left, right = _bounded(left, right, node)
        return pc.call_function(function, [left, right])

    def _arithmetic(self, node: Any) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        if pa.types.is_decimal(left.type) or pa.types.is_decimal(right.type):
            left, right = _as_decimal(left), _as_decimal(right)
        function = _ARITHMETIC[type(node)]
        try:
            out = pc.call_function(function, [left, right])
        except pa.ArrowInvalid:  # past 38 digits: exactly, in 76
            out = pc.call_function(function, [_wide(left), _wide(right)])
        return self._typed(_rounded(out, self._spark_type(node)), node)

    def _divide(self, node: Any) -> Value:
        """A decimal ``/``, row by row as Spark rounds it (:mod:`.spark_division`)."""
        target = self._spark_type(node)  # an integer division is a double: refused there
        if not pa.types.is_decimal(target):
            raise NotOnDriver(f"{node_key(node)} of type {target}")
        count = self.rows.num_rows
        lefts = _python(self.value(node.left), count)
        rights = _python(self.value(node.right), count)
        if any(r is not None and r == 0 for r in rights):
            raise NotOnDriver(f"{node_key(node)} by zero: Spark's NULL, or its error under ANSI")
        quotients = [
            None if a is None or b is None else spark_divide(a, b, target.precision, target.scale)
            for a, b in zip(lefts, rights, strict=True)
        ]
        return pa.array(quotients, target)

    def _is_null(self, node: Any) -> Value:
        if not isinstance(node.expression, exp.Null):
            raise NotOnDriver(f"{node_key(node)} is evaluated by Spark")
        return pc.is_null(self.value(node.this))

    def _between(self, node: Any) -> Value:
        value = self.value(node.this)
        low, high = self.value(node.args["low"]), self.value(node.args["high"])
        above = self._compared("greater_equal", value, low, node)
        return pc.and_kleene(above, self._compared("less_equal", value, high, node))

    def _in(self, node: Any) -> Value:
        if node.args.get("query") is not None or not node.expressions:
            raise NotOnDriver(f"{node_key(node)} is evaluated by Spark")
        value = self.value(node.this)
        out: Value | None = None
        for item in node.expressions:
            hit = self._compared("equal", value, self.value(item), node)
            out = hit if out is None else pc.or_kleene(out, hit)
        assert out is not None
        return out

    def _case(self, node: Any) -> Value:
        if node.this is not None:  # CASE x WHEN ...: left to Spark
            raise NotOnDriver(f"{node_key(node)} is evaluated by Spark")
        target = self._spark_type(node)
        whens = node.args.get("ifs") or []
        conditions = [pc.fill_null(self.column(w.this), False) for w in whens]
        values = [_cast_to(self.column(w.args["true"]), target, node) for w in whens]
        default = node.args.get("default")
        if default is not None:
            values.append(_cast_to(self.column(default), target, node))
        struct = pa.StructArray.from_arrays(conditions, [f"c{i}" for i in range(len(whens))])
        return pc.case_when(struct, *values)

    def _coalesce(self, node: Any) -> Value:
        """``COALESCE(a, b, ...)``: each operand as the node's Spark type, the first not NULL."""
        target = self._spark_type(node)
        operands = [node.this, *node.expressions]
        return pc.coalesce(*[_cast_to(self.column(o), target, node) for o in operands])

    def _extract(self, node: Any) -> Value:
        """``EXTRACT(YEAR|QUARTER|MONTH|DAY FROM d)`` of a date (TPC-H q7, q8, q9's keys).

        Only of a ``DATE``: a timestamp's parts depend on the session's time
        zone, which Spark applies and Arrow would not.
        """
        part = node.this.name.upper() if isinstance(node.this, exp.Var) else ""
        function = _DATE_PARTS.get(part)
        if function is None:
            raise NotOnDriver(f"{node_key(node)}: the part {part or node.this} is Spark's")
        value = self.value(node.expression)
        if not pa.types.is_date(value.type):
            raise NotOnDriver(f"{node_key(node)}: a part of {value.type}, not of a date")
        return self._typed(pc.call_function(function, [value]), node)

    def _substring(self, node: Any) -> Value:
        """``SUBSTRING(s, start[, length])`` with constant ``start >= 1`` (TPC-H q22's key).

        Spark counts characters (code points), as Arrow's slice does; a start
        below 1 (counted from the end, or Spark's own reading of 0) is Spark's.
        """
        start, length = _count(node.args.get("start")), node.args.get("length")
        count = _count(length) if length is not None else None
        if start is None or start < 1 or (length is not None and count is None):
            raise NotOnDriver(f"{node_key(node)}: only constant positions from 1 on")
        value = self.value(node.this)
        if not pa.types.is_string(value.type) and not pa.types.is_large_string(value.type):
            raise NotOnDriver(f"{node_key(node)}: a substring of {value.type}")
        stop = None if count is None else start - 1 + count
        return pc.utf8_slice_codeunits(value, start=start - 1, stop=stop)

    def _ascii_case(self, node: Any, convert: Callable[[Value], Value]) -> Value:
        """``UPPER``/``LOWER`` of ASCII strings: Java's case mapping and Unicode's differ
        beyond ASCII (``'ß'``), so any other string is Spark's."""
        value = self._string(node.this, node)
        if not _ascii(value):
            raise NotOnDriver(f"{node_key(node)}: a string beyond ASCII")
        return convert(value)

    def _concat(self, node: Any) -> Value:
        """``a || b`` and ``CONCAT(a, b, ...)`` of strings: NULL when any operand is."""
        operands = [node.this, node.expression] if type(node) is exp.DPipe else node.expressions
        values = [self.column(o) if not _constant(o) else self.value(o) for o in operands]
        values = [self._string_value(v, node) for v in values]
        if not values:
            raise NotOnDriver(f"{node_key(node)}: CONCAT of nothing")
        return pc.binary_join_element_wise(*values, "", null_handling="emit_null")

    def _string(self, operand: Any, node: Any) -> Value:
        return self._string_value(self.value(operand), node)

    @staticmethod
    def _string_value(value: Value, node: Any) -> Value:
        if not (pa.types.is_string(value.type) or pa.types.is_large_string(value.type)):
            raise NotOnDriver(f"{node_key(node)}: of {value.type}, which Spark casts")
        return value

    def _like(self, node: Any) -> Value:
        pattern = node.expression
        constant = isinstance(pattern, exp.Literal) and pattern.is_string
        if not constant or node.args.get("escape") or "\\" in pattern.this:
            raise NotOnDriver(f"{node_key(node)}: only a constant pattern without escapes")
        value = self.value(node.this)
        if not pa.types.is_string(value.type) and not pa.types.is_large_string(value.type):
            raise NotOnDriver(f"{node_key(node)}: LIKE of a non-string")
        found = pc.match_like(value, pattern.this)
        # sqlglot spells ``x NOT LIKE p`` as a LIKE node that says ``negate``, not as NOT.
        return pc.invert(found) if node.args.get("negate") else found


def _ascii(value: Value) -> bool:
    """Whether every string of ``value`` (an array or a scalar; NULLs aside) is ASCII."""
    if isinstance(value, pa.Scalar):
        return not value.is_valid or str(value.as_py()).isascii()
    return bool(pc.all(pc.string_is_ascii(value)).as_py() is not False)


def _constant(node: Any) -> bool:
    """A literal operand (kept a scalar, so it joins every row's value)."""
    return isinstance(node, exp.Literal | exp.Null)


def _count(node: Any) -> int | None:
    """A non-negative integer literal's value, else None."""
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this)
    return None


#: Date parts ``EXTRACT`` takes on the driver, and the Arrow function of each.
_DATE_PARTS = {"YEAR": "year", "QUARTER": "quarter", "MONTH": "month", "DAY": "day"}


def _comparable(left: pa.DataType, right: pa.DataType, node: Any) -> None:
    """Both numbers, or the same kind (Spark's implicit casts between others are its own)."""
    if _numeric(left) and _numeric(right):
        return
    strings = (pa.types.is_string, pa.types.is_large_string)
    if any(s(left) for s in strings) and any(s(right) for s in strings):
        return
    if left == right and (pa.types.is_date(left) or pa.types.is_boolean(left)):
        return
    raise NotOnDriver(f"{node_key(node)} compares {left} with {right}")


def _bounded(left: Value, right: Value, node: Any) -> tuple[Value, Value]:
    """Two decimals whose common type passes 38 digits, as Spark compares them: both cast
    to 38 digits at the larger scale (a value that does not fit is Spark's NULL or error:
    refused); other operands as they are."""
    lt, rt = left.type, right.type
    if not (pa.types.is_decimal(lt) and pa.types.is_decimal(rt)):
        return left, right
    scale = max(lt.scale, rt.scale)
    if max(lt.precision - lt.scale, rt.precision - rt.scale) + scale <= 38:
        return left, right
    target = pa.decimal128(38, scale)
    return _cast_to(left, target, node), _cast_to(right, target, node)


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_decimal(kind)


def _as_decimal(value: Value) -> Value:
    """An integer operand as the decimal that holds every value of its type."""
    if pa.types.is_integer(value.type):
        return value.cast(pa.decimal128(20, 0))
    return value


def _wide(value: Value) -> Value:
    kind = value.type
    if pa.types.is_decimal(kind) and kind.bit_width == 128:
        return value.cast(pa.decimal256(kind.precision, kind.scale))
    return value


def _rounded(value: Value, target: pa.DataType) -> Value:
    """An exact decimal ``+ - *`` rounded half up (ties away from zero) to the scale Spark
    reduced its type to, as Spark rounds it.

    Spark adds exactly and multiplies truncating at 39 significant digits,
    then rounds half up to the type's scale; a result that fits its type
    has no digit that truncation reaches at or above the half unit of that
    scale, so the two give the exact result's rounding. One past the type's
    precision still fails the safe cast (Spark's NULL or error: Spark's).
    """
    kind = value.type
    if pa.types.is_decimal(kind) and pa.types.is_decimal(target) and kind.scale > target.scale:
        return pc.round(value, ndigits=target.scale, round_mode="half_towards_infinity")
    return value


def _python(value: Value, count: int) -> list[Any]:
    """A node's values as Python objects, one per row (a scalar repeated)."""
    if isinstance(value, pa.Scalar):
        return [value.as_py()] * count
    return list(value.to_pylist())


def _cast_to(value: pa.Array, target: pa.DataType, node: Any) -> pa.Array:
    try:
        return value.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise NotOnDriver(f"{node_key(node)} as {target}: {exc}") from None
