"""Layout building blocks shared by the pages: header, cards, badges, graphs, tables.

The frame of a run's pages (its tab bar, banner and error boundaries) is
:mod:`profkit.dashboard.pages.frame`.
"""

from __future__ import annotations

from urllib.parse import quote

import pandas as pd
from dash import dcc, html
from profkit.analyzers import units as U
from profkit.analyzers.analyze import part_name
from profkit.dashboard import ids
from profkit.dashboard.colors import CLASS_COLORS
from profkit.dashboard.ui import grids as G
from profkit.dashboard.ui import tables as T

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


def header() -> html.Header:
    return html.Header(className="topbar", children=[
        dcc.Link([html.Span("▮", className="logo-mark"), "profkit"], href="/", className="brand"),
        html.Nav(id=ids.NAV, className="topnav", children=[
            dcc.Link("Runs", href="/"), dcc.Link("Compare", href="/compare")]),
        html.Span("GPU profiling & bottleneck analysis", className="tagline"),
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
    on hover; ``kwargs``: :func:`profkit.dashboard.ui.grids.grid`'s (headers, sort, deltas)."""
    return G.table(table_id, frame, page_size=page_size, full=full, **kwargs)


def readable_table(table_id: str, spec, frame: pd.DataFrame, **kwargs) -> html.Div:
    """:func:`data_table` of an analysis table in display names and units
    (:func:`profkit.dashboard.ui.tables.readable`), full kernel names on hover."""
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
