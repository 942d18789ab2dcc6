"""The page's HTML (airflow_provider_ct.ui.render): escaping, error rows, the plot, durations."""

from __future__ import annotations

from airflow_provider_ct.core.frontier import Frontier
from airflow_provider_ct.ui.render import (
    format_duration,
    plot_svg,
    render_history,
    render_index,
    to_json,
)
from airflow_provider_ct.ui.status import (
    Batch,
    CatalogStatus,
    HoldStatus,
    TableHistory,
    TableStatus,
)

T0 = 1_700_000_000_000


def _batch(i: int, inserted: int, retracted: int, drift: int = 0) -> Batch:
    return Batch(
        batch_id=f"b{i}",
        committed_at_ms=T0 + 1000 * i,
        time=T0 + i,
        upper=Frontier.at(T0 + i + 1),
        snapshots=1,
        inserted=inserted,
        retracted=retracted,
        strategy="full",
        drift_rows=drift,
        drift_commits=1 if drift else 0,
        lag_ms=1000 * i,
    )


def test_durations_read_like_a_person_would_say_them() -> None:
    assert [format_duration(v) for v in (0, 999, 12_300, 245_000, 7_800_000, 90_000_000)] == [
        "0 ms",
        "999 ms",
        "12.3 s",
        "4 min 05 s",
        "2 h 10 min",
        "1 d 1 h",
    ]


def test_error_rows_and_catalog_errors_are_shown_escaped() -> None:
    broken = TableStatus("ns.bad", "iceberg://ct/ns/bad", error="<script>alert(1)</script>")
    fine = TableStatus(
        "ns.ok",
        "iceberg://ct/ns/ok",
        kind="view",
        upper=Frontier.at(T0),
        lag_ms=5,
        holds=(HoldStatus("ns.reader", T0 - 1, "reader upper"),),
    )
    down = CatalogStatus("lake", T0, error="cannot open <catalog>")
    html = render_index(
        [("a", CatalogStatus("ct", T0, (broken, fine))), ("b", down)],
        {"iceberg://ct/ns/ok": ["my_dag"]},
        T0,
    )
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'class="error" data-table="ns.bad"' in html
    assert "cannot open &lt;catalog&gt;" in html
    assert f'data-upper="{T0}" data-lag-ms="5"' in html
    assert 'href="../dags/my_dag"' in html and 'href="tables/ns.ok?conn=a"' in html
    assert "ns.reader" in html


def test_the_history_page_links_back_and_plots_each_tick() -> None:
    row = TableStatus("ns.v", "iceberg://ct/ns/v", upper=Frontier.at(T0 + 4), lag_ms=0)
    batches = (_batch(1, 3, 0), _batch(2, 1, 2, drift=2), _batch(3, 0, 0))
    html = render_history(TableHistory(row, batches), ["v_dag"], "c", T0)
    assert 'href="../../dags/v_dag"' in html and 'href="../"' in html
    assert 'data-ticks="3"' in html
    assert html.count('class="dot"') == 3 and html.count('class="bar"') == 3
    assert "2 rows (1 foreign commit(s))" in html
    assert plot_svg(()) == '<p class="muted">No batches yet.</p>'


def test_json_spells_frontiers_like_summaries() -> None:
    data = to_json(
        TableHistory(TableStatus("n.t", "u", upper=Frontier.empty()), (_batch(1, 2, 3),))
    )
    assert data["status"]["upper"] == "empty"
    assert data["batches"][0]["upper"] == str(T0 + 2)
    assert data["batches"][0]["corrected_rows"] == 5
