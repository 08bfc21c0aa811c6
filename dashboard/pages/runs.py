"""Runs: every configured run with its status (failed, running, or incomplete when ranks of
its world are missing), the files skipped and ranks numbered by guess while reading it
(their lines on hover), verdict, ranks analysed of its world, GPUs, date and step time.

The root folders are rescanned on every load of this page, so new runs appear without a
restart. The page is drawn at once; the runs not analysed yet are analysed in the background
(:meth:`~profkit.dashboard.server.results.ResultCache.prefetch`) in the order of the rows, from the
moment the browser asks for the page (:func:`start_early`), and each row fills in as its run
is done, with a count of how many are.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

import dash
import flask
from dash import Input, Output, dcc, html
from profkit.dashboard import ids
from profkit.dashboard.pages import frame
from profkit.dashboard.server import loading
from profkit.dashboard.server import results as R
from profkit.dashboard.ui import banner
from profkit.dashboard.ui import components as C

log = logging.getLogger(__name__)
COLUMNS = ("run", "status", "verdict", "ranks", "GPUs", "date (UTC)", "median step", "")
POLL_MS = 500
WAITING = {R.QUEUED: "queued", R.ANALYSING: "analysing...", "": "queued"}
UNASKED = "not analysed yet: open it"  # a row nobody asked for (dashboard --no-background)


def _done_cells(entry, a) -> list:
    """The cells of an analysed run (``a``: its
    :class:`~profkit.dashboard.server.loading.Summary`)."""
    facts = a.facts
    status = banner.status_text(a.run)
    pill = html.Span(status, className=f"badge badge-status badge-{status}",
                     title=banner.problems_title(a.run)) if status else \
        html.Span("ok", className="muted status-ok")
    notes = banner.notes_text(a.run)
    notes = html.Span(notes, className="run-notes", title=banner.notes_title(a.run)) if notes else None
    straggler = [html.Span("straggler: rank " + ", ".join(str(s["rank"]) for s in a.stragglers),
                           className="pill-warn")] if a.stragglers else []
    ranks = banner.ranks_text(a.run)
    ranks_cell = html.Span(ranks, className="pill-warn" if " of " in ranks else "",
                           title=banner.problems_title(a.run))
    step = C.median_step_text(a)
    verdict = html.Span([C.verdict_badge(a.verdict.get("primary")), *straggler])
    return [html.Span([pill, notes]), verdict, ranks_cell, facts.get("gpus", "-"),
            facts.get("date", "-"), step]


def _row(results, entry) -> tuple[html.Tr, str]:
    """One run's row as far as it is known now, and the run's state."""
    value, state = results.summary_state(entry.key)
    if isinstance(value, loading.Summary):
        cells = frame.attempt(f"the row of {entry.label}", lambda: _done_cells(entry, value),
                          lambda why: _other_cells(html.Span(f"unreadable: {why}", className="error")))
    elif isinstance(value, loading.RunReadError):
        cells = _other_cells(html.Span(f"unreadable: {value}", className="error"))
    else:
        waiting = UNASKED if state == "" and not results.background else WAITING.get(state, state)
        cells = _other_cells(html.Span(waiting, className="muted pending"))
    link = dcc.Link(entry.label, href=C.run_href(entry.key), className="runlink")
    cells = [link, *cells, dcc.Link("open", href=C.run_href(entry.key), className="button small")]
    return html.Tr([html.Td(c) for c in cells], **{"data-run": entry.key, "data-state": state}), state


def _other_cells(verdict) -> list:
    return ["", verdict, "", "", "", ""]


class RunsTable(NamedTuple):
    body: html.Table
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
    """The runs table now, how many runs are done (or failed), how many there are and how
    many wait for nothing but being opened."""
    entries = results.registry.entries()
    rows, states = zip(*[_row(results, e) for e in entries]) if entries else ((), ())
    done = sum(s in (R.DONE, R.FAILED) for s in states)
    unasked = 0 if results.background else sum(s == "" for s in states)
    head = html.Thead(html.Tr([html.Th(c) for c in COLUMNS]))
    return RunsTable(html.Table([head, html.Tbody(list(rows))], className="table runs"), done,
                     len(entries), unasked)


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
    body, total = runs.body, runs.total
    if not total:
        body = no_runs(results.registry.roots)
    return html.Div([
        html.Div(className="pagehead", children=[
            html.H1("Runs"),
            html.P("Pick a run to see where its step time goes, or compare two runs.",
                   className="muted"),
        ]),
        C.card(None, html.P(runs.progress, id=ids.RUNS_PROGRESS, className="hint"),
               html.Div(body, id=ids.RUNS_TABLE)),
        dcc.Interval(id=ids.RUNS_POLL, interval=POLL_MS, disabled=runs.settled),
    ])


def start_early(results) -> None:
    """Start on the runs (the first rows first) when the browser asks for the Runs page's
    HTML: its scripts load for a second or more before it asks for the table, the time of
    a few small runs' analyses. In a thread: the HTML is not held back."""
    if flask.request.method == "GET" and flask.request.path == "/":
        keys = [e.key for e in results.registry.entries()]
        threading.Thread(target=results.prefetch_listed, args=(keys,), name="profkit-runs-early",
                         daemon=True).start()


def register(app, results) -> None:
    dash.register_page(__name__, path="/", name="Runs", title="profkit: runs",
                       layout=lambda **_query: layout(results))
    app.server.before_request(lambda: start_early(results))

    @app.callback(Output(ids.RUNS_TABLE, "children"), Output(ids.RUNS_PROGRESS, "children"),
                  Output(ids.RUNS_POLL, "disabled"), Input(ids.RUNS_POLL, "n_intervals"),
                  prevent_initial_call=True)
    def poll(_n):
        # the page's runs only, as the last rescan found them: a request names no run
        results.prefetch_listed([e.key for e in results.registry.entries()])  # changed since
        runs = table(results)
        return runs.body, runs.progress, runs.settled
