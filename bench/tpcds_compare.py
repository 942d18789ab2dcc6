"""Per-query table of two TPC-DS bench runs: ``auto`` against ``full``, busy ticks only.

Run after ``bench/tpcds_bench.py`` twice on the same machine, one run right
after the other (the data and the changes are the bench's own, seeded, so
both runs tick the same inputs)::

    .venv/bin/python bench/tpcds_bench.py --sf 0.01 --out /tmp/auto.json
    .venv/bin/python bench/tpcds_bench.py --sf 0.01 --refresh full --out /tmp/full.json
    .venv/bin/python bench/tpcds_compare.py /tmp/auto.json /tmp/full.json

Prints, per query, the strategies of ``auto``'s busy ticks, the seconds both
runs spent on those ticks, and their ratio; then the sum over the views
both runs ticked exactly (machines here are noisy: the ratio of sums is the
number to read, a single view's ratio is not).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXACT = "exact on every tick"


def _busy_seconds(outcome: dict[str, Any]) -> float:
    pairs = zip(outcome["seconds"][1:], outcome["busy"][1:], strict=False)
    return sum(s for s, busy in pairs if busy)


def _busy_strategies(outcome: dict[str, Any]) -> list[str]:
    pairs = zip(outcome["strategies"][1:], outcome["busy"][1:], strict=False)
    return [s for s, busy in pairs if busy]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("auto", type=Path)
    parser.add_argument("full", type=Path)
    args = parser.parse_args()
    auto = {o["index"]: o for o in json.loads(args.auto.read_text())["outcomes"]}
    full = {o["index"]: o for o in json.loads(args.full.read_text())["outcomes"]}
    total_auto = total_full = 0.0
    incremental = compared = 0
    print("| q | auto's busy ticks | auto s | full s | auto/full |")
    print("|---|---|---|---|---|")
    for index in sorted(auto):
        a, f = auto[index], full.get(index)
        if f is None or a["status"] != EXACT or f["status"] != EXACT or not a.get("seconds"):
            print(f"| {index} | {a['status']} | | | |")
            continue
        strategies = _busy_strategies(a)
        seconds_a, seconds_f = _busy_seconds(a), _busy_seconds(f)
        if not strategies:
            print(f"| {index} | no busy tick | | | |")
            continue
        compared += 1
        incremental += all(s != "full" for s in strategies)
        total_auto, total_full = total_auto + seconds_a, total_full + seconds_f
        ratio = seconds_a / seconds_f if seconds_f else float("nan")
        shown = ", ".join(strategies)
        print(f"| {index} | {shown} | {seconds_a:.1f} | {seconds_f:.1f} | {ratio:.2f} |")
    share = total_auto / total_full if total_full else float("nan")
    print(
        f"\n{compared} views with busy ticks, exact in both runs; {incremental} incremental on "
        f"every busy tick; busy ticks: auto {total_auto:.0f} s, full {total_full:.0f} s, "
        f"auto/full {share:.2f}"
    )


if __name__ == "__main__":
    main()
