"""TPC-H data and queries from DuckDB's ``tpch`` extension, for bench/tick_bench.py.

Runs in its own throwaway environment, not the project's ``.venv``: the
extension is on PyPI as ``duckdb-extension-tpch`` for DuckDB 1.5.5 only, and
an extension loads only into the DuckDB version it was built for, while the
project pins another DuckDB. bench/tick_bench.py creates that environment
(``duckdb==1.5.5 duckdb-extension-tpch==1.5.5``) and runs this file with its
interpreter::

    <venv>/bin/python bench/tpch_gen.py --sf 0.01 --out DIR

It writes ``DIR/<table>.parquet`` for the 8 tables (``dbgen``, the maintained
generator, not data of our own) and ``DIR/queries.json`` with the 22 queries
as the extension generates them (``tpch_queries()``), so no query text is
copied by hand. Only the standard library and ``duckdb`` are imported here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TABLES = ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier")


def extension_path() -> Path:
    """The extension binary the wheel installed (the wheel's module is only a folder).

    The wheel puts it at ``duckdb_extension_tpch/extensions/v<duckdb>/tpch.duckdb_extension``;
    ``LOAD '<path>'`` loads it without the extension repository (no network).
    """
    import duckdb
    import duckdb_extension_tpch

    folder = Path(duckdb_extension_tpch.__file__).parent / "extensions"
    path = folder / f"v{duckdb.__version__}" / "tpch.duckdb_extension"
    if not path.is_file():
        found = sorted(str(p) for p in folder.glob("*/tpch.duckdb_extension"))
        raise SystemExit(f"no tpch extension for DuckDB {duckdb.__version__} (found: {found})")
    return path


def generate(sf: float, out: Path) -> dict[str, int]:
    """Write the 8 tables as Parquet and the 22 queries as JSON; rows per table."""
    import duckdb

    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"LOAD '{extension_path()}'")
    con.execute(f"CALL dbgen(sf={float(sf)})")
    rows = {}
    for table in TABLES:
        con.execute(f"COPY {table} TO '{out / table}.parquet' (FORMAT parquet)")
        rows[table] = int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]
    queries = con.execute("SELECT query_nr, query FROM tpch_queries() ORDER BY query_nr").fetchall()
    (out / "queries.json").write_text(json.dumps({str(n): q for n, q in queries}, indent=1))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sf", type=float, default=0.01)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(json.dumps(generate(args.sf, args.out)))


if __name__ == "__main__":
    main()
