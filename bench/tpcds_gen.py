"""TPC-DS data and queries from DuckDB's ``tpcds`` extension, for bench/tpcds_bench.py.

Runs in its own throwaway environment, as bench/tpch_gen.py does for TPC-H:
the extension is on PyPI as ``duckdb-extension-tpcds`` for DuckDB 1.5.5 only
(extensions.duckdb.org, its usual source, is out of reach here), an extension
loads only into the DuckDB it was built for, and the project pins another
DuckDB. bench/tpcds_bench.py creates that environment and runs::

    <venv>/bin/python bench/tpcds_gen.py --sf 0.01 --out DIR

It writes ``DIR/<table>.parquet`` for the 24 tables (``dsdgen``) and
``DIR/queries.json`` with the 99 queries as the extension generates them
(``tpcds_queries()``), so no query text is copied by hand. Only the standard
library and ``duckdb`` are imported here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def extension_path() -> Path:
    """The extension binary the wheel installed: ``LOAD '<path>'`` needs no repository."""
    import duckdb
    import duckdb_extension_tpcds

    folder = Path(duckdb_extension_tpcds.__file__).parent / "extensions"
    path = folder / f"v{duckdb.__version__}" / "tpcds.duckdb_extension"
    if not path.is_file():
        found = sorted(str(p) for p in folder.glob("*/tpcds.duckdb_extension"))
        raise SystemExit(f"no tpcds extension for DuckDB {duckdb.__version__} (found: {found})")
    return path


def generate(sf: float, out: Path) -> dict[str, int]:
    """Write every table as Parquet and the 99 queries as JSON; rows per table."""
    import duckdb

    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"LOAD '{extension_path()}'")
    con.execute(f"CALL dsdgen(sf={float(sf)})")
    tables = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
    rows = {}
    for table in tables:
        con.execute(f"COPY {table} TO '{out / table}.parquet' (FORMAT parquet)")
        rows[table] = int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]
    queries = con.execute(
        "SELECT query_nr, query FROM tpcds_queries() ORDER BY query_nr"
    ).fetchall()
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
