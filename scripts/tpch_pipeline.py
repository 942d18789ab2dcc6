"""The 22 TPC-H queries as one SQL pipeline folder, and its dry run (docs/pipelines.md).

The queries are DuckDB's ``tpch`` extension's own (``tpch_queries()``), got
as bench/tick_bench_tpch.py gets them (bench/tpch_gen.py in its throwaway
environment), so no query text is copied by hand. Each becomes one file
``transformations/qNN.sql``: ``CREATE MATERIALIZED VIEW qNN AS <query>``,
translated to Spark SQL by sqlglot, tables left unqualified (the spec's
``database: tpch`` resolves them, as SDP does). ``ORDER BY`` is dropped (a
view is a multiset) unless the query has a ``LIMIT``, whose top-N it
decides. The inputs are created empty, with the generated tables' schemas,
in a fresh SQLite catalog; then ``ct-pipeline dry-run`` runs over the folder::

    python scripts/tpch_pipeline.py --out /tmp/tpch-pipeline

Writes the folder under ``--out`` and prints the dry run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import sqlglot

ROOT = Path(__file__).resolve().parent.parent
SPEC = """\
# The 22 TPC-H queries as views over the tables of namespace tpch.
name: tpch
database: tpch
libraries:
  - glob:
      include: transformations/**
"""


def write_folder(queries: dict[str, str], out: Path) -> Path:
    """``out/tpch``: the spec file and one file per query."""
    folder = out / "tpch"
    (folder / "transformations").mkdir(parents=True, exist_ok=True)
    (folder / "spark-pipeline.yml").write_text(SPEC)
    for number, text in sorted(queries.items(), key=lambda kv: int(kv[0])):
        tree = sqlglot.parse_one(text, read="duckdb")
        if not tree.args.get("limit"):
            tree.set("order", None)
        query = tree.sql(dialect="spark", pretty=True)
        name = f"q{int(number):02d}"
        (folder / "transformations" / f"{name}.sql").write_text(
            f"-- TPC-H Q{int(number)}\nCREATE MATERIALIZED VIEW {name} AS\n{query};\n"
        )
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    home = Path(tempfile.mkdtemp(prefix="tpch-pipeline-"))
    os.environ["AIRFLOW_HOME"] = str(home)
    import pyarrow.parquet as pq

    from airflow_provider_ct.core.catalog import CatalogConfig
    from bench.tick_bench_tpch import TABLES, generate

    data = home / "data"
    queries = generate(0.001, data)
    folder = write_folder(queries, args.out)
    config = CatalogConfig.embedded(home)
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "extra": {"uri": config.uri, "warehouse": config.warehouse, "catalog_name": "ct"},
        }
    )
    catalog = config.load()
    catalog.create_namespace("tpch")
    for table in TABLES:
        catalog.create_table(f"tpch.{table}", schema=pq.read_schema(data / f"{table}.parquet"))
    from airflow_provider_ct.pipelines.cli import main as cli

    return cli(["dry-run", str(folder)])


if __name__ == "__main__":
    sys.exit(main())
