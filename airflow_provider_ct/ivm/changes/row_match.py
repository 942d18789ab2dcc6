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


def matching_rows(rows: pa.Table, deleted: pa.Table) -> np.ndarray:
    """Which of ``rows`` equal a row of ``deleted`` on all columns, NULL matching NULL.

    Each column of both sides is dictionary-encoded together (NULL encoded as a
    value of its own), so the join below compares integer codes: exact for every
    primitive type and null-safe, which Arrow's hash join is not.
    """
    hit = np.zeros(rows.num_rows, dtype=bool)
    if not rows.num_rows or not deleted.num_rows:
        return hit
    left: dict[str, pa.Array] = {}
    right: dict[str, pa.Array] = {}
    for index, name in enumerate(rows.column_names):
        both = pa.chunked_array(
            rows.column(name).chunks + deleted.column(name).cast(rows.column(name).type).chunks,
            type=rows.column(name).type,
        ).combine_chunks()
        codes = pc.dictionary_encode(both, null_encoding="encode").indices
        left[f"k{index}"] = codes.slice(0, rows.num_rows)
        right[f"k{index}"] = codes.slice(rows.num_rows)
    keys = list(left)
    left[_ROW] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    joined = pa.table(left).join(pa.table(right), keys, join_type="left semi")
    hit[joined.column(_ROW).to_numpy()] = True
    return hit
