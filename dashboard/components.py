"""Layout building blocks shared by the pages: header, run tabs, cards, badges, tables."""

from __future__ import annotations

import logging
from urllib.parse import quote

import dash
import pandas as pd
from dash import dcc, html
from dash.exceptions import PreventUpdate
from plotly.io.json import to_json_plotly
from profkit.analyzers import units as U
from profkit.analyzers.analyze import part_name
from profkit.dashboard import banner, ids
from profkit.dashboard import grids as G
from profkit.dashboard import tables as T
from profkit.dashboard.figures import CLASS_COLORS
from profkit.dashboard.loading import describe
from profkit.dashboard.results import UnknownRun

from profkit.errors import ProfkitError

log = logging.getLogger(__name__)

RUN_TABS = (("", "Overview"), ("timeline", "Timeline"), ("kernels", "Kernels & ops"),
            ("comms", "Communication"), ("counters", "Counters"), ("tables", "Tables"))
# unit endings of the analyzers' keys (longest first), dropped from labels: values say them
UNIT_SUFFIXES = ("_ns_per_step", "_ms_per_step", "_j_per_step", "_bytes", "_gbps", "_tflops",
                 "_frac", "_mhz", "_pct", "_ns", "_ms", "_us", "_w")
# Every chart's plotly config: nothing that sends a chart or links off this machine (the
# plotly logo, "edit in Chart Studio", "send data to cloud"); the PNG download stays.
GRAPH_CONFIG = {"displaylogo": False, "showSendToCloud": False, "showEditInChartStudio": False,
                "showLink": False, "sendData": False, "showTips": False, "responsive": True,
                "modeBarButtonsToRemove": ["lasso2d", "select2d", "sendDataToCloud",
                                           "editInChartStudio"]}


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


def run_page(results, run_key, tab: str, body, *, needs_run: bool = True,
             keep: bool = False) -> html.Div:
    """One of a run's pages: its tabs, the banner saying what is missing from the run, then
    ``body(run, analysis)``'s panels (``run`` None unless ``needs_run``: reading the events
    is the slow part, and most pages draw from the analysis alone). "Not found" for a key
    that names no run (never a file); the reason when nothing of the run can be shown.
    ``keep``: the page depends on the run's files alone (no query, no time), so it is drawn
    once and sent again as it is (:meth:`~profkit.dashboard.results.ResultCache.page`)."""
    entry = results.registry.get(run_key)
    if entry is None:
        return not_found(run_key)
    def draw():
        return _draw(results, entry, tab, body, needs_run)

    try:
        return results.page(tab, entry.key, draw) if keep else draw()
    except UnknownRun:  # gone in a rescan since
        return not_found(run_key)
    except (ProfkitError, OSError) as exc:
        return html.Div([run_tabs(entry.key, entry.label, tab), error_card(str(exc))])


def _draw(results, entry, tab: str, body, needs_run: bool) -> html.Div:
    analysis = results.analysis(entry.key)
    run = results.run(entry.key) if needs_run else None
    panels = attempt("this page", lambda: body(run, analysis),
                     lambda why: [error_card(f"this page could not be drawn: {why}")])
    return html.Div([run_tabs(entry.key, entry.label, tab),
                     panel("run banner", lambda: banner.run_banner(analysis.run)),
                     *panels, dcc.Store(id=ids.RUN_STORE, data={"run": entry.key})])


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


def verdict_badge(part: str | None) -> html.Span:
    """The verdict's badge: the part's display name in the part's colour."""
    return badge(part_name(part) if part else None, part)


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


def data_table(table_id: str, frame: pd.DataFrame, page_size: int = 12,
               full: dict[str, list[str]] | None = None, **kwargs) -> html.Div:
    """A sortable, filterable table of ``frame`` (numbers rounded, NaN as blanks) with a
    CSV export (made in the browser); ``full``: the full text of shortened columns, shown
    on hover; ``kwargs``: :func:`profkit.dashboard.grids.grid`'s (headers, sort, deltas)."""
    return G.table(table_id, frame, page_size=page_size, full=full, **kwargs)


def readable_table(table_id: str, spec, frame: pd.DataFrame, **kwargs) -> html.Div:
    """:func:`data_table` of an analysis table in display names and units
    (:func:`profkit.dashboard.tables.readable`), full kernel names on hover."""
    display, full = T.readable(spec, frame)
    return data_table(table_id, display, full=full, **kwargs)


def table_card(table_id: str, spec, frame: pd.DataFrame, **kwargs) -> html.Section:
    """A card of one analysis table (:func:`readable_table`) with its title and note."""
    return card(spec.title, readable_table(table_id, spec, frame),
                html.P(spec.note, className="hint") if spec.note else None, **kwargs)


def loading(child, **kwargs) -> dcc.Loading:
    """A spinner over ``child`` while a callback redraws it."""
    return dcc.Loading(child, type="dot", delay_show=200, color="#2563eb",
                       overlay_style={"visibility": "visible", "opacity": 0.45}, **kwargs)


def kv_list(pairs: dict) -> html.Dl:
    """Keys and values as a definition list, each value in the unit its key names
    (``others_wait_ns_per_step`` -> "others wait: 5.11 ms/step")."""
    items = []
    for k, v in pairs.items():
        items += [html.Dt(_label(str(k))), html.Dd(_fmt(str(k), v))]
    return html.Dl(items, className="kv")


def _label(key: str) -> str:
    """A key without its unit suffix (the value carries the unit), words spaced."""
    for suffix in UNIT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def _fmt(key: str, v) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v[:3])) + (" ..." if len(v) > 3 else "")
    return U.clip(U.by_key(key, v), 160)


def median_step_text(a) -> str:
    """The run's median step as every page shows it: the verdict's (one definition,
    profkit.analyzers.measure.steps.run_median_step_ms)."""
    value = (a.verdict or {}).get("median_step_ms")
    return "-" if value is None or value != value else f"{value:.2f} ms"
