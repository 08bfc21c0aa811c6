"""Layout building blocks shared by the pages: header, run tabs, cards, badges, tables."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from urllib.parse import quote

import dash
import pandas as pd
from dash import dash_table, dcc, html
from dash.exceptions import PreventUpdate
from plotly.io.json import to_json_plotly
from profkit.dashboard import ids
from profkit.dashboard.figures import CLASS_COLORS
from profkit.dashboard.loading import describe
from profkit.dashboard.results import UnknownRun

from profkit.errors import ProfkitError

log = logging.getLogger(__name__)

RUN_TABS = (("", "Overview"), ("timeline", "Timeline"), ("kernels", "Kernels & ops"),
            ("comms", "Communication"), ("counters", "Counters"))
FONT_STACK = "Inter, system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
DELTA_STYLES = [  # a diff's delta column: slower red, faster green
    {"if": {"filter_query": "{delta_ms} > 0", "column_id": "delta_ms"}, "color": "#dc2626"},
    {"if": {"filter_query": "{delta_ms} < 0", "column_id": "delta_ms"}, "color": "#16a34a"},
]
GRAPH_CONFIG = {"displaylogo": False, "responsive": True,
                "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def run_href(key: str, tab: str = "") -> str:
    return f"/run/{quote(key)}" + (f"/{tab}" if tab else "")


def register_run_page(module: str, results, layout, *, tab: str, name: str, title: str,
                      order: int, query: tuple[str, ...] = ()) -> None:
    """Register one of a run's tab pages at ``/run/<run_key>/<tab>`` (``tab`` "" is the
    overview); ``layout(results, run_key, **chosen)`` builds it, ``chosen`` being the URL
    query parameters named in ``query`` (as Dash passes them: a string, or a list when
    repeated)."""
    # Only the names asked for are passed on: the others are the user's (``?results=``).
    dash.register_page(module, path_template="/run/<run_key>" + (f"/{tab}" if tab else ""),
                       name=name, title=f"profkit: {title}", order=order,
                       layout=lambda run_key="", **q: layout(
                           results, run_key, **{k: q[k] for k in query if k in q}))


def stored_run(results, store) -> str:
    """The run key a page's ``RUN_STORE`` holds; stops the callback (PreventUpdate) when it
    names no run the dashboard knows."""
    key = store.get("run") if isinstance(store, dict) else None
    if results.registry.get(key) is None:
        raise PreventUpdate
    return key


def run_page(results, run_key, tab: str, body) -> html.Div:
    """One of a run's pages: its tabs, the note on skipped files, then ``body(run,
    analysis)``'s panels. "Not found" for a key that names no run (never a file); the reason
    when nothing of the run can be shown."""
    entry = results.registry.get(run_key)
    if entry is None:
        return not_found(run_key)
    head = run_tabs(entry.key, entry.label, tab)
    try:
        run, analysis = results.loaded(entry.key)
    except UnknownRun:  # gone in a rescan since
        return not_found(run_key)
    except (ProfkitError, OSError) as exc:
        return html.Div([head, error_card(str(exc))])
    panels = attempt("this page", lambda: body(run, analysis),
                     lambda why: [error_card(f"this page could not be drawn: {why}")])
    return html.Div([head, panel("run note", lambda: run_note(analysis.run)), *panels,
                     dcc.Store(id=ids.RUN_STORE, data={"run": entry.key})])


def run_note(info: dict) -> html.Div | None:
    """The files that were skipped, each with its reason, and how many ranks were analysed:
    on every page of a run that lost a file or a rank; nothing for a complete run."""
    skipped = info.get("skipped_files") or []
    ranks, world = len(info.get("ranks_analyzed") or []), info.get("world_size") or 0
    if not skipped and ranks >= world:
        return None
    items = [html.Li([html.Code(_inside(s["path"], info.get("path"))), f": {s['reason']}"])
             for s in skipped]
    return html.Div(id=ids.RUN_NOTE, className="card note", children=[
        html.Strong(f"ranks analysed {ranks} of world size {world}"),
        html.Div(f"{len(items)} file(s) skipped:", className="muted") if items else None,
        html.Ul(items) if items else None])


def _inside(path: str, root: str | None) -> str:
    """``path`` relative to the run folder when it lies inside it."""
    try:
        return str(Path(path).relative_to(root)) if root else path
    except ValueError:
        return path


def attempt(what: str, build, fallback):
    """``build()``, or ``fallback(cause)`` when it fails. A ProfkitError (a run that cannot
    be read, logged where it was found) is passed on as its message; anything else is
    logged as one line, the traceback only at debug level, since a malformed trace is not
    a bug of the dashboard."""
    try:
        return build()
    except PreventUpdate:
        raise
    except ProfkitError as exc:
        return fallback(str(exc))
    except Exception as exc:  # an error boundary: whatever it is, it costs this part only
        why = describe(exc)
        log.warning("%s could not be drawn: %s", what, why)
        log.debug("%s could not be drawn", what, exc_info=True)
        return fallback(why)


def panel(what: str, build):
    """``build()``'s component, or a short card saying ``what`` could not be drawn and why,
    so that one failing panel leaves the others standing. The component is serialised here
    as well: a value JSON cannot carry fails in its panel, not in the page's response."""
    def checked():
        component = build()
        to_json_plotly(component)
        return component

    return attempt(what, checked, lambda why: html.Section(className="card panel-error", children=[
        html.H2(what), html.P(f"could not be drawn: {why}", className="error")]))


def header() -> html.Header:
    return html.Header(className="topbar", children=[
        dcc.Link([html.Span("▮", className="logo-mark"), "profkit"], href="/", className="brand"),
        html.Nav(id=ids.NAV, className="topnav", children=[
            dcc.Link("Runs", href="/"), dcc.Link("Compare", href="/compare")]),
        html.Span("GPU profiling & bottleneck analysis", className="tagline"),
    ])


def run_tabs(key: str, label: str, active: str) -> html.Div:
    tabs = [dcc.Link(name, href=run_href(key, tab),
                     className="tab active" if tab == active else "tab")
            for tab, name in RUN_TABS]
    return html.Div(className="runbar", children=[
        html.Div([html.Span("run", className="muted"), html.H1(label)], className="runtitle"),
        html.Div(tabs, className="tabs"),
    ])


def card(title: str | None, *children, class_name: str = "", **kwargs) -> html.Section:
    head = [html.H2(title)] if title else []
    return html.Section(head + list(children), className=f"card {class_name}".strip(), **kwargs)


def badge(text: str | None, kind: str | None = None) -> html.Span:
    """A coloured pill: kind is a part/class name (its colour) or improved/regressed/..."""
    kind = kind or text or "none"
    color = CLASS_COLORS.get(kind)
    style = {"backgroundColor": color} if color else {}
    return html.Span(text or "no verdict", className=f"badge badge-{kind}", style=style)


def legend(colors: dict[str, str]) -> html.Div:
    """Colour chips for figures whose traces draw no legend (heatmap lanes)."""
    return html.Div([html.Span([html.I(className="dot", style={"backgroundColor": c}), name],
                               className="chip") for name, c in colors.items()], className="chips")


def not_found(what: str) -> html.Div:
    return html.Div(id=ids.NOT_FOUND, className="card notfound", children=[
        html.H2("Run not found"),
        html.P(f"No run is configured under the key {what!r}."),
        dcc.Link("Back to the runs", href="/"),
    ])


def error_card(message: str) -> html.Div:
    return card("Could not analyze this run", html.Pre(message, className="error"))


def graph(graph_id: str, figure, **kwargs) -> dcc.Graph:
    return dcc.Graph(id=graph_id, figure=figure, config=GRAPH_CONFIG, **kwargs)


def _cell(value):
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 3)
    return value


def data_table(table_id: str, frame: pd.DataFrame, page_size: int = 12, **kwargs):
    """A sortable, filterable table of ``frame`` (numbers rounded, NaN as blanks)."""
    records = [{k: _cell(v) for k, v in row.items()} for row in frame.to_dict("records")]
    columns = [{"name": c, "id": c, "type": "numeric" if pd.api.types.is_numeric_dtype(frame[c])
                else "text"} for c in frame.columns]
    return dash_table.DataTable(
        id=table_id, data=records, columns=columns, page_size=page_size,
        sort_action="native", filter_action="native", filter_options={"case": "insensitive"},
        style_table={"overflowX": "auto"}, style_as_list_view=True,
        style_cell={"fontFamily": FONT_STACK, "fontSize": "13px", "padding": "6px 10px",
                    "maxWidth": "340px", "minWidth": "64px", "overflow": "hidden",
                    "textOverflow": "ellipsis", "textAlign": "left"},
        style_data_conditional=DELTA_STYLES,
        style_header={"fontWeight": "600", "backgroundColor": "#f8fafc"},
        tooltip_duration=None, **kwargs)


def kv_list(pairs: dict) -> html.Dl:
    items = []
    for k, v in pairs.items():
        items += [html.Dt(str(k)), html.Dd(_fmt(v))]
    return html.Dl(items, className="kv")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v[:3])) + (" ..." if len(v) > 3 else "")
    text = str(v)
    return text if len(text) <= 160 else text[:157] + "..."
