"""Which rows of one Arrow table equal some row of another, on all columns, NULL matching NULL.

Used where rows are compared by value without a key: equality deletes
(:mod:`.snapshot_files`) and the kept groups a change touches
(:mod:`.aggregate_state`).

Two ways, one answer. When a column holds integers or dates (a group key
such as a customer id), the smaller side is sorted on it and the other
probes it (:func:`_pairs_by_column`): the candidate pairs are then checked
on the other columns. It costs a sort and the pairs, where the general way
dictionary-encodes every column of both sides together (0.4 s for a
500,000-group state and a 60,000-group change, one string column among
the keys). The column probed is the first whose candidate pairs stay
about as many as the rows: a key of few values (a year before an item and
a customer, TPC-DS q78's groups) pairs every probe with a third of the
other side, hundreds of millions of pairs for a change of thousands of
groups (100 s where the encoding takes a fraction of one); when no column
is that selective, the encoding's way runs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ROW = "__ct_row"
_WANTED = "__ct_wanted"


def matching_rows(rows: pa.Table, deleted: pa.Table) -> np.ndarray:
    """Which of ``rows`` equal a row of ``deleted`` on all columns, NULL matching NULL."""
    hit = np.zeros(rows.num_rows, dtype=bool)
    if not rows.num_rows or not deleted.num_rows:
        return hit
    pairs = _pairs_by_column(rows, deleted)
    if pairs is not None:
        hit[pairs[0]] = True
        return hit
    left, right = joint_codes(rows, deleted)
    keys = list(left)
    left[_ROW] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    joined = pa.table(left).join(pa.table(right), keys, join_type="left semi")
    hit[joined.column(_ROW).to_numpy()] = True
    return hit


def matching_index(rows: pa.Table, wanted: pa.Table) -> np.ndarray:
    """For each row of ``wanted``, the index of a row of ``rows`` equal to it on all
    columns (NULL matching NULL), or -1: where a change's groups are in a kept state."""
    index = np.full(wanted.num_rows, -1, dtype=np.int64)
    if not rows.num_rows or not wanted.num_rows:
        return index
    pairs = _pairs_by_column(rows, wanted)
    if pairs is not None:
        index[pairs[1]] = pairs[0]
        return index
    left, right = joint_codes(rows, wanted)
    keys = list(left)
    left[_ROW] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    right[_WANTED] = pa.array(np.arange(wanted.num_rows, dtype=np.int64))
    joined = pa.table(left).join(pa.table(right), keys, join_type="inner")
    index[joined.column(_WANTED).to_numpy()] = joined.column(_ROW).to_numpy()
    return index


#: Candidate pairs a probe may make per row of both sides before the next column is tried.
_PAIRS_PER_ROW = 4


def _pairs_by_column(left: pa.Table, right: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    """Every ``(left index, right index)`` of equal rows (NULL matching NULL), or None
    when no column is integers or dates selective enough, or a column's type is one
    whose equality differs from the encoding's (floats: NaN; nested types)."""
    if not all(_comparable(left.schema.field(n).type) for n in left.column_names):
        return None
    probe_left = left.num_rows >= right.num_rows  # sort the smaller side
    held, probe = (right, left) if probe_left else (left, right)
    try:
        found = _candidates(held, probe)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None  # a value one side's type cannot take: the encoding's way
    if found is None:
        return None
    got, at = found
    return (at, got) if probe_left else (got, at)


def _candidates(held: pa.Table, probe: pa.Table) -> tuple[np.ndarray, np.ndarray] | None:
    """``(held index, probe index)`` of equal rows, ``held`` sorted on a selective column."""
    bound = _PAIRS_PER_ROW * (held.num_rows + probe.num_rows)
    for name in held.column_names:
        keys = _int_keys(held.column(name))
        probes = _int_keys(probe.column(name).cast(held.schema.field(name).type))
        if keys is None or probes is None:
            continue
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        lo = np.searchsorted(ordered, probes, side="left")
        lengths = np.searchsorted(ordered, probes, side="right") - lo
        if int(lengths.sum()) <= bound:
            return _checked(held, probe, order, lo, lengths)
    return None


def _checked(
    held: pa.Table, probe: pa.Table, order: np.ndarray, lo: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The candidate pairs (``lengths`` held rows from ``lo`` in ``order`` per probe)
    equal on every column."""
    total = int(lengths.sum())
    at = np.repeat(np.arange(len(lo), dtype=np.int64), lengths)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    got = order[np.repeat(lo, lengths) + offsets]
    ok = np.ones(total, dtype=bool)
    for name in held.column_names:
        ok &= _equal(held.column(name).take(pa.array(got)), probe.column(name).take(pa.array(at)))
    return got[ok], at[ok]


def _comparable(kind: pa.DataType) -> bool:
    """Types whose ``equal`` is the encoding's equality (no NaN, no nesting)."""
    nested = pa.types.is_nested(kind) or pa.types.is_dictionary(kind)
    return not (nested or pa.types.is_floating(kind))


def _int_keys(column: pa.ChunkedArray) -> np.ndarray | None:
    """The column as int64s (NULL as 0; :func:`_equal` tells them apart), or None."""
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_date(kind)):
        return None
    if pa.types.is_unsigned_integer(kind) and kind.bit_width == 64:
        return None  # past int64
    if pa.types.is_date64(kind):
        column = column.cast(pa.int64())
    elif pa.types.is_date32(kind):
        column = column.cast(pa.int32())
    filled = pc.fill_null(column.cast(pa.int64()), 0)
    return np.asarray(filled.to_numpy(), dtype=np.int64)


def _equal(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
    """Element-wise equality with NULL equal to NULL."""
    b = b.cast(a.type)
    same = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(same, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def joint_codes(rows: pa.Table, other: pa.Table) -> tuple[dict[str, pa.Array], dict[str, pa.Array]]:
    """Both tables' columns as integer codes of one dictionary per column.

    Each column of both sides is dictionary-encoded together (NULL encoded as a
    value of its own), so a join compares integer codes: exact for every
    primitive type and null-safe, which Arrow's hash join is not.
    """
    left: dict[str, pa.Array] = {}
    right: dict[str, pa.Array] = {}
    for index, name in enumerate(rows.column_names):
        both = pa.chunked_array(
            rows.column(name).chunks + other.column(name).cast(rows.column(name).type).chunks,
            type=rows.column(name).type,
        ).combine_chunks()
        codes = _encoded(both)
        left[f"k{index}"] = codes.slice(0, rows.num_rows)
        right[f"k{index}"] = codes.slice(rows.num_rows)
    return left, right


def _encoded(values: pa.Array) -> pa.Array:
    """Integer codes of ``values``, equal values (NULLs too) sharing one."""
    try:
        return pc.dictionary_encode(values, null_encoding="encode").indices
    except pa.ArrowNotImplementedError:  # a list or struct: coded by its value's repr
        seen: dict[str, int] = {}
        codes = [seen.setdefault(repr(v), len(seen)) for v in values.to_pylist()]
        return pa.array(codes, pa.int64())
