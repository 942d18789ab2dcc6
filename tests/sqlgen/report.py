"""What the generated views did: per query, and counted over a run (printed and as JSON).

The numbers issue 58 asks for: how many generated queries Spark accepted,
how many were exact on every tick, the share maintained incrementally on
every busy tick, and every reason a busy tick ran in full, with its count.
Issue 59's number is kept apart from wrong results: a definition the view
factory accepted whose tick then failed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: How a generated query ended. Only the last three are the product's.
SPARK_REFUSED = "spark refused"  # the generator wrote SQL Spark does not accept
ORACLE_REFUSED = "duckdb refused"  # ... or that DuckDB does not
ENGINES_DIFFER = "spark and duckdb differ"  # ... or that means one thing in each
PARSE_REFUSED = "refused at parse"  # the view factory refused it (a QueryError)
TICK_FAILED = "accepted at parse, tick failed"
WRONG = "wrong result"
EXACT = "exact on every tick"
FULL = "full"
COMPOSED = "composed"


@dataclass
class Outcome:
    """One generated query's life as a view."""

    seed: int
    index: int
    sql: str
    features: tuple[str, ...]
    status: str = EXACT
    #: The planner's strategy and reason at parse time (``explain_view``).
    plan: str = ""
    plan_reason: str = ""
    #: Per tick: the strategy the write reported, and why (the first tick creates the view).
    strategies: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    #: Per tick: whether any input the view reads changed (a busy tick).
    busy: list[bool] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    #: Per tick: the seconds the tick took (mint, write, append), as the harness timed it.
    seconds: list[float] = field(default_factory=list)
    error: str = ""
    failed_tick: int | None = None

    def record(self, extra: Mapping[str, Any], reason: str, busy: bool) -> None:
        """One tick's report. A composed tick one of whose parts read the view's inputs in
        full counts as a full tick: its inputs were read whole there."""
        strategy = str(extra.get("strategy", "-"))
        whole = [str(label) for label in extra.get("parts_full") or []]
        if strategy == COMPOSED and whole:
            strategy = FULL
            reason = f"composed, but its part(s) {', '.join(whole)} ran in full over the inputs"
        self.strategies.append(strategy)
        self.reasons.append(reason)
        self.busy.append(busy)
        self.fallbacks += [str(f) for f in extra.get("fallbacks", [])]

    @property
    def busy_strategies(self) -> list[str]:
        """The strategies of the busy ticks after the first (which creates the view)."""
        return [s for s, b in zip(self.strategies[1:], self.busy[1:], strict=False) if b]

    @property
    def incremental(self) -> bool:
        """Incremental on every busy tick (and at least one busy tick)."""
        busy = self.busy_strategies
        return bool(busy) and all(s != FULL for s in busy)


def fold(reason: str) -> str:
    """A reason with what differs between queries folded: names, aliases, numbers, literals."""
    text = re.sub(r"sqlgen_[0-9a-z_]+\.", "", reason)
    text = re.sub(r"\bt[0-9]+\b", "t#", text)
    text = re.sub(r"(?<=[\s(=,])'[^']*'", "'…'", text)
    text = re.sub(r"\b[0-9]+\b", "N", text)
    return text[:200]


@dataclass
class Summary:
    """Counts over a run's outcomes."""

    outcomes: list[Outcome]
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    def ran(self) -> list[Outcome]:
        """Queries the factory accepted (whatever their ticks did)."""
        refused = (SPARK_REFUSED, ORACLE_REFUSED, ENGINES_DIFFER, PARSE_REFUSED)
        return [o for o in self.outcomes if o.status not in refused]

    def busy_full_reasons(self) -> Counter[str]:
        """Every busy tick's reason for running in full (the creating tick left out), per tick."""
        found: Counter[str] = Counter()
        for o in self.ran():
            for strategy, reason, busy in list(zip(o.strategies, o.reasons, o.busy, strict=False))[
                1:
            ]:
                if busy and strategy == FULL:
                    found[fold(reason)] += 1
        return found

    @staticmethod
    def first_full_reason(o: Outcome) -> str:
        """Why a view was not incremental: its first busy full tick's reason."""
        ticks = list(zip(o.strategies, o.reasons, o.busy, strict=False))[1:]
        return fold(next(r for s, r, b in ticks if b and s == FULL))

    def numbers(self) -> dict[str, Any]:
        ran = [o for o in self.ran() if o.status == EXACT and o.busy_strategies]
        incremental = [o for o in ran if o.incremental]
        views = Counter(self.first_full_reason(o) for o in ran if not o.incremental)
        return {
            "generated": len(self.outcomes),
            "spark_accepted": len(self.outcomes) - self.count(SPARK_REFUSED),
            "duckdb_refused": self.count(ORACLE_REFUSED),
            "spark_and_duckdb_differ": self.count(ENGINES_DIFFER),
            "refused_at_parse": self.count(PARSE_REFUSED),
            "parse_accepted_tick_failed": self.count(TICK_FAILED),
            "wrong_result": self.count(WRONG),
            "exact_every_tick": self.count(EXACT),
            "exact_with_busy_ticks": len(ran),
            "incremental_every_busy_tick": len(incremental),
            "share_incremental": round(len(incremental) / len(ran), 3) if ran else None,
            "full_reason_per_view": dict(views.most_common()),
            "full_reason_per_busy_tick": dict(self.busy_full_reasons().most_common()),
            "planner_strategies": dict(Counter(o.plan for o in self.ran()).most_common()),
            "tick_strategies": dict(
                Counter(s for o in self.ran() for s in o.strategies[1:]).most_common()
            ),
            "fallbacks": _counted(fold(f) for o in self.ran() for f in o.fallbacks),
            "spark_refusals": _counted(
                fold(o.error) for o in self.outcomes if o.status == SPARK_REFUSED
            ),
            "duckdb_refusals": _counted(
                fold(o.error) for o in self.outcomes if o.status == ORACLE_REFUSED
            ),
            "seconds": round(self.seconds),
        }

    def features(self) -> dict[str, tuple[int, int]]:
        """Per feature: exact views with busy ticks that compose it, and of them incremental."""
        table: dict[str, list[int]] = {}
        for o in self.ran():
            if o.status != EXACT or not o.busy_strategies:
                continue
            for f in o.features:
                row = table.setdefault(f, [0, 0])
                row[0] += 1
                row[1] += o.incremental
        return {f: (n, i) for f, (n, i) in sorted(table.items())}

    def text(self) -> str:
        n = self.numbers()
        lines = [f"sqlgen: {k} = {v}" for k, v in n.items() if not isinstance(v, dict)]
        for key in (
            "full_reason_per_view",
            "full_reason_per_busy_tick",
            "planner_strategies",
            "tick_strategies",
            "fallbacks",
            "spark_refusals",
            "duckdb_refusals",
        ):
            lines.append(f"sqlgen: {key}:")
            lines += [f"  {count:5d}  {what}" for what, count in n[key].items()]
        lines.append("sqlgen: feature (views exact with busy ticks, of them incremental):")
        lines += [f"  {f:28s} {t:4d} {i:4d}" for f, (t, i) in self.features().items()]
        for o in self.outcomes:
            if o.status in (TICK_FAILED, WRONG, PARSE_REFUSED, ENGINES_DIFFER):
                lines.append(
                    f"sqlgen: {o.status} seed={o.seed} query={o.index} tick={o.failed_tick}: "
                    f"{o.error[:600]}\n    {o.sql}"
                )
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "numbers": self.numbers(),
            "features": self.features(),
            "outcomes": [asdict(o) for o in self.outcomes],
        }
        path.write_text(json.dumps(data, indent=1, default=str))


def _counted(values: Any) -> dict[str, int]:
    return dict(Counter(values).most_common())
