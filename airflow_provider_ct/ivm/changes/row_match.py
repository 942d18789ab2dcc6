"""Which rows of one Arrow table equal some row of another, on all columns, NULL matching NULL.

Used where rows are compared by value without a key: equality deletes
(:mod:`.snapshot_files`) and the kept groups a change touches
(:mod:`.aggregate_state`).
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
    left, right = joint_codes(rows, wanted)
    keys = list(left)
    left[_ROW] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    right[_WANTED] = pa.array(np.arange(wanted.num_rows, dtype=np.int64))
    joined = pa.table(left).join(pa.table(right), keys, join_type="inner")
    index[joined.column(_WANTED).to_numpy()] = joined.column(_ROW).to_numpy()
    return index


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
