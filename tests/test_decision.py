"""The tick's decision, rule by rule: plain Python over facts, no Spark, no catalog.

``ivm/plan/decision.py`` turns a tick's facts (the plan, the target's
history, the refresh rules' answer, what computing found) into one value.
Each test names the rule it checks; the plans are the planner's own, from
SQL the test wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.ivm.plan.decision import (
    Action,
    Discovery,
    Fallback,
    RefreshSettings,
    TickFacts,
    decide,
)
from airflow_provider_ct.ivm.plan.history import IncrementalBase
from airflow_provider_ct.ivm.plan.modes import RefreshMode
from airflow_provider_ct.ivm.plan.planner import AGGREGATE, FULL, GROUP, LINEAR, choose_plan
from airflow_provider_ct.ivm.plan.subquery_changes import subquery_rules, unbounded

IN_PLACE_SQL = "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM s.a GROUP BY k"
GROUP_SQL = "SELECT k, COUNT(DISTINCT v) AS m, AVG(v) AS s FROM s.a GROUP BY k"
LINEAR_SQL = "SELECT k, v FROM s.a WHERE v > 0"
WINDOW_SQL = "SELECT k, RANK() OVER (ORDER BY v) AS r FROM s.a"
BASE = IncrementalBase("b-1", {"s.a": 1}, incremental_ticks=2)


class Rules:
    """The refresh rules' answer, and which plans they were asked about."""

    def __init__(self, why: str = "", details: Mapping[str, Any] | None = None) -> None:
        self.why, self.details = why, dict(details or {})
        self.asked: list[str] = []

    def __call__(self, plan: Any) -> tuple[str, Mapping[str, Any]]:
        self.asked.append(plan.strategy)
        return self.why, self.details


def _facts(
    sql: str,
    *,
    mode: str = "auto",
    has_rows: bool = True,
    base: IncrementalBase | None = BASE,
    rules: Rules | None = None,
    verify_every: int = 0,
    found: tuple[Fallback, ...] = (),
) -> TickFacts:
    plan = choose_plan(parse_query(sql), RefreshMode.parse(mode))
    settings = RefreshSettings(verify_every=verify_every)
    why_not = "" if base is not None else "the head is a foreign commit (drift)"
    return TickFacts(plan, has_rows, base, why_not, settings, rules or Rules(), found)


def test_refresh_modes_are_checked_in_one_place() -> None:
    assert RefreshMode.parse("auto") is RefreshMode.AUTO
    assert RefreshMode.parse(RefreshMode.FULL) is RefreshMode.FULL
    for bad in ("sometimes", "", None, 3):
        with pytest.raises(ConfigurationError, match="expected one of auto, incremental, full"):
            RefreshMode.parse(bad)


def test_only_auto_turns_the_size_rules_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CT_FULL_BELOW_ROWS", "CT_FULL_ABOVE_CHANGE", "CT_FULL_ABOVE_READ_SHARE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CT_RETRY_INCREMENTAL_AFTER", raising=False)
    off = RefreshSettings.of(RefreshMode.INCREMENTAL, verify_every=3)
    assert (off.small_rows, off.large_change, off.read_share, off.retry_after) == (0, 0.0, 0.0, 0)
    assert off.verify_every == 3
    on = RefreshSettings.of(RefreshMode.AUTO)
    assert on.small_rows > 0 and on.large_change > 0 and on.read_share > 0 and on.retry_after > 0


def test_rule_1_in_place_when_history_and_rules_allow() -> None:
    decision = decide(_facts(IN_PLACE_SQL))
    assert (decision.action, decision.strategy, decision.plan.strategy) == (
        Action.IN_PLACE,
        AGGREGATE,
        AGGREGATE,
    )
    assert decision.base == BASE and decision.incremental_ticks == 3
    assert decision.considered == ()


@pytest.mark.parametrize(
    ("has_rows", "base", "why", "expected"),
    [
        (False, None, "", "the target has no rows yet"),
        (True, None, "", "the head is a foreign commit (drift)"),
        (True, BASE, "inputs are small", "inputs are small"),
    ],
)
def test_rule_1_rebuilds_without_history_or_when_sent_full(
    has_rows: bool, base: IncrementalBase | None, why: str, expected: str
) -> None:
    decision = decide(_facts(IN_PLACE_SQL, has_rows=has_rows, base=base, rules=Rules(why)))
    assert (decision.action, decision.strategy, decision.reason) == (Action.REBUILD, FULL, expected)
    assert decision.incremental_ticks == 0


def test_rule_1_an_unusable_state_is_rebuilt() -> None:
    found = (Fallback(Discovery.STATE_UNUSABLE, "no kept state yet"),)
    decision = decide(_facts(IN_PLACE_SQL, found=found))
    assert decision.action is Action.REBUILD
    assert decision.reason == "the kept aggregate state is rebuilt: no kept state yet"
    assert decision.considered == ("state unusable: no kept state yet",)


def test_rule_1_not_in_place_leaves_the_plan_to_its_fallback() -> None:
    """A type the driver cannot hold exactly: the ``group`` fallback runs, asked once more."""
    rules = Rules()
    found = (Fallback(Discovery.NOT_IN_PLACE, "SUM/AVG of v (double)"),)
    decision = decide(_facts(IN_PLACE_SQL, found=found, rules=rules))
    assert (decision.action, decision.plan.strategy) == (Action.INCREMENTAL, GROUP)
    assert "not in place: SUM/AVG of v (double)" in decision.reason
    assert decision.considered == ("not in place: SUM/AVG of v (double)",)
    assert rules.asked == [GROUP]  # the rules are asked about the plan that runs


def test_rule_1_a_verify_tick_is_the_fallbacks() -> None:
    decision = decide(_facts(IN_PLACE_SQL, verify_every=3))  # BASE: 2 ticks, this is the 3rd
    assert (decision.action, decision.plan.strategy, decision.verify) == (
        Action.INCREMENTAL,
        GROUP,
        True,
    )
    assert decision.considered == ("not in place: verify_every=3: the fallback's tick is verified",)
    assert decide(_facts(IN_PLACE_SQL, verify_every=4)).action is Action.IN_PLACE


def test_rule_2_a_plan_without_strategy_runs_full() -> None:
    decision = decide(_facts(WINDOW_SQL))
    assert (decision.action, decision.strategy) == (Action.FULL, FULL)
    assert "a window without PARTITION BY" in decision.reason
    forced = decide(_facts(LINEAR_SQL, mode="full"))
    assert (forced.action, forced.reason) == (Action.FULL, "refresh='full'")


def test_rule_3_no_rows_or_no_history_runs_full() -> None:
    assert decide(_facts(LINEAR_SQL, has_rows=False)).reason == "the target has no rows yet"
    drift = decide(_facts(LINEAR_SQL, base=None))
    assert (drift.action, drift.reason) == (Action.FULL, "the head is a foreign commit (drift)")


def test_rule_3_a_subquery_whose_table_changed_runs_by_its_rule_until_found_unfit() -> None:
    """A tick that changes a subquery's table is incremental (each subquery's rule bounds
    the rows it moves, :mod:`.subquery_changes`) until computing finds a rule that cannot
    bound this tick (``not keyed``): then full, and an in-place plan keeps no state."""
    linear = "SELECT k, v FROM s.a WHERE k NOT IN (SELECT k FROM s.b WHERE k IS NOT NULL)"
    in_place = (
        "SELECT k, SUM(v) AS t FROM s.a a WHERE v BETWEEN (SELECT MIN(k) FROM s.b)"
        " AND (SELECT COUNT(*) FROM s.b) GROUP BY k"
    )
    outer = IncrementalBase("b-1", {"s.a": 1, "s.b": 5}, 0, changed=frozenset({"s.a"}))
    inner = IncrementalBase("b-1", {"s.a": 1, "s.b": 5}, 0, changed=frozenset({"s.a", "s.b"}))
    for base in (outer, inner):
        assert decide(_facts(linear, base=base)).action is Action.INCREMENTAL
        assert decide(_facts(in_place, base=base)).action is Action.IN_PLACE
    unfit = Fallback(Discovery.NOT_KEYED, "subquery 1's NOT IN set gained a NULL")
    full = decide(_facts(linear, base=inner, found=(unfit,)))
    assert (full.action, full.strategy) == (Action.FULL, FULL)
    assert "s.b changed and is read in a subquery: subquery 1's" in full.reason
    unkept = decide(_facts(in_place, base=inner, found=(unfit,)))  # no rebuild
    assert (unkept.action, unkept.strategy) == (Action.FULL, FULL)
    assert "s.b changed" in unkept.reason and "NULL" in unkept.considered[0]
    assert decide(_facts(linear, base=outer, found=(unfit,))).action is Action.INCREMENTAL


def test_rule_1_an_in_place_plan_maintains_its_semi_joins_changes() -> None:
    """A table read only by EXISTS/IN conjuncts may change under an in-place tick (the
    driver maintains it, or Spark where the subquery is keyed); once the aggregates give
    way, the fallback plan runs incrementally (keyed, or by the subquery's rule) until a
    rule is found unfit for the tick."""
    moved = IncrementalBase("b-1", {"s.a": 1, "s.b": 5}, 0, changed=frozenset({"s.b"}))
    gave_way = Fallback(Discovery.NOT_IN_PLACE, "the driver did not take it")
    unfit = Fallback(Discovery.NOT_KEYED, "not tied by an equality")
    tied = "EXISTS (SELECT 1 FROM s.b b WHERE b.k = a.k)"
    untied = "EXISTS (SELECT 1 FROM s.b b WHERE b.k > a.k)"
    for condition in (tied, untied):
        semi = f"SELECT k, SUM(v) AS t FROM s.a a WHERE {condition} GROUP BY k"
        assert decide(_facts(semi, base=moved)).action is Action.IN_PLACE
        after = decide(_facts(semi, base=moved, found=(gave_way,)))
        assert after.action is Action.INCREMENTAL, after
        last = decide(_facts(semi, base=moved, found=(gave_way, unfit)))
        assert last.action is Action.FULL and "s.b changed" in last.reason


def test_rule_1_an_in_place_plan_maintains_its_parameters_changes() -> None:
    """A table read only by a scalar subquery the rows are compared with (a parameter)
    may change under an in-place tick (the driver adds the rows its move flips); once the
    aggregates give way, the fallback plan runs by the subquery's rule (the rows between
    the two values), and in full once that rule is found unfit for the tick."""
    moved = IncrementalBase("b-1", {"s.a": 1, "s.b": 5}, 0, changed=frozenset({"s.b"}))
    gave_way = Fallback(Discovery.NOT_IN_PLACE, "the driver did not take it")
    unfit = Fallback(Discovery.NOT_KEYED, "subquery 1's value moved from 0 to None")
    sql = "SELECT k, SUM(v) AS t FROM s.a a WHERE v > (SELECT COUNT(*) FROM s.b) GROUP BY k"
    assert decide(_facts(sql, base=moved)).action is Action.IN_PLACE
    after = decide(_facts(sql, base=moved, found=(gave_way,)))
    assert after.action is Action.INCREMENTAL, after
    last = decide(_facts(sql, base=moved, found=(gave_way, unfit)))
    assert last.action is Action.FULL and "s.b changed" in last.reason, last


def test_rule_3_a_keyed_subquery_may_change() -> None:
    """A subquery whose table changed does not send the tick full before computing: the
    keyed rule, else each subquery's own rule (decided from the SQL and the columns before
    any data is read) bounds the rows it moves; a rule without a bound (an ``IN`` over an
    aggregate) is found when the tick computes, and the tick then runs in full."""
    moved = IncrementalBase("b-1", {"s.a": 1, "s.b": 5}, 0, changed=frozenset({"s.b"}))
    cases = {
        "a.v < (SELECT AVG(b.v) FROM s.b b WHERE b.k = a.k)": True,
        "a.k IN (SELECT k FROM s.b GROUP BY k HAVING COUNT(*) > 1)": True,
        "a.k NOT IN (SELECT k FROM s.b)": True,  # its set's NULLs checked when computing
        "NOT (a.k IN (SELECT k FROM s.b) OR a.v > 1)": True,
        "a.k IN (SELECT MAX(k) FROM s.b)": False,
    }
    columns = {"s.a": ["id", "k", "v"], "s.b": ["k", "v"]}
    for condition, bounded in cases.items():
        sql = f"SELECT a.id, a.v FROM s.a a WHERE {condition}"
        decision = decide(_facts(sql, base=moved))
        assert decision.action is Action.INCREMENTAL, (condition, decision)
        rules = subquery_rules(parse_query(sql).expression, columns, "ct")
        assert (unbounded(rules, ["s.b"]) is None) is bounded, condition
    # Computing found the keyed rule unfit for this tick: the subquery is a fixed filter
    # again, so the tick runs in full (an in-place plan gives way first), saying why.
    priced = Fallback(Discovery.NOT_KEYED, "keyed subqueries' reads: every file")
    for sql in (
        "SELECT a.id FROM s.a a WHERE a.v < (SELECT AVG(b.v) FROM s.b b WHERE b.k = a.k)",
        "SELECT a.k, SUM(a.v) AS t FROM s.a a WHERE EXISTS (SELECT 1 FROM s.b b WHERE"
        " b.k = a.k) GROUP BY a.k",
    ):
        decision = decide(_facts(sql, base=moved, found=(priced,)))
        assert decision.action is Action.FULL, decision
        expected = "s.b changed and is read in a subquery: keyed subqueries' reads: every file"
        assert decision.reason == expected, decision.reason
    # An in-place plan whose fallback is full keeps the numbers that priced it out (the
    # batch records the share, and the next tick goes full without pricing again).
    share = {"read_estimate": {"share": 1.0}}
    priced = Fallback(Discovery.NOT_KEYED, "keyed subqueries' reads: every file", share)
    one_group = "SELECT SUM(a.v) AS t FROM s.a a WHERE a.v < (SELECT AVG(b.v) FROM s.b b"
    one_group += " WHERE b.k = a.k)"
    decision = decide(_facts(one_group, base=moved, found=(priced,)))
    assert decision.action is Action.FULL and dict(decision.details) == share, decision


def test_rule_4_the_size_rules_and_what_computing_found_send_it_full() -> None:
    sent = decide(_facts(GROUP_SQL, rules=Rules("large change", {"read_estimate": {"share": 1}})))
    assert (sent.action, sent.reason, dict(sent.details)) == (
        Action.FULL,
        "large change",
        {"read_estimate": {"share": 1}},
    )
    costly = Fallback(Discovery.NOT_CHEAPER, "reads 90%", {"read_estimate": {"share": 0.9}})
    decision = decide(_facts(GROUP_SQL, found=(costly,)))
    assert (decision.action, decision.reason) == (Action.FULL, "reads 90%")
    assert dict(decision.details) == {"read_estimate": {"share": 0.9}}
    missing = Fallback(Discovery.NOT_POSSIBLE, "a retraction was not found")
    decision = decide(_facts(LINEAR_SQL, found=(missing,)))
    assert (
        decision.reason == "the incremental correction is not possible: a retraction was not found"
    )


def test_rule_5_incremental_and_every_nth_verified() -> None:
    decision = decide(_facts(LINEAR_SQL))
    assert (decision.action, decision.strategy, decision.verify) == (
        Action.INCREMENTAL,
        LINEAR,
        False,
    )
    assert decision.incremental_ticks == 3
    assert decide(_facts(LINEAR_SQL, verify_every=3)).verify is True
    assert decide(_facts(LINEAR_SQL, verify_every=5)).verify is False


def test_every_fallback_considered_is_reported_in_order() -> None:
    """In place gave way (types), then the fallback's reads were not cheaper: both reported."""
    found = (
        Fallback(Discovery.NOT_IN_PLACE, "grouping key of type double"),
        Fallback(Discovery.NOT_CHEAPER, "reads 80%"),
    )
    decision = decide(_facts(IN_PLACE_SQL, found=found))
    assert (decision.action, decision.plan.strategy) == (Action.FULL, GROUP)
    assert decision.considered == (
        "not in place: grouping key of type double",
        "not cheaper: reads 80%",
    )
