"""HTML for the "Continual tables" page: server-rendered, inline CSS and SVG, no script.

Nothing is fetched from anywhere (no CDN, no font, no JavaScript), so the
page works offline and inside the Airflow UI's iframe alike. Links are
relative (``tables/<name>``, ``../dags/<id>``), so the page works under
any base URL or reverse-proxy prefix. Every value shown is escaped.

Rows carry ``data-*`` attributes with the raw numbers (``data-upper``,
``data-lag-ms``; the body's ``data-now-ms``) so that tests and scripts can
read what the page shows without parsing formatted text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from airflow_provider_ct.core.frontier import Frontier, format_timestamp
from airflow_provider_ct.ui.status import (
    Batch,
    CatalogStatus,
    HoldStatus,
    TableHistory,
    TableStatus,
)

_CSS = """
:root { color-scheme: light dark; --fg: #1a202c; --muted: #64748b; --line: #e2e8f0;
  --bad: #c53030; --badbg: #fff5f5; --accent: #2b6cb0; --bar: #4c8bd6; --drift: #e53e3e; }
@media (prefers-color-scheme: dark) { :root { --fg: #e2e8f0; --muted: #94a3b8;
  --line: #334155; --badbg: #3b1d1d; --accent: #63b3ed; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); margin: 16px 20px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 6px; }
.muted { color: var(--muted); } a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { font-weight: 600; white-space: nowrap; } td.num { text-align: right; }
.t { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 11.5px;
  white-space: nowrap; } td.num { white-space: nowrap; }
tr.error td { background: var(--badbg); color: var(--bad); }
.error-box { border: 1px solid var(--bad); background: var(--badbg); color: var(--bad);
  padding: 8px 12px; border-radius: 4px; margin: 8px 0; }
ul.holds { margin: 0; padding-left: 16px; } svg text { fill: var(--muted); font-size: 11px; }
svg .axis { stroke: var(--line); } svg .lag { stroke: var(--accent); fill: none;
  stroke-width: 2; } svg .dot { fill: var(--accent); } svg .bar { fill: var(--bar); }
svg .drift { fill: var(--drift); }
"""


def format_duration(ms: int | None) -> str:
    """A duration for people: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 10 min``..."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def format_time(ms: int | None) -> str:
    return "" if ms is None else format_timestamp(ms)


def format_upper(upper: Frontier | None) -> str:
    if upper is None:
        return ""
    return "closed" if upper.time is None else format_timestamp(upper.time)


def _page(title: str, body: str, now_ms: int) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>"
        f'<body data-now-ms="{now_ms}">{body}</body></html>'
    )


def _holds(holds: Sequence[HoldStatus]) -> str:
    if not holds:
        return '<span class="muted">none</span>'
    items = []
    for hold in holds:
        when = "released" if hold.time is None else format_timestamp(hold.time)
        items.append(
            f'<li title="{escape(hold.why)}"><b>{escape(hold.reader)}</b> '
            f'<span class="t">{escape(when)}</span></li>'
        )
    return f'<ul class="holds">{"".join(items)}</ul>'


def _dags(dag_ids: Sequence[str], root: str) -> str:
    if not dag_ids:
        return '<span class="muted">unknown</span>'
    return ", ".join(
        f'<a target="_top" href="{root}../dags/{quote(d, safe="")}">{escape(d)}</a>'
        for d in dag_ids
    )


def _table_link(row: TableStatus, root: str, conn_id: str) -> str:
    href = f"{root}tables/{quote(row.name, safe='')}?conn={quote(conn_id, safe='')}"
    return f'<a href="{escape(href)}">{escape(row.name)}</a>'


def table_row(row: TableStatus, dags: Sequence[str], conn_id: str, root: str = "") -> str:
    """One ``<tr>`` of the index (an error row if the table cannot be read).

    :param root: the relative path from the current page to the app's root
        (``""`` on the index, ``"../"`` on a table's page).
    """
    attrs = f'data-table="{escape(row.name)}"'
    if row.error is not None:
        return (
            f'<tr class="error" {attrs}><td>{escape(row.name)}</td>'
            f'<td colspan="8">cannot be read: {escape(row.error)}</td></tr>'
        )
    upper = "" if row.upper is None or row.upper.time is None else str(row.upper.time)
    attrs += f' data-upper="{upper}" data-lag-ms="{row.lag_ms}" data-snapshots="{row.snapshots}"'
    since = format_time(row.since) or '<span class="muted">all</span>'
    return (
        f"<tr {attrs}><td>{_table_link(row, root, conn_id)}</td>"
        f'<td class="kind">{escape(row.kind)}</td>'
        f'<td class="t">{format_upper(row.upper)}</td>'
        f'<td class="num">{format_duration(row.lag_ms)}</td>'
        f'<td class="t">{format_time(row.newest_time)}</td>'
        f'<td class="num">{row.snapshots}</td><td class="t">{since}</td>'
        f"<td>{_holds(row.holds)}</td><td>{_dags(dags, root)}</td></tr>"
    )


_INDEX_HEAD = (
    "<tr><th>Table</th><th>Kind</th><th>Upper (exclusive)</th><th>Lag</th>"
    "<th>Newest ct.time</th><th>Snapshots</th><th>ct.since</th><th>Read holds</th>"
    "<th>Produced by</th></tr>"
)


def catalog_section(
    status: CatalogStatus, conn_id: str, producers: Mapping[str, Sequence[str]]
) -> str:
    """One catalog's heading and table (or its error)."""
    head = (
        f"<h2>Catalog <code>{escape(status.catalog)}</code> "
        f'<span class="muted">(connection {escape(conn_id)})</span></h2>'
    )
    if status.error is not None:
        return head + f'<div class="error-box" data-catalog-error>{escape(status.error)}</div>'
    notes = "".join(f'<p class="muted">{escape(n)}</p>' for n in status.notes)
    if not status.tables:
        return head + notes + '<p class="muted">No managed tables.</p>'
    rows = "".join(table_row(r, producers.get(r.asset_uri, ()), conn_id) for r in status.tables)
    extra = f" ({status.unmanaged} other tables not managed)" if status.unmanaged else ""
    return (
        head
        + notes
        + f'<table id="tables-{escape(conn_id)}"><thead>{_INDEX_HEAD}</thead>'
        + f"<tbody>{rows}</tbody></table>"
        + f'<p class="muted">{len(status.tables)} managed table(s){extra}.</p>'
    )


def render_index(
    sections: Sequence[tuple[str, CatalogStatus]],
    producers: Mapping[str, Sequence[str]],
    now_ms: int,
    notes: Sequence[str] = (),
) -> str:
    """The index page: every catalog's managed tables."""
    body = (
        "<h1>Continual tables</h1>"
        f'<p class="muted">As of {format_timestamp(now_ms)}. The upper is exclusive: '
        "every time below it is sealed. Lag is now minus the upper. Reload to refresh.</p>"
        + "".join(f'<p class="muted">{escape(n)}</p>' for n in notes)
        + "".join(catalog_section(status, conn, producers) for conn, status in sections)
    )
    return _page("Continual tables", body, now_ms)


def _batch_row(batch: Batch) -> str:
    drift = (
        f"{batch.drift_rows} rows ({batch.drift_commits} foreign commit(s))"
        if batch.drift_commits
        else '<span class="muted">none</span>'
    )
    return (
        f'<tr data-batch="{escape(batch.batch_id or "")}">'
        f'<td class="t">{format_time(batch.committed_at_ms)}</td>'
        f'<td class="t">{format_time(batch.time) or "frontier only"}</td>'
        f'<td class="t">{format_upper(batch.upper)}</td>'
        f'<td class="num">{batch.inserted}</td><td class="num">{batch.retracted}</td>'
        f"<td>{escape(batch.strategy)}</td><td>{drift}</td>"
        f'<td class="num">{format_duration(batch.lag_ms)}</td>'
        f'<td class="t">{escape(batch.batch_id or "")}</td></tr>'
    )


def render_history(history: TableHistory, dags: Sequence[str], conn_id: str, now_ms: int) -> str:
    """A table's page: its row, a plot of lag and corrected rows per tick, its last batches."""
    row = history.status
    index = (
        f'<table id="table-row"><thead>{_INDEX_HEAD}</thead>'
        f"<tbody>{table_row(row, dags, conn_id, root='../')}</tbody></table>"
    )
    batches = "".join(_batch_row(b) for b in reversed(history.batches))
    body = (
        f'<p><a href="../">&larr; All continual tables</a></p><h1>{escape(row.name)}</h1>'
        f"{index}<h2>Lag and corrected rows per tick</h2>{plot_svg(history.batches)}"
        f"<h2>Last {len(history.batches)} batches (newest first)</h2>"
        '<table id="batches"><thead><tr><th>Committed</th><th>ct.time</th><th>Upper</th>'
        "<th>Inserted</th><th>Retracted</th><th>Strategy</th><th>Drift corrected</th>"
        f"<th>Lag at commit</th><th>Batch</th></tr></thead><tbody>{batches}</tbody></table>"
    )
    return _page(f"{row.name} - Continual tables", body, now_ms)


def render_message(title: str, message: str, now_ms: int) -> str:
    body = (
        f'<p><a href="../">&larr; All continual tables</a></p><h1>{escape(title)}</h1>'
        f'<div class="error-box">{escape(message)}</div>'
    )
    return _page(title, body, now_ms)


def _ticks_axis(batches: Sequence[Batch], left: float, right: float, y: float) -> str:
    first = format_time(batches[0].committed_at_ms)
    last = format_time(batches[-1].committed_at_ms)
    return (
        f'<text x="{left}" y="{y}">{first}</text>'
        f'<text x="{right}" y="{y}" text-anchor="end">{last}</text>'
    )


def plot_svg(batches: Sequence[Batch], width: int = 960, panel: int = 150) -> str:
    """Two inline SVG panels over the ticks, oldest left: lag at commit, and rows corrected.

    A tick's bar is its inserted plus retracted rows; its red foot is the
    drift (rows of foreign commits) it corrected, at most the whole bar.
    """
    if not batches:
        return '<p class="muted">No batches yet.</p>'
    left, right, top, gap = 84.0, float(width - 12), 22.0, 46.0
    plot_h = panel - 30.0
    step = (right - left) / len(batches)
    xs = [left + step * (i + 0.5) for i in range(len(batches))]
    max_lag = max(max(b.lag_ms for b in batches), 1)
    max_rows = max(max(b.corrected_rows for b in batches), 1)
    lag_y = [top + plot_h * (1 - b.lag_ms / max_lag) for b in batches]
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, lag_y, strict=True))
    dots = "".join(
        f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>'
        f"{escape(format_time(b.time) or 'frontier only')}: lag {format_duration(b.lag_ms)}"
        "</title></circle>"
        for x, y, b in zip(xs, lag_y, batches, strict=True)
    )
    base2 = top + panel + gap + plot_h
    bar_w = max(step * 0.6, 1.5)
    bars = "".join(
        _bars(b, x - bar_w / 2, bar_w, base2, plot_h / max_rows)
        for x, b in zip(xs, batches, strict=True)
    )
    height = int(base2 + 34)
    return (
        f'<svg id="lag-plot" data-ticks="{len(batches)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" xmlns="http://www.w3.org/2000/svg">'
        f'<text x="{left}" y="14">Lag at commit (committed minus upper)</text>'
        f'<text x="{left - 6}" y="{top + 4}" text-anchor="end">{format_duration(max_lag)}</text>'
        f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>'
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{right}" y2="{top + plot_h}"/>'
        f'<polyline class="lag" points="{points}"/>{dots}'
        f'<text x="{left}" y="{top + panel + gap - 8}">Rows corrected per tick '
        "(inserted + retracted; red: drift from foreign commits)</text>"
        f'<text x="{left - 6}" y="{base2 - plot_h + 4}" text-anchor="end">{max_rows}</text>'
        f'<text x="{left - 6}" y="{base2}" text-anchor="end">0</text>'
        f'<line class="axis" x1="{left}" y1="{base2}" x2="{right}" y2="{base2}"/>{bars}'
        f"{_ticks_axis(batches, left, right, base2 + 18)}</svg>"
    )


def _bars(batch: Batch, x: float, width: float, base: float, scale: float) -> str:
    rows_h = batch.corrected_rows * scale
    drift_h = min(batch.drift_rows, batch.corrected_rows) * scale  # drawn over the bar's foot
    tip = (
        f"{format_time(batch.time) or 'frontier only'}: {batch.inserted} inserted, "
        f"{batch.retracted} retracted, drift {batch.drift_rows}"
    )
    return (
        f"<g><title>{escape(tip)}</title>"
        f'<rect class="bar" x="{x:.1f}" y="{base - rows_h:.1f}" width="{width:.1f}" '
        f'height="{rows_h:.1f}"/>'
        f'<rect class="drift" x="{x:.1f}" y="{base - drift_h:.1f}" '
        f'width="{width:.1f}" height="{drift_h:.1f}"/></g>'
    )


def to_json(value: Any) -> Any:
    """Status values as JSON-ready data (a frontier becomes its ``ct.upper`` spelling)."""
    if isinstance(value, Frontier):
        return value.to_summary()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Batch):
            data["corrected_rows"] = value.corrected_rows
        return data
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value
