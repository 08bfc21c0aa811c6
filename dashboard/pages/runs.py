"""Runs: every configured run with its status (failed, running, or incomplete when ranks of
its world are missing), the files skipped and ranks numbered by guess while reading it
(their lines on hover), verdict, ranks analysed of its world, GPUs, date and step time, in
a grid (AG Grid): click a header to sort, type under it to filter.

The root folders are rescanned on every load of this page, so new runs appear without a
restart. The page is drawn at once, every run listed; the runs not analysed yet are analysed
in the background (:meth:`~profkit.dashboard.server.results.ResultCache.prefetch`, several at
once), the rows in view first (in the grid's order, as sorted and filtered), from the moment
the browser asks for the page (:func:`start_early`), and each row fills in as its run is
done, with a count of how many are. The cells are drawn by ``assets/runs_grid.js`` from plain
values (what sorting and filtering read) and the hover texts beside them.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

import dash
import dash_ag_grid as dag
import flask
from dash import Input, Output, State, dcc, html
from profkit.analyzers.analyze import part_name
from profkit.dashboard import ids
from profkit.dashboard.colors import CLASS_COLORS
from profkit.dashboard.pages import frame
from profkit.dashboard.server import loading
from profkit.dashboard.server import results as R
from profkit.dashboard.ui import banner
from profkit.dashboard.ui import components as C

log = logging.getLogger(__name__)
POLL_MS = 500
PAGE_ROWS = 100  # rows per page of the grid (every row is drawn: autoHeight)
WAITING = {R.QUEUED: "queued", R.ANALYSING: "analysing...", "": "queued"}
UNASKED = "not analysed yet: open it"  # a row nobody asked for (dashboard --no-background)
MAX_VIEW = 256  # keys of the rows in view the page sends back (guard.MAX_ITEMS)
TEXT = {"filter": "agTextColumnFilter"}
COLUMNS = [
    {"field": "run", "headerName": "run", "cellRenderer": "RunLink", "flex": 3, "minWidth": 220,
     **TEXT},
    {"field": "status", "headerName": "status", "cellRenderer": "RunStatus", "flex": 2,
     "minWidth": 150, "autoHeight": True, **TEXT},
    {"field": "verdict", "headerName": "verdict", "cellRenderer": "RunVerdict", "flex": 3,
     "minWidth": 220, "autoHeight": True, "wrapText": True, **TEXT},
    {"field": "ranks", "headerName": "ranks", "cellRenderer": "RunRanks", "flex": 1,
     "minWidth": 100, **TEXT},
    {"field": "gpus", "headerName": "GPUs", "flex": 2, "minWidth": 150, **TEXT},
    {"field": "date", "headerName": "date (UTC)", "flex": 2, "minWidth": 150, **TEXT},
    {"field": "step_ms", "headerName": "median step (ms)", "flex": 1, "minWidth": 130,
     "filter": "agNumberColumnFilter", "type": "numericColumn",
     "valueFormatter": {"function": "params.value != null ? params.value.toFixed(2) : "
                                    "params.data.state === 'done' ? '-' : ''"}},
    {"field": "open", "headerName": "", "cellRenderer": "RunOpen", "sortable": False,
     "filter": False, "width": 90, "maxWidth": 90},
]
ROW_CLASSES = {f"run-{s}": f"params.data.state === '{s}'"
               for s in (R.DONE, R.FAILED, R.QUEUED, R.ANALYSING)}


def _done_fields(a) -> dict:
    """The cells of an analysed run (``a``: its
    :class:`~profkit.dashboard.server.loading.Summary`)."""
    ranks = banner.ranks_text(a.run)
    primary = a.verdict.get("primary")
    step = (a.verdict or {}).get("median_step_ms")
    return {
        "status": banner.status_text(a.run) or "ok", "status_title": banner.problems_title(a.run),
        "notes": banner.notes_text(a.run) or "", "notes_title": banner.notes_title(a.run),
        "verdict": part_name(primary) if primary else "no verdict", "part": primary or "none",
        "color": CLASS_COLORS.get(primary or "", ""),
        "stragglers": ("straggler: rank " + ", ".join(str(s["rank"]) for s in a.stragglers))
        if a.stragglers else "",
        "ranks": ranks, "ranks_warn": " of " in ranks, "ranks_title": banner.problems_title(a.run),
        "gpus": a.facts.get("gpus", "-"), "date": a.facts.get("date", "-"),
        "step_ms": None if step is None or step != step else round(float(step), 2),
    }


def _other_fields(message: str, kind: str) -> dict:
    """A run with no verdict (yet): the message in the verdict's cell."""
    return {"status": "", "verdict": message, "message": kind}


def _row(results, entry) -> tuple[dict, str]:
    """One run's row as far as it is known now, and the run's state."""
    value, state = results.summary_state(entry.key)
    if isinstance(value, loading.Summary):
        fields = frame.attempt(f"the row of {entry.label}", lambda: _done_fields(value),
                               lambda why: _other_fields(f"unreadable: {why}", "error"))
    elif isinstance(value, loading.RunReadError):
        fields = _other_fields(f"unreadable: {value}", "error")
    else:
        waiting = UNASKED if state == "" and not results.background else WAITING.get(state, state)
        fields = _other_fields(waiting, "pending")
    return {"key": entry.key, "run": entry.label, "href": C.run_href(entry.key),
            "state": state, **fields}, state


class RunsTable(NamedTuple):
    rows: list[dict]  # the grid's rows, in the registry's order
    done: int  # runs analysed (or failed)
    total: int
    unasked: int  # runs nobody asked for, left until opened (dashboard --no-background)

    @property
    def settled(self) -> bool:
        """Nothing more will fill in without a run being opened: the polling can stop."""
        return self.done + self.unasked >= self.total

    @property
    def progress(self) -> str:
        """The line above the table: how far the analyses are."""
        if not self.total:
            return "No runs to show yet."
        if self.unasked and self.settled:
            return (f"{self.done} of {self.total} runs analysed; the others are analysed "
                    "when opened (the dashboard runs with --no-background)")
        return (f"all {self.total} runs analysed" if self.done >= self.total else
                f"analysing: {self.done} of {self.total} runs done, the others fill in as "
                "they finish")


def table(results) -> RunsTable:
    """The runs' rows now, how many runs are done (or failed), how many there are and how
    many wait for nothing but being opened."""
    entries = results.registry.entries()
    rows, states = zip(*[_row(results, e) for e in entries]) if entries else ((), ())
    done = sum(s in (R.DONE, R.FAILED) for s in states)
    unasked = 0 if results.background else sum(s == "" for s in states)
    return RunsTable(list(rows), done, len(entries), unasked)


def grid(rows: list[dict]) -> dag.AgGrid:
    return dag.AgGrid(
        id=ids.RUNS_GRID, rowData=rows, columnDefs=COLUMNS, getRowId="params.data.key",
        rowClassRules=ROW_CLASSES,
        defaultColDef={"sortable": True, "filter": True, "floatingFilter": True,
                       "resizable": True, "cellDataType": False, "wrapHeaderText": True,
                       "autoHeaderHeight": True,
                       "filterParams": {"buttons": ["reset"], "maxNumConditions": 1}},
        dashGridOptions={"domLayout": "autoHeight", "ensureDomOrder": True,
                         "suppressColumnVirtualisation": True, "tooltipShowDelay": 250,
                         "enableCellTextSelection": True,
                         **({"pagination": True, "paginationPageSize": PAGE_ROWS,
                             "paginationPageSizeSelector": [PAGE_ROWS, 500]}
                            if len(rows) > PAGE_ROWS else {})},
        className="profkit-grid runs-grid", style={"width": "100%"})


def no_runs(roots: list) -> html.Div:
    """What the page says when it lists no run: where it looked, and how to name runs."""
    looked = (["No run folders under ", *_joined([html.Code(str(r)) for r in roots]), "."]
              if roots else ["No runs were named."])
    return html.Div(className="no-runs", children=[
        html.P(looked),
        html.P(["Start the dashboard with the runs to show: ",
                html.Code("profkit dashboard RUN [RUN ...]"), " (a run folder or trace "
                "files) or ", html.Code("profkit dashboard --root DIR"), " (every run folder "
                "under DIR, rescanned each time this page loads)."]),
    ])


def _joined(items: list) -> list:
    out = []
    for i, item in enumerate(items):
        out += ([", "] if i else []) + [item]
    return out


def layout(results) -> html.Div:
    results.registry.rescan()
    results.prefetch_listed([e.key for e in results.registry.entries()])
    runs = table(results)
    body = grid(runs.rows) if runs.total else no_runs(results.registry.roots)
    return html.Div([
        html.Div(className="pagehead", children=[
            html.H1("Runs"),
            html.P("Pick a run to see where its step time goes, or compare two runs. Click a "
                   "header to sort, type under it to filter.", className="muted"),
        ]),
        C.card(None, html.P(runs.progress, id=ids.RUNS_PROGRESS, className="hint"),
               html.Div(body, id=ids.RUNS_TABLE)),
        dcc.Store(id=ids.RUNS_VIEW),
        dcc.Interval(id=ids.RUNS_POLL, interval=POLL_MS, disabled=runs.settled or not runs.total),
    ])


def start_early(results) -> None:
    """Start on the runs (the first rows first) when the browser asks for the Runs page's
    HTML: its scripts load for a second or more before it asks for the table, the time of
    a few small runs' analyses. In a thread: the HTML is not held back."""
    if flask.request.method == "GET" and flask.request.path == "/":
        start_now(results)


def start_now(results) -> None:
    keys = [e.key for e in results.registry.entries()]
    threading.Thread(target=results.prefetch_listed, args=(keys,), name="profkit-runs-early",
                     daemon=True).start()


# The keys of the grid's rows as it shows them (sorted, filtered), for the poll: those runs
# are analysed first.
VIEW_JS = f"""function (rows) {{
    return (rows || []).slice(0, {MAX_VIEW}).map(function (r) {{ return r.key; }});
}}"""


def register(app, results) -> None:
    dash.register_page(__name__, path="/", name="Runs", title="profkit: runs",
                       layout=lambda **_query: layout(results))
    # into the list itself: the server may have answered already (the early index pages
    # of `profkit dashboard`, server/early.py), after which Flask refuses before_request()
    app.server.before_request_funcs.setdefault(None, []).append(lambda: start_early(results))
    gate = getattr(app, "profkit_gate", None)
    if gate is not None and "/" in gate.early_paths:  # the Runs page asked for meanwhile
        start_now(results)
    app.clientside_callback(VIEW_JS, Output(ids.RUNS_VIEW, "data"),
                            Input(ids.RUNS_GRID, "virtualRowData"))

    @app.callback(Output(ids.RUNS_GRID, "rowData"), Output(ids.RUNS_PROGRESS, "children"),
                  Output(ids.RUNS_POLL, "disabled"), Input(ids.RUNS_POLL, "n_intervals"),
                  State(ids.RUNS_VIEW, "data"), prevent_initial_call=True)
    def poll(_n, in_view):
        # the page's runs only, as the last rescan found them: the keys a request names are
        # looked up, never trusted; the rows in view first
        known = [e.key for e in results.registry.entries()]
        view = [k for k in in_view or [] if results.registry.get(k) is not None]
        results.prefetch_listed(view + known)
        runs = table(results)
        return runs.rows, runs.progress, runs.settled
