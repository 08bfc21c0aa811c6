"""Runs: every configured run with its verdict, world size, GPUs, date and step time.

The root folders are rescanned on every load of this page, so new runs appear without a
restart. The table is drawn at once from what is cached; the runs not analyzed yet are
filled in by a callback.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timezone

import dash
from dash import Input, Output, dcc, html
from profkit.dashboard import components as C
from profkit.dashboard import ids

from profkit.errors import ProfkitError

log = logging.getLogger(__name__)
COLUMNS = ("run", "verdict", "world size", "GPUs", "date (UTC)", "median step", "")


def run_facts(run) -> dict:
    """World size, GPU names and capture date of a loaded Run (strings for the table)."""
    gpus = [g.get("name", "?") for g in run.meta.get("gpus", [])]
    if not gpus:
        for data in run.ranks.values():
            devices = data.meta.get("devices") or []
            dev = next((d for d in devices if d.get("id") == _device_of(data)), None)
            gpus.append((dev or (devices[0] if devices else {})).get("name", "?"))
    names = ", ".join(f"{n} x {name}" for name, n in Counter(gpus).items()) or "-"
    started = run.meta.get("started_ns")
    if not started:
        starts = [int(d.steps["ts_ns"].min()) for d in run.ranks.values() if len(d.steps)]
        started = min(starts) if starts else None
    date = (datetime.fromtimestamp(started / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
            if started else "-")
    return {"world": str(run.world_size), "gpus": names, "date": date}


def _device_of(data) -> int:
    dev = data.events.loc[data.events["device"] >= 0, "device"]
    return int(dev.iloc[0]) if len(dev) else 0


def _row(entry, analysis, facts: dict | None, error: str | None = None) -> html.Tr:
    link = dcc.Link(entry.label, href=C.run_href(entry.key), className="runlink")
    if error:
        verdict = html.Span(error, className="error")
    elif analysis is None:
        verdict = html.Span("analyzing...", className="muted")
    else:
        verdict = C.badge(analysis.verdict.get("primary"))
    step = "-"
    if analysis is not None and not analysis.table("rank_breakdown").empty:
        step = f"{analysis.table('rank_breakdown')['step_time_ms'].median():.2f} ms"
    facts = facts or {"world": "", "gpus": "", "date": ""}
    straggler = [html.Span("straggler: rank " + ", ".join(str(s["rank"]) for s in
                                                         analysis.stragglers), className="pill-warn")
                 ] if analysis is not None and analysis.stragglers else []
    cells = [link, html.Span([verdict, *straggler]), facts["world"], facts["gpus"], facts["date"],
             step, dcc.Link("open", href=C.run_href(entry.key), className="button small")]
    return html.Tr([html.Td(c) for c in cells], **{"data-run": entry.key})


def _row_for(results, entry, compute: bool) -> tuple[html.Tr, bool]:
    """The table row of one run (its analysis computed when ``compute``, else only if
    cached), and whether that analysis is still to be computed."""
    try:
        analysis = results.analysis(entry.key) if compute else results.peek_analysis(entry.key)
    except (ProfkitError, OSError) as exc:
        return _row(entry, None, None, f"unreadable: {exc}"), False
    if analysis is None:
        return _row(entry, None, None), not compute
    return C.attempt(f"the row of {entry.label}",
                     lambda: _row(entry, analysis, run_facts(results.run(entry.key))),
                     lambda why: _row(entry, None, None, f"unreadable: {why}")), False


def _table(results, compute: set[str]) -> tuple[html.Table, list[str]]:
    """The runs table, analysing the runs whose keys are in ``compute``, and the keys of
    the runs still not analysed."""
    rows, pending = [], []
    for entry in results.registry.entries():
        row, later = _row_for(results, entry, entry.key in compute)
        rows.append(row)
        if later:
            pending.append(entry.key)
    head = html.Thead(html.Tr([html.Th(c) for c in COLUMNS]))
    return html.Table([head, html.Tbody(rows)], className="table runs"), pending


def layout(results) -> html.Div:
    results.registry.rescan()
    table, pending = _table(results, compute=set())
    body = table if results.registry.entries() else html.P(
        "No runs found. Start with `profkit dashboard RUN` or `--root DIR`.", className="muted")
    return html.Div([
        html.Div(className="pagehead", children=[
            html.H1("Runs"),
            html.P("Pick a run to see where its step time goes, or compare two runs.",
                   className="muted"),
        ]),
        C.card(None, dcc.Loading(html.Div(body, id=ids.RUNS_TABLE), type="dot")),
        dcc.Store(id=ids.RUNS_KEYS, data=pending),
    ])


def register(app, results) -> None:
    dash.register_page(__name__, path="/", name="Runs", title="profkit: runs", order=0,
                       layout=lambda **_query: layout(results))

    @app.callback(Output(ids.RUNS_TABLE, "children"), Input(ids.RUNS_KEYS, "data"))
    def fill_pending(pending):
        # only the runs the page is waiting for: a request cannot make every run analysed
        wanted = {k for k in pending or [] if results.registry.get(k) is not None}
        if not wanted:
            return dash.no_update
        return _table(results, compute=wanted)[0]
