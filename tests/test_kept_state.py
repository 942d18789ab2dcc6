"""A kept state written as deltas: the touched groups' rows added, their old rows retracted.

Ticks of an in-place view grouped by an integer and a string key (so a
lookup by the integer key also finds rows of groups the change does not
touch, which must stay), with ``MAX`` (read again where a deletion reached
it), over inputs the test changes at random. After every tick the view
equals DuckDB's over the test's rows, and the state table, read back with
PyIceberg (position deletes applied), holds exactly one row per group with
the group's row count, as DuckDB counts them. The deltas pile up to
``DELTA_FILES`` data files, then a tick writes the state whole again.
A state of fewer groups than ``DELTA_MIN_GROUPS`` is always written whole.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.ivm.driver import kept_state as kept
from tests.helpers import rows_of
from tests.test_incremental import Inputs, _normalized, _tick

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SQL = (
    "SELECT k, s, COUNT(*) AS n, SUM(v) AS t, MAX(v) AS hi FROM {ns}.a"
    " WHERE k IS NOT NULL GROUP BY k, s"
)
COUNTS = "SELECT k, s, COUNT(*) FROM {ns}.a WHERE k IS NOT NULL GROUP BY k, s"


def _kept_counts(catalog: Any, ns: str) -> Counter[tuple[Any, ...]]:
    rows = catalog.load_table(f"{ns}.view__ct_state").scan().to_arrow()
    keys = zip(
        rows.column("__ct_k0").to_pylist(),
        rows.column("__ct_k1").to_pylist(),
        rows.column("__ct_rows").to_pylist(),
        strict=True,
    )
    return Counter(keys)


def test_a_state_kept_by_deltas_holds_every_group_once(
    spark: Any, spark_catalog_config: CatalogConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept, "DELTA_FILES", 3)
    monkeypatch.setattr(kept, "DELTA_MIN_GROUPS", 1)  # a few groups, kept by deltas all the same
    ns = "kept_deltas"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=5)
    sql, kept_as, files = SQL.format(ns=ns), [], []
    for n in range(1, 10):
        inputs.mutate(1_000 * n - 500, change_b=False)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        assert _normalized(rows_of(catalog.load_table(f"{ns}.view"))) == _normalized(
            inputs.oracle(sql)
        ), (n, report)
        assert _kept_counts(catalog, ns) == inputs.oracle(COUNTS.format(ns=ns)), (n, report)
        kept_as.append(report.get("state_kept_as", report["strategy"]))
        summary = catalog.load_table(f"{ns}.view__ct_state").current_snapshot().summary
        files.append(int(summary["total-data-files"]))
    assert kept_as[0] == "full"  # the first tick builds the state
    assert kept_as.count("delta") >= 4, kept_as
    # Past DELTA_FILES files a tick reads and writes the state whole: one file again.
    assert max(files) <= kept.DELTA_FILES + 1, files
    assert "aggregate" in kept_as[1:] and 1 in files[2:], (kept_as, files)


def test_a_state_of_few_groups_is_kept_whole(
    spark: Any, spark_catalog_config: CatalogConfig
) -> None:
    ns = "kept_whole"
    catalog = spark_catalog_config.load()
    inputs = Inputs(catalog, ns, seed=6)
    sql, files = SQL.format(ns=ns), []
    for n in range(1, 4):
        inputs.mutate(1_000 * n - 500, change_b=False)
        inputs.seal(1_000 * n)
        report = _tick(spark, spark_catalog_config, f"{ns}.view", sql, 1_000 * n)
        assert "state_kept_as" not in report, report
        assert _kept_counts(catalog, ns) == inputs.oracle(COUNTS.format(ns=ns)), (n, report)
        summary = catalog.load_table(f"{ns}.view__ct_state").current_snapshot().summary
        files.append(int(summary["total-data-files"]))
    assert report["strategy"] == "aggregate" and files == [1, 1, 1], (report, files)
