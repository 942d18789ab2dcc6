"""The mint / write / append state rules, without Spark (seed 001 invariants)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from typing import Any

import pytest

from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.commit import compare_and_append
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.mint import mint, pin_inputs
from airflow_provider_ct.core.query import parse_query
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.core.timeline import Timeline, WallClockUpper
from airflow_provider_ct.exceptions import (
    DescriptionError,
    FrontierRegressionError,
    QueryError,
    TimeNotSealedError,
)
from tests.conftest import SCHEMA
from tests.helpers import advance, rows_of, stage_rows


def _timeline(
    upper: int | None, head: int | None = 1, name: str = "t", uuid: str = "uuid-1"
) -> Timeline:
    frontier = Frontier.minimum() if upper is None else Frontier.at(upper)
    return Timeline(name, True, head, (), frontier, None, uuid)


def test_mint_covers_lower_to_t_plus_one_with_inputs_pinned() -> None:
    decision = mint(
        target="ns.v",
        target_timeline=_timeline(10, head=77),
        time=20,
        inputs={"ns.a": _timeline(21, name="ns.a")},
    )
    desc = decision.description
    assert desc is not None
    assert (desc.lower, desc.upper, desc.time, desc.base_snapshot_id) == (
        Frontier.at(10),
        Frontier.at(21),
        20,
        77,
    )
    assert desc.inputs == {"ns.a": None}


def test_mint_skips_a_sealed_tick_saying_why() -> None:
    decision = mint(target="ns.v", target_timeline=_timeline(21), time=20, inputs={})
    assert decision.description is None
    assert "below the upper" in decision.reason and "already sealed" in decision.reason


def test_mint_mints_nothing_in_read_only_mode() -> None:
    decision = mint(target="ns.v", target_timeline=_timeline(0), time=5, inputs={}, read_only=True)
    assert decision.description is None and "read-only" in decision.reason


def test_mint_on_a_closed_target_mints_nothing() -> None:
    closed = Timeline("ns.v", True, 1, (), Frontier.empty(), None)
    assert "closed" in mint(target="ns.v", target_timeline=closed, time=5, inputs={}).reason


def test_mint_refuses_inputs_that_have_not_sealed_t() -> None:
    with pytest.raises(TimeNotSealedError, match="ns.a is not complete through 20"):
        mint(
            target="ns.v",
            target_timeline=None,
            time=20,
            inputs={"ns.a": _timeline(20, name="ns.a")},
        )


def test_mint_refuses_an_upper_behind_a_previous_lower() -> None:
    previous = BatchDescription(
        "ns.v", Frontier.at(30), Frontier.at(41), 40, 5, table_uuid="uuid-1"
    )
    with pytest.raises(FrontierRegressionError, match="went backwards"):
        mint(target="ns.v", target_timeline=_timeline(20), time=50, inputs={}, previous=previous)


def test_a_recreated_table_starts_a_new_history_not_a_regression() -> None:
    """Same name, new uuid (dropped and created again): its frontier may start over."""
    previous = BatchDescription(
        "ns.v", Frontier.at(30), Frontier.at(41), 40, 5, table_uuid="uuid-old"
    )
    timeline = _timeline(20, uuid="uuid-new")
    decision = mint(target="ns.v", target_timeline=timeline, time=50, inputs={}, previous=previous)
    assert decision.description is not None
    assert decision.description.lower == Frontier.at(20)
    assert decision.description.table_uuid == "uuid-new"


def test_an_accepted_regression_lets_the_mint_start_below_a_previous_lower() -> None:
    """``accept_frontier_regression`` lowers the high-water mark: the explicit opt-in."""
    previous = BatchDescription(
        "ns.v", Frontier.at(30), Frontier.at(41), 40, 5, table_uuid="uuid-1"
    )
    accepted = dataclasses.replace(_timeline(20), high_water=Frontier.at(20))
    decision = mint(target="ns.v", target_timeline=accepted, time=50, inputs={}, previous=previous)
    assert decision.description is not None and decision.description.lower == Frontier.at(20)
    kept = dataclasses.replace(_timeline(20), high_water=Frontier.at(41))
    with pytest.raises(FrontierRegressionError, match="went backwards"):
        mint(target="ns.v", target_timeline=kept, time=50, inputs={}, previous=previous)


def test_the_minted_table_uuid_survives_json_but_is_not_part_of_the_id() -> None:
    desc = BatchDescription("ns.v", Frontier.at(30), Frontier.at(41), 40, 5, table_uuid="u-1")
    again = BatchDescription.from_json(json.loads(json.dumps(desc.to_json())))
    assert again == desc and again.table_uuid == "u-1"
    assert desc.id == BatchDescription("ns.v", Frontier.at(30), Frontier.at(41), 40, 5).id
    with pytest.raises(DescriptionError, match="table_uuid"):
        BatchDescription.from_json({**desc.to_json(), "table_uuid": 7})


def test_minting_the_same_tick_twice_gives_the_same_description() -> None:
    args: dict[str, Any] = dict(
        target="ns.v", target_timeline=_timeline(10, head=3), time=20, inputs={}
    )
    first = mint(**args).description
    again = mint(**args, previous=first)
    assert first is not None and again.description == first
    assert "idempotent" in again.reason
    other = mint(**{**args, "time": 25}).description
    assert other is not None and other.id != first.id and other.lower == first.lower


def test_description_json_round_trip_and_malformed_xcom() -> None:
    desc = BatchDescription("ns.v", Frontier.at(5), Frontier.at(11), 10, None, {"ns.a": 12})
    assert BatchDescription.from_json(json.dumps(desc.to_json())) == desc
    assert BatchDescription.from_json(desc.to_json()) == desc
    bad = desc.to_json()
    for mutate, message in [
        (lambda d: d.pop("lower"), "lacks"),
        (lambda d: d.update(time=4), "outside"),
        (lambda d: d.update(time="10"), "bad time"),
        (lambda d: d.update(inputs={"ns.a": "x"}), "inputs"),
        (lambda d: d.update(base_snapshot_id=True), "base_snapshot_id"),
        (lambda d: d.update(lower=20), "below upper"),
    ]:
        broken = dict(bad)
        mutate(broken)
        with pytest.raises(DescriptionError, match=message):
            BatchDescription.from_json(broken)
    with pytest.raises(DescriptionError, match="not JSON"):
        BatchDescription.from_json("{nope")
    with pytest.raises(DescriptionError, match="JSON object"):
        BatchDescription.from_json("[1, 2]")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELEC 1 FROM ns.a", "does not parse"),
        ("DELETE FROM ns.a WHERE x = 1", "must be a SELECT"),
        ("INSERT INTO ns.v SELECT * FROM ns.a", "must be a SELECT"),
        ("SELECT * FROM ns.a; SELECT * FROM ns.b", "exactly one"),
        ("SELECT 1", "reads no table"),
        ("SELECT * FROM ns.v JOIN ns.a ON true", "reads its own target"),
        ("SELECT * FROM a", "namespace.table"),
        ("SELECT * FROM (", "does not parse"),
        ("   ", "empty"),
    ],
)
def test_bad_queries_fail_before_spark_naming_the_problem(sql: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_query(sql, target="ns.v")


def test_query_inputs_ignore_ctes_and_strip_the_catalog_name() -> None:
    parsed = parse_query(
        "WITH recent AS (SELECT * FROM ct.ns.orders) "
        "SELECT * FROM recent r JOIN ns.customers c ON r.c = c.id",
        target="ns.v",
    )
    assert parsed.inputs == ("ns.customers", "ns.orders")
    pinned = parsed.pinned_sql({"ns.orders": "__o", "ns.customers": "__c"})
    assert "__o AS orders" in pinned and "__c AS c" in pinned and "ct.ns" not in pinned


def test_pin_inputs_uses_the_snapshot_holding_each_input_at_t(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    catalog = sqlite_catalog_config.load()
    table = create_managed_table(catalog, "ns.a", SCHEMA)
    snaps = {}
    upper = Frontier.minimum()
    for time in (10, 20):
        result = compare_and_append(
            table,
            expected_upper=upper,
            new_upper=Frontier.sealing(time),
            batch_id=f"b{time}",
            add_files=stage_rows(table, f"b{time}", [(time, "x")]),
            time=time,
        )
        upper = result.upper
        snaps[time] = result.snapshot_ids[-1]
    advance(table, 30)
    timeline = Timeline.of(table)
    assert pin_inputs({"ns.a": timeline}, 15) == {"ns.a": snaps[10]}
    assert pin_inputs({"ns.a": timeline}, 25) == {"ns.a": snaps[20]}
    assert pin_inputs({"ns.a": timeline}, 5) == {"ns.a": None}
    external = Timeline.of(table, policy=WallClockUpper(0), now=10**13)
    assert external.managed  # our own tables always use their ct.* keys


def test_random_interleavings_of_two_replicas_keep_the_seed_invariants(
    sqlite_catalog_config: CatalogConfig,
) -> None:
    """Two replicas mint, write and append in random orders against a real table.

    Invariants (seed 001): landed batches have unique, strictly increasing
    lowers that chain (each lower = the previous upper); no time is written
    twice; every stale description or batch is discarded, never appended.
    """
    catalog = sqlite_catalog_config.load()
    table = create_managed_table(catalog, "ns.v", SCHEMA)
    rng = random.Random(1234)
    pending: dict[str, list[tuple[BatchDescription, list[str]]]] = {"a": [], "b": []}
    landed: list[BatchDescription] = []
    rejected = 0
    time = 0
    for _ in range(120):
        replica = rng.choice("ab")
        action = rng.choice(["mint", "mint", "append"])
        table.refresh()
        if action == "mint":
            time += rng.randint(1, 3)
            decision = mint(target="ns.v", target_timeline=Timeline.of(table), time=time, inputs={})
            if decision.description is not None:
                desc = decision.description
                files = stage_rows(table, desc.id, [(desc.time, replica)])
                pending[replica].append((desc, files))
        elif pending[replica]:
            desc, files = pending[replica].pop(rng.randrange(len(pending[replica])))
            result = compare_and_append(
                table,
                expected_upper=desc.lower,
                new_upper=desc.upper,
                batch_id=desc.id,
                add_files=files,
                time=desc.time,
                expected_head=desc.base_snapshot_id,
            )
            if result.landed and not result.already_landed:
                landed.append(desc)
            elif not result.landed:
                rejected += 1
                assert result.upper >= desc.lower
    table.refresh()
    lowers = [d.lower.time for d in landed]
    assert lowers == sorted(set(lowers)), "lowers must be unique and strictly increasing"
    for prev, nxt in itertools.pairwise(landed):
        assert nxt.lower == prev.upper, "each batch starts where the previous ended"
    assert rejected > 0, "the interleaving must have produced stale batches"
    times = [d.time for d in landed]
    # Exactly one row per landed batch, none from a discarded one: no time twice.
    assert sorted(k for k, _ in rows_of(table).elements()) == times
    assert len(times) == len(set(times))
    assert [t for t, _ in Timeline.of(table).data_times()] == times


class _PriorXComs:
    """What the Task SDK's ``xcom_pull(..., include_prior_dates=True)`` answers."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def xcom_pull(self, **_: Any) -> Any:
        return self.value


def test_the_previous_description_is_the_newest_of_the_earlier_runs() -> None:
    """From a view's third tick on, earlier runs' descriptions come back as a list."""
    from airflow_provider_ct.operators.mint import previous_description

    def desc(time: int) -> BatchDescription:
        return BatchDescription("v.t", Frontier.at(time - 10), Frontier.at(time + 1), time, None)

    older, newer = desc(100), desc(200)
    both = [newer.to_json(), older.to_json(), {"not": "a description"}]
    assert previous_description({"ti": _PriorXComs(both)}, "mint") == newer
    assert previous_description({"ti": _PriorXComs(older.to_json())}, "mint") == older
    assert previous_description({"ti": _PriorXComs(None)}, "mint") is None
    assert previous_description({"ti": _PriorXComs([{"bad": 1}])}, "mint") is None
