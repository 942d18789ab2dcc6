"""The driver's diff of two sets of rows by value, against a multiset model.

``diff_rows`` compares rows as integer codes in Arrow; the model here
compares them as Python tuples with a ``Counter``: rows to insert are the
first surplus copies of each wanted row in its order, positions to retract
the lowest ``(_file, _pos)`` of each surplus row held. NULLs, duplicates on
both sides and a list column (which Arrow cannot dictionary-encode) are in
the random rows.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.ivm.driver.in_place_driver import diff_rows

COLUMNS = ["a", "b", "c"]
ROWS = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.list_(pa.int64()))])
HELD = ROWS.append(pa.field("_file", pa.string())).append(pa.field("_pos", pa.int64()))


def _tuples(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(tuple(r[c]) if isinstance(r[c], list) else r[c] for c in COLUMNS) for r in rows]


def _model(
    want: list[dict[str, Any]], have: list[dict[str, Any]]
) -> tuple[list[int], list[tuple[str, int]]]:
    """(indexes of ``want`` to insert, positions of ``have`` to retract)."""
    wanted = Counter(_tuples(want))
    held: dict[tuple[Any, ...], list[tuple[str, int]]] = {}
    for row, h in zip(_tuples(have), have, strict=True):
        held.setdefault(row, []).append((h["_file"], h["_pos"]))
    retract = []
    for row, positions in held.items():
        retract += sorted(positions)[: max(0, len(positions) - wanted[row])]
        wanted[row] -= len(positions)
    inserts = []
    for index, row in enumerate(_tuples(want)):
        if wanted[row] > 0:
            wanted[row] -= 1
            inserts.append(index)
    return inserts, sorted(retract)


@pytest.mark.parametrize("seed", range(30))
def test_the_diff_is_the_multiset_difference(seed: int) -> None:
    rng = random.Random(seed)

    def row() -> dict[str, Any]:
        return {
            "a": rng.choice([None, 1, 2]),
            "b": rng.choice([None, "x", "é"]),
            "c": rng.choice([None, [1], [1, 2]]),
        }

    want = [row() for _ in range(rng.randint(0, 12))]
    have = [{**row(), "_file": rng.choice(["f0", "f1"]), "_pos": i * 7} for i in range(12)]
    have += [dict(r, _pos=r["_pos"] + 1) for r in have[: rng.randint(0, 4)]]  # duplicates
    got = diff_rows(pa.Table.from_pylist(want, ROWS), pa.Table.from_pylist(have, HELD), COLUMNS)
    inserts, retractions = _model(want, have)
    assert got.inserts.to_pylist() == [want[i] for i in inserts]
    assert got.retractions == retractions
