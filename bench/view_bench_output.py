"""What ``bench/view_bench.py`` prints: each case's result, the tables and the summary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: Incremental ticks of the tiny view; the last one's phases are reported.
TINY_TICKS = 3
#: Every method, as the tables list them (they run a, b, c, e, d).
METHODS = ("a", "b", "c", "d", "e")
LABELS = {
    "a": "(a) overwrite",
    "b": "(b) merge full",
    "c": "(c) dbt incr",
    "d": "(d) ours full",
    "e": "(e) ours auto",
}


@dataclass
class CaseResult:
    view: str
    rows: int
    changed: dict[str, int]
    seconds: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (e)'s seconds in each untimed round before the timed one (the first: a cold driver).
    prior_e: list[float] = field(default_factory=list)

    def ratio(self, num: str, den: str) -> float:
        return self.seconds[num] / max(1e-9, self.seconds[den])

    def bytes_ratio(self, num: str, den: str) -> float:
        return self.bytes[num] / max(1, self.bytes[den])


def print_tiny(report: dict[str, Any]) -> None:
    phases: dict[str, float] = report.get("phases", {})
    print(f"\ntiny tick (100 orders, 1 changed, join_agg, refresh=auto): {json.dumps(report)}")
    print(
        f"tiny tick phases (s): {', '.join(f'{k}={v}' for k, v in phases.items())}; "
        f"sum {sum(phases.values()):.2f} s (target <= 3 s); whole tick {report['tick_s']:.2f} s"
        f" (tick {TINY_TICKS} of the session; the first: {report.get('first_tick_phases')})"
    )


# --- output -----------------------------------------------------------------------------------


def print_table(results: list[CaseResult]) -> None:
    mb = 1024 * 1024
    for view in sorted({r.view for r in results}):
        print(f"\n### {view}\n")
        print(
            "| rows | changed | "
            + " | ".join(f"{LABELS[m]} s" for m in METHODS)
            + " | (e) first tick s | (e) strategy | (e)/(a) | (e)/(b) | (e)/(c) | (d)/(b) | "
            + " | ".join(f"{m} MB" for m in METHODS)
            + " | (e)/(a) bytes |"
        )
        print("|---" * (2 + len(METHODS) + 6 + len(METHODS) + 1) + "|")
        for r in (r for r in results if r.view == view):
            changed = ", ".join(f"{k} {v:,}" for k, v in r.changed.items())
            print(
                f"| {r.rows:,} | {changed} | "
                + " | ".join(f"{r.seconds[m]:.2f}" for m in METHODS)
                + f" | {', '.join(f'{s:.2f}' for s in r.prior_e) or '-'}"
                + f" | {r.reports['e'].get('strategy', '?')} "
                + f"| {r.ratio('e', 'a'):.2f}x | {r.ratio('e', 'b'):.2f}x "
                + f"| {r.ratio('e', 'c'):.2f}x | {r.ratio('d', 'b'):.2f}x | "
                + " | ".join(f"{r.bytes[m] / mb:.2f}" for m in METHODS)
                + f" | {r.bytes_ratio('e', 'a'):.2%} |"
            )


def acceptance_summary(results: list[CaseResult]) -> dict[str, float]:
    small, middle, large = results
    return {
        "incr_over_b": round(middle.ratio("e", "b"), 4),
        "incr_over_c": round(middle.ratio("e", "c"), 4),
        "growth_10x": round(large.seconds["e"] / max(1e-9, small.seconds["e"]), 4),
        "staged_over_a": round(middle.bytes_ratio("e", "a"), 4),
    }
