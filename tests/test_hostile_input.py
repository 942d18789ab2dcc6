"""Hostile input on the operator surfaces: a clear error naming the problem, and nothing changes.

Every test tries one bad input against a real SQLite catalog (through the
operators where there is one) and checks both halves: the error is one of
ours and names the value, and no table moved (same metadata file, so no
commit of data or properties, same head snapshot, same rows; tables that did
not exist still do not).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_ct.collections import (
    DifferentialCollection,
    MaintenanceSettings,
    Ticker,
    read_holds,
    register_collection,
    register_reader,
    tick_collections,
)
from airflow_provider_ct.collections.differential import DESIRED_DIR, list_pending
from airflow_provider_ct.core.catalog import CatalogConfig
from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.core.tables import create_managed_table
from airflow_provider_ct.exceptions import (
    CollectionError,
    ConfigurationError,
    DescriptionError,
    FrontierError,
    MalformedSummaryError,
    QueryError,
    TimeNotSealedError,
)
from tests.conftest import SCHEMA
from tests.helpers import advance, local_path, rows_of

pytestmark = pytest.mark.faults

EXT, STATUS, LOG, VIEW = "ext.events", "ops.status", "ops.log", "ops.view"
SQL = "SELECT e.k, s.v FROM ext.events AS e JOIN ops.status AS s ON e.k = s.k"
WATERMARK = "producer.watermark"

State = dict[str, tuple[str, int | None, Counter[tuple[Any, ...]]] | None]


def _state(catalog: Any, *names: str) -> State:
    """Per table: metadata file (moves on any commit, properties too), head, rows."""
    out: State = {}
    for name in names:
        if not catalog.table_exists(name):
            out[name] = None
            continue
        table = catalog.load_table(name)
        head = table.metadata.current_snapshot()
        out[name] = (
            table.metadata_location,
            None if head is None else head.snapshot_id,
            rows_of(table),
        )
    return out


def _world(config: CatalogConfig, watermark: str = "100") -> tuple[Any, State]:
    """An external input with a producer watermark, two collections, no view yet."""
    catalog = config.load()
    catalog.create_namespace("ext")
    external = catalog.create_table(EXT, schema=SCHEMA)
    external.append(
        pa.table({"k": [1], "v": ["e"]}, schema=SCHEMA), snapshot_properties={WATERMARK: watermark}
    )
    register_collection(catalog, STATUS, SCHEMA, "differential")
    register_collection(catalog, LOG, SCHEMA, "append-only")
    DifferentialCollection.open(catalog, STATUS, clock=lambda: 150).replace([(1, "up")])
    advance(catalog.load_table(STATUS), 200)
    advance(catalog.load_table(LOG), 200)
    return catalog, _state(catalog, EXT, STATUS, LOG, VIEW)


def _mint(**kwargs: Any) -> Any:
    from airflow_provider_ct import MintOperator

    return MintOperator(task_id="mint", target=VIEW, sql=SQL, **kwargs).execute({})


# -- 1. input_upper_policies keys -----------------------------------------------------------
def test_a_policy_key_naming_no_input_is_refused_listing_the_inputs(
    default_catalog: CatalogConfig,
) -> None:
    catalog, before = _world(default_catalog)
    with pytest.raises(ConfigurationError) as info:
        _mint(time=50, input_upper_policies={"ext.evnets": f"summary:{WATERMARK}"})
    assert "'ext.evnets'" in str(info.value)
    assert "not an input; the inputs are ['ext.events', 'ops.status']" in str(info.value)
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before  # no view, no read hold


def test_the_sensor_refuses_a_policy_key_naming_no_input(default_catalog: CatalogConfig) -> None:
    from airflow_provider_ct import FrontierSensor

    catalog, before = _world(default_catalog)
    sensor = FrontierSensor(
        task_id="wait", sql=SQL, time=50, input_upper_policies={"ct.ops.statuz": "wallclock"}
    )
    with pytest.raises(ConfigurationError, match=r"'ct.ops.statuz' names ops.statuz, which is not"):
        sensor.poke({})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


@pytest.mark.parametrize("key", ["ct.ext.events", "EXT.Events", "`ct`.`ext`.`events`"])
def test_a_catalog_qualified_or_cased_policy_key_applies_to_its_input(
    default_catalog: CatalogConfig, key: str
) -> None:
    """The producer's watermark (100) decides, not the wall clock (which seals 150)."""
    from airflow_provider_ct import FrontierSensor

    catalog, before = _world(default_catalog)
    policies = {key: f"summary:{WATERMARK}"}
    with pytest.raises(TimeNotSealedError, match="input ext.events is not complete through 150"):
        _mint(time=150, input_upper_policies=policies)
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before  # refused: no read hold either
    sensor = FrontierSensor(task_id="w", tables=[EXT], time=150, input_upper_policies=policies)
    assert not sensor.poke({})
    minted = _mint(time=50, input_upper_policies=policies)
    assert (minted["target"], minted["time"], minted["upper"]) == (VIEW, 50, 51)
    assert [h.reader for h in read_holds(catalog.load_table(STATUS))] == [VIEW]


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ({"ext.evnets": "wallclock"}, r"'ext.evnets' names ext.evnets, which is not an input"),
        (
            {"ext.events": "wallclock", "ct.ext.events": "wallclock:5"},
            "names input ext.events twice",
        ),
        ({"events": "wallclock"}, "'events': table 'events' must be written as namespace.table"),
        ({EXT: "wallclock:²"}, r"'wallclock:²': the allowance must be milliseconds"),
        ({EXT: "wallclock:-5"}, "the allowance must be milliseconds"),
        ({EXT: "wallclock:" + "9" * 5000}, "would never seal anything"),
        ({EXT: "wallclock:" + "9" * 19}, "would never seal anything"),
        ({EXT: "summary: "}, "unknown upper policy"),
        ({EXT: "sometimes"}, "unknown upper policy 'sometimes'"),
        ({EXT: 5}, "upper policy 5 must be a string"),
        (["ext.events"], "must map input tables to policies, got list"),
    ],
)
def test_bad_policies_break_the_view_at_dag_parse_time(policies: Any, message: str) -> None:
    from airflow.sdk import DAG

    from airflow_provider_ct import materialized_view

    start = datetime(2026, 1, 1, tzinfo=UTC)
    with (
        DAG("hostile_policies", schedule=None, start_date=start) as dag,
        pytest.raises(ConfigurationError, match=message),
    ):
        materialized_view(target=VIEW, sql=SQL, input_upper_policies=policies)
    assert dag.task_ids == []  # nothing of the view was added


# -- 2. a tick DAG's namespaces ---------------------------------------------------------------
def test_a_tick_dag_with_a_mistyped_namespace_fails_naming_it(
    airflow_db: None, default_catalog: CatalogConfig, capfd: pytest.CaptureFixture[str]
) -> None:
    catalog, before = _world(default_catalog)
    sys.path.insert(0, str(Path(__file__).resolve().parent / "dags"))
    import hostile_tick_typo  # the DAG bundle's copy: dag.test() needs it serialized

    capfd.readouterr()
    run = hostile_tick_typo.dag.test(logical_date=datetime(2026, 6, 1, tzinfo=UTC))
    assert run.state == "failed"
    assert run.get_task_instance("tick").state == "failed"
    logged = "".join(capfd.readouterr())  # the task log (Airflow's structlog writes to stdio)
    assert (
        "CollectionError: namespace 'opz' does not exist in the catalog; its namespaces are "
        "['ext', 'ops']" in logged
    )
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before  # nothing ticked


def test_a_namespace_without_collections_is_refused_before_anything_ticks(
    default_catalog: CatalogConfig,
) -> None:
    from airflow_provider_ct.operators.collections_upkeep import (
        MaintainTablesOperator,
        TickCollectionsOperator,
    )

    catalog, _ = _world(default_catalog)
    create_managed_table(catalog, "plain.table", SCHEMA)  # exists, but is no collection
    before = _state(catalog, EXT, STATUS, LOG, "plain.table")
    # "ops" comes first and holds collections: it must not be ticked either.
    with pytest.raises(CollectionError, match="namespace 'plain' holds no registered collection"):
        tick_collections(catalog, namespaces=["ops", "plain"], now=10_000)
    with pytest.raises(CollectionError, match="namespace 'ext' holds no registered collection"):
        TickCollectionsOperator(task_id="t", namespaces=["ops", "ext"], time=10_000).execute({})
    with pytest.raises(CollectionError, match="namespace 'opz' does not exist"):
        MaintainTablesOperator(task_id="m", namespaces=["opz"], retention_ms=0).execute({})
    with pytest.raises(CollectionError, match="namespace '' is not a namespace name"):
        tick_collections(catalog, namespaces=[""], now=10_000)
    assert _state(catalog, EXT, STATUS, LOG, "plain.table") == before


def test_namespaces_given_as_one_string_are_refused(default_catalog: CatalogConfig) -> None:
    """``list("ops")`` is three one-letter namespaces: refused where it is passed."""
    from airflow_provider_ct import collections_dag
    from airflow_provider_ct.operators.collections_upkeep import TickCollectionsOperator

    catalog, before = _world(default_catalog)
    with pytest.raises(ConfigurationError, match="namespaces must be a list of names, got the"):
        TickCollectionsOperator(task_id="t", namespaces="ops")
    with pytest.raises(ConfigurationError, match="got the string 'ops'"):
        collections_dag(dag_id="hostile_tick_string", namespaces="ops")
    with pytest.raises(CollectionError, match="got the string 'ops'"):
        Ticker(catalog, namespaces="ops")
    with pytest.raises(CollectionError, match="got the string 'ops'"):
        tick_collections(catalog, namespaces="ops", now=10_000)
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


def test_a_named_namespace_with_collections_still_ticks(default_catalog: CatalogConfig) -> None:
    catalog, _ = _world(default_catalog)
    report = tick_collections(catalog, namespaces=["ops", "ops"], now=10_000)
    assert report.statuses() == {LOG: "advanced", STATUS: "advanced"}  # once each


# -- 3. diffs in desired states and updates ---------------------------------------------------
def test_a_desired_state_keeps_its_diffs_as_copies(default_catalog: CatalogConfig) -> None:
    from airflow_provider_ct.operators.collections import DifferentialWriteOperator

    catalog, _ = _world(default_catalog)
    DifferentialWriteOperator(
        task_id="d", collection=STATUS, desired={"rows": [[1, "a"], [2, "b"]], "diffs": [2, 0]}
    ).execute({})
    assert rows_of(catalog.load_table(STATUS)) == Counter({(1, "a"): 2})
    DifferentialWriteOperator(
        task_id="u", collection=STATUS, retract=[{"row": [1, "a"], "diff": 2}], insert=[[3, "c"]]
    ).execute({})
    assert rows_of(catalog.load_table(STATUS)) == Counter({(3, "c"): 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"desired": {"rows": [[1, "a"], [2, "b"]], "diffs": [1, -1]}},
            r"desired rows\[1\] has diff -1; here a diff counts copies",
        ),
        ({"insert": [{"row": [1, "up"], "diff": -1}]}, r"rows to insert\[0\] has diff -1"),
        ({"retract": [{"row": [1, "up"], "diff": -1}]}, r"rows to retract\[0\] has diff -1"),
        ({"desired": {"rows": [[1, "a"]], "diffs": [10**12]}}, "at most 10000000 per write"),
        ({"desired": {"rows": [[1, "a"]], "diffs": ["2"]}}, "a diff must be an integer, got '2'"),
        ({"desired": {"rows": [[1, "a"]], "diffs": [1, 1]}}, r"got 1 row\(s\) but 2 diff\(s\)"),
        ({"desired": "[" * 100_000}, "updates are not JSON"),
    ],
)
def test_bad_diffs_in_a_differential_write_are_refused(
    default_catalog: CatalogConfig, kwargs: dict[str, Any], message: str
) -> None:
    from airflow_provider_ct.operators.collections import DifferentialWriteOperator

    catalog, before = _world(default_catalog)
    with pytest.raises(CollectionError, match=message):
        DifferentialWriteOperator(task_id="d", collection=STATUS, **kwargs).execute({})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before
    assert list_pending(catalog.load_table(STATUS)) == []  # nothing kept for later either


def test_a_blind_write_asking_for_a_trillion_copies_is_refused(
    default_catalog: CatalogConfig,
) -> None:
    from airflow_provider_ct.operators.collections import BlindWriteOperator

    catalog, before = _world(default_catalog)
    rows = {"rows": [[1, "x"], [2, "y"]], "diffs": [10**12, -(10**12)]}
    with pytest.raises(CollectionError, match="ask for 2000000000000 row copies"):
        BlindWriteOperator(task_id="b", collection=LOG, rows=rows).execute({})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


# -- 4. times that are not ASCII digits ---------------------------------------------------------
BAD_TIMES = ["²", "١٢", "-5", "1.5e3", "0x10", "12 34", "9" * 30, "9" * 5000, -1, 2**63, True, 1.5]


@pytest.mark.parametrize("time", BAD_TIMES, ids=lambda t: repr(t)[:12])
def test_a_bad_tick_time_is_refused_naming_it(default_catalog: CatalogConfig, time: Any) -> None:
    catalog, before = _world(default_catalog)
    with pytest.raises(FrontierError) as info:
        _mint(time=time)
    assert repr(time)[:20] in str(info.value)
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


@pytest.mark.parametrize("time", ["²", "-5", "9" * 5000], ids=["superscript", "negative", "huge"])
def test_bad_times_of_collection_operators_are_refused_naming_them(
    default_catalog: CatalogConfig, time: str
) -> None:
    from airflow_provider_ct.operators.collections_upkeep import (
        RegisterReaderOperator,
        TickCollectionsOperator,
    )

    catalog, before = _world(default_catalog)
    with pytest.raises(FrontierError, match=r"time='(²|-5|9{20})"):
        TickCollectionsOperator(task_id="t", time=time).execute({})
    reader = RegisterReaderOperator(task_id="r", reader="x.task", inputs=[LOG], since=time)
    with pytest.raises(FrontierError, match=r"since='(²|-5|9{20})"):
        reader.execute({})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


def test_a_huge_producer_watermark_is_a_malformed_summary(default_catalog: CatalogConfig) -> None:
    """5000 digits: ``int()`` would raise a raw ValueError (beyond its digit limit)."""
    catalog, before = _world(default_catalog, watermark="9" * 5000)
    with pytest.raises(MalformedSummaryError, match=f"'{WATERMARK}' in snapshot .* beyond"):
        _mint(time=50, input_upper_policies={EXT: f"summary:{WATERMARK}"})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


def test_a_pending_file_with_a_non_ascii_stamp_is_not_ours(default_catalog: CatalogConfig) -> None:
    catalog, _ = _world(default_catalog)
    folder = local_path(catalog.load_table(STATUS).location()) / DESIRED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "²-stray.parquet").write_bytes(b"not ours")
    assert list_pending(catalog.load_table(STATUS)) == []
    report = tick_collections(catalog, namespaces=["ops"], now=10_000)
    assert report.errors == {}
    assert report.statuses() == {LOG: "advanced", STATUS: "advanced"}


# -- 5. other hostile input on the operator surfaces ----------------------------------------------
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: "[" * 100_000, "batch description is neither JSON nor a dict"),
        (lambda d: "{[1]: 2}", "batch description is neither JSON nor a dict"),
        (lambda d: {**d, "lower": 45}, r"id .* does not match its content"),
        (lambda d: {**d, "id": "../../../elsewhere"}, "cannot name a staging folder"),
        (lambda d: {**d, "id": "x" * 300}, "cannot name a staging folder"),
        (
            lambda d: BatchDescription(
                "ops.other", Frontier.at(0), Frontier.at(51), 50, None
            ).to_json(),
            "is for ops.other, not for this task's target ops.view",
        ),
    ],
)
def test_a_malformed_description_fails_before_spark_and_stages_nothing(
    default_catalog: CatalogConfig, mutate: Any, message: str
) -> None:
    from airflow_provider_ct import WriteOperator

    catalog, _ = _world(default_catalog)
    description = mutate(_mint(time=50))
    before = _state(catalog, EXT, STATUS, LOG, VIEW)
    warehouse = local_path(default_catalog.warehouse)
    files = sorted(warehouse.rglob("*"))
    write = WriteOperator(task_id="write", target=VIEW, sql=SQL, description=description)
    with pytest.raises(DescriptionError, match=message):
        write.execute({})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before
    assert sorted(warehouse.rglob("*")) == files  # nothing staged, nothing deleted


def test_description_ids_are_checked_when_built_and_when_read() -> None:
    desc = BatchDescription("ns.v", Frontier.at(5), Frontier.at(11), 10, None)
    assert BatchDescription.from_json(json.dumps(desc.to_json())) == desc
    with pytest.raises(DescriptionError, match="cannot name a staging folder"):
        BatchDescription("ns.v", Frontier.at(5), Frontier.at(11), 10, None, id="a/b")
    with pytest.raises(DescriptionError, match="does not match its content"):
        BatchDescription.from_json({**desc.to_json(), "time": 9})


def test_a_tick_time_no_input_has_sealed_registers_no_read_hold(
    default_catalog: CatalogConfig,
) -> None:
    """A first mint at a far-future time used to leave a hold that let expiry drop history."""
    catalog, before = _world(default_catalog)
    with pytest.raises(TimeNotSealedError, match="input ext.events is not complete through 10{15}"):
        _mint(time=10**15)
    assert read_holds(catalog.load_table(STATUS)) == []
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


def test_registering_a_reader_on_a_missing_input_changes_no_other_input(
    default_catalog: CatalogConfig,
) -> None:
    from airflow_provider_ct.operators.collections_upkeep import RegisterReaderOperator

    catalog, before = _world(default_catalog)
    with pytest.raises(ConfigurationError, match="input 'ops.missing' of reader 'x.task'"):
        register_reader(catalog, "x.task", [LOG, STATUS, "ops.missing"])
    with pytest.raises(ConfigurationError, match="inputs must be a list of names, got the string"):
        RegisterReaderOperator(task_id="r", reader="x.task", inputs=LOG)
    with pytest.raises(ConfigurationError, match="a reader needs a name"):
        register_reader(catalog, " ", [LOG])
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


def test_a_missing_input_is_named_by_the_sensor_and_the_trigger(
    default_catalog: CatalogConfig,
) -> None:
    from airflow_provider_ct import FrontierSensor
    from airflow_provider_ct.triggers.frontier import FrontierTrigger

    catalog, before = _world(default_catalog)
    sensor = FrontierSensor(task_id="w", tables=[LOG, "ops.missing"], time=50)
    with pytest.raises(ConfigurationError, match="table 'ops.missing' does not exist"):
        sensor.poke({})

    async def first_event() -> dict[str, Any]:
        trigger = FrontierTrigger(tables=[LOG, "ops.missing"], time=50, poll_interval=0.1)
        event = await trigger.run().__anext__()
        return dict(event.payload)

    payload = asyncio.run(first_event())
    assert payload["status"] == "error"
    assert "table 'ops.missing' does not exist" in payload["message"]
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sql": "SELECT * FROM ops.status; DROP TABLE ops.status"}, "exactly one SELECT"),
        ({"target": None}, "a table name must be a string, got NoneType"),
    ],
)
def test_bad_sql_or_target_at_mint_changes_nothing(
    default_catalog: CatalogConfig, kwargs: dict[str, Any], message: str
) -> None:
    from airflow_provider_ct import MintOperator

    catalog, before = _world(default_catalog)
    args = {"target": VIEW, "sql": SQL, "time": 50, **kwargs}
    with pytest.raises(QueryError, match=message):
        MintOperator(task_id="m", **args).execute({})
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


def test_an_unknown_collection_kind_is_refused_listing_the_kinds(
    default_catalog: CatalogConfig,
) -> None:
    catalog, before = _world(default_catalog)
    with pytest.raises(CollectionError, match=r"'sideways' is not one of \['append-only', 'diff"):
        register_collection(catalog, "ops.new", SCHEMA, "sideways")
    assert not catalog.table_exists("ops.new")
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retention_ms": -3_600_000}, "retention_ms=-3600000 must be an integer >= 0"),
        ({"retention_ms": "3600000"}, "retention_ms='3600000' must be an integer"),
        ({"min_files": 0}, "min_files=0 must be an integer >= 1"),
        ({"target_file_bytes": 0}, "target_file_bytes=0 must be an integer >= 1"),
    ],
)
def test_maintenance_settings_that_would_expire_too_much_are_refused(
    default_catalog: CatalogConfig, kwargs: dict[str, Any], message: str
) -> None:
    """A negative retention puts "readable since" in the future: everything unheld would go."""
    from airflow_provider_ct.operators.collections_upkeep import MaintainTablesOperator

    catalog, before = _world(default_catalog)
    with pytest.raises(ConfigurationError, match=message):
        MaintenanceSettings(**kwargs)
    with pytest.raises(ConfigurationError, match=message):
        MaintainTablesOperator(task_id="m", namespaces=["ops"], **kwargs)
    assert _state(catalog, EXT, STATUS, LOG, VIEW) == before


@pytest.mark.parametrize("columns", [{}, [("k", "int64")], "k int64"])
def test_a_collection_without_columns_is_refused(columns: Any) -> None:
    from airflow_provider_ct.operators.collections import RegisterCollectionOperator

    with pytest.raises(ConfigurationError, match="columns must map at least one column name"):
        RegisterCollectionOperator(
            task_id="r", collection="ops.new", columns=columns, kind="differential"
        )
