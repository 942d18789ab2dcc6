"""`make walkthrough`: the frontier core on a real Iceberg table, without Airflow.

It uses the zero-config embedded catalog (SQLite + local warehouse) under a
demo AIRFLOW_HOME, materializes a small "revenue per customer" table over a
few ticks by committing only differences with compare-and-append, shows a
lost race, and finally reads every tick back through real Spark with time
travel. Pass --no-spark to skip the JVM.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from airflow_provider_ct.core.catalog import CatalogConfig  # noqa: E402
from airflow_provider_ct.core.commit import compare_and_append  # noqa: E402
from airflow_provider_ct.core.frontier import (  # noqa: E402
    Frontier,
    format_timestamp,
    now_ms,
)
from airflow_provider_ct.core.manifest import StagedBatch, write_manifest  # noqa: E402
from airflow_provider_ct.core.staging import batch_data_dir, manifest_path  # noqa: E402
from airflow_provider_ct.core.sweep import sweep_staged  # noqa: E402
from airflow_provider_ct.core.tables import create_managed_table  # noqa: E402
from airflow_provider_ct.core.timeline import Timeline  # noqa: E402

SCHEMA = pa.schema([("customer", pa.string()), ("revenue", pa.float64())])
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUR = 3_600_000

# What the view should contain after each tick (e.g. revenue per customer).
DESIRED = [
    {("alice", 10.0): 1, ("bob", 5.5): 1},
    {("alice", 10.0): 1, ("bob", 7.0): 1, ("carol", 1.25): 1},
    {("alice", 10.0): 1, ("bob", 7.0): 1, ("carol", 1.25): 1},  # nothing changed
    {("bob", 7.0): 1, ("carol", 3.0): 1, ("dave", 2.0): 2},  # duplicates are rows too
]


def stage(table, batch_id: str, rows: Counter) -> list[str]:  # type: ignore[no-untyped-def]
    """Write the rows of one change as a Parquet file in the batch's staging folder."""
    if not rows:
        return []
    folder = Path(batch_data_dir(table.location(), batch_id).removeprefix("file://"))
    folder.mkdir(parents=True, exist_ok=True)
    flat = [row for row, n in rows.items() for _ in range(n)]
    data = pa.table(
        {"customer": [r[0] for r in flat], "revenue": [r[1] for r in flat]}, schema=SCHEMA
    )
    path = folder / f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(data, path)
    return ["file://" + str(path)]


def contents(table, snapshot_id: int | None) -> Counter:  # type: ignore[no-untyped-def]
    if snapshot_id is None:
        return Counter()
    arrow = table.scan(snapshot_id=snapshot_id).to_arrow()
    return Counter(zip(arrow["customer"].to_pylist(), arrow["revenue"].to_pylist(), strict=True))


def live_files(table) -> dict[str, Counter]:  # type: ignore[no-untyped-def]
    """Data file -> its rows, for the head snapshot (to decide which files to replace)."""
    out: dict[str, Counter] = {}
    for task in table.scan().plan_files():
        rows = pq.read_table(task.file.file_path.removeprefix("file://"))
        out[task.file.file_path] = Counter(
            zip(rows["customer"].to_pylist(), rows["revenue"].to_pylist(), strict=True)
        )
    return out


def show(table, title: str) -> None:  # type: ignore[no-untyped-def]
    timeline = Timeline.of(table)
    print(f"\n== {title}")
    print(
        f"   upper = {timeline.upper.to_summary()} ({format_timestamp(timeline.upper.time)})"
        if timeline.upper.time is not None
        else "   upper = [] (closed)"
    )
    for time, snapshot in timeline.data_times():
        rows = sorted(contents(table, snapshot).elements())
        print(f"   t={format_timestamp(time)} snapshot={snapshot}: {rows}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark read-back")
    parser.add_argument("--home", default=str(ROOT / ".demo" / "airflow-home"))
    args = parser.parse_args()

    home = Path(args.home)
    shutil.rmtree(home / "ct", ignore_errors=True)
    os.environ["AIRFLOW_HOME"] = str(home)
    config = CatalogConfig.embedded(home)
    print(f"embedded catalog: {config.uri}\nwarehouse:        {config.warehouse}")
    catalog = config.load()
    table = create_managed_table(catalog, "demo.revenue_per_customer", SCHEMA)

    upper = Frontier.minimum()
    for tick, desired in enumerate(DESIRED, start=1):
        time = T0 + tick * HOUR
        batch_id = f"demo-tick-{tick}"
        # The correction: keep files whose rows are all still desired, replace the rest.
        files = live_files(table)
        want = Counter(desired)
        keep, remove = [], []
        for path, rows in files.items():
            if not (rows - want):
                keep.append(path)
                want -= rows
            else:
                remove.append(path)
        add = stage(table, batch_id, want)
        result = compare_and_append(
            table,
            expected_upper=upper,
            new_upper=Frontier.sealing(time),
            batch_id=batch_id,
            add_files=add,
            remove_files=remove,
            time=time,
        )
        assert result.landed, result
        upper = result.upper
        print(
            f"\ntick {tick} at {format_timestamp(time)}: +{len(add)} file(s), "
            f"-{len(remove)} file(s), kept {len(keep)}; upper -> {upper.to_summary()}"
        )
        assert contents(table, table.metadata.current_snapshot().snapshot_id) == Counter(desired)
        show(table, f"table after tick {tick}")

    # A lost race: a second writer still believes the upper is the old one.
    stale = compare_and_append(
        table,
        expected_upper=Frontier.sealing(T0 + 3 * HOUR),
        new_upper=Frontier.sealing(T0 + 9 * HOUR),
        batch_id="stale-writer",
        add_files=stage(table, "stale-writer", Counter({("mallory", 1e6): 1})),
        time=T0 + 9 * HOUR,
    )
    print(
        f"\nstale writer: landed={stale.landed}; told the current upper is "
        f"{stale.upper.to_summary()} ({stale.reason})"
    )
    # Its staged files can never land now (its lower is below the upper): clean up.
    write_manifest(
        StagedBatch(
            batch_id="stale-writer",
            target="demo.revenue_per_customer",
            lower=Frontier.sealing(T0 + 3 * HOUR),
            upper=Frontier.sealing(T0 + 9 * HOUR),
            base_snapshot_id=None,
            data_dir=batch_data_dir(table.location(), "stale-writer"),
            created_at_ms=now_ms(),
        ),
        manifest_path(table.location(), "stale-writer"),
    )
    report = sweep_staged(table)
    print(f"sweep: discarded {list(report.discarded)} ({report.files_deleted} staged file(s))")
    # An empty tick still advances the frontier: the table stays readable at recent times.
    empty = compare_and_append(
        table,
        expected_upper=upper,
        new_upper=Frontier.sealing(T0 + 6 * HOUR),
        batch_id="empty-tick",
    )
    print(f"empty tick: landed={empty.landed}, upper -> {empty.upper.to_summary()}")
    show(table, "final timeline")

    if not args.no_spark:
        from airflow_provider_ct.spark.conf import local_session

        print("\n== reading every tick back through Spark (local mode) with time travel")
        spark = local_session(config, master="local[2]", app_name="ct-demo")
        spark.sparkContext.setLogLevel("ERROR")
        timeline = Timeline.of(table)
        for time, snapshot in timeline.data_times():
            rows = spark.sql(
                "SELECT customer, revenue FROM ct.demo.revenue_per_customer "
                f"VERSION AS OF {snapshot} ORDER BY customer"
            ).collect()
            got = Counter((r.customer, r.revenue) for r in rows)
            assert got == contents(table, snapshot)
            print(f"   spark @ {format_timestamp(time)}: {sorted(got.elements())}")
        spark.stop()
    print("\ndemo finished: every tick's contents match what was desired.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
