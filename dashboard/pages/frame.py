"""The frame of a run's pages: each declares its tab once (:class:`RunTab`), the package
lists them in the tab bar's order (:data:`profkit.dashboard.pages.RUN_PAGES`), and the frame
registers each with Dash and draws the tab bar, the banner and the panels' error boundaries
from that order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import dash
from dash import dcc, html
from dash.exceptions import PreventUpdate
from plotly.io.json import to_json_plotly
from profkit.dashboard import ids
from profkit.dashboard.server.loading import describe
from profkit.dashboard.server.results import UnknownRun
from profkit.dashboard.ui import banner
from profkit.dashboard.ui import components as C

from profkit.errors import ProfkitError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunTab:
    """One of a run's tab pages, as its module declares it.

    path: the URL after ``/run/<run_key>`` ("" for the overview, ``timeline``, ...).
    label: the tab's text and the page's name in Dash (``Kernels & ops``).
    title: the browser's title after ``profkit: `` (``kernels``).
    """

    path: str
    label: str
    title: str


def declared_tabs() -> tuple[RunTab, ...]:
    """The run's tabs in the order of its tab bar (:data:`profkit.dashboard.pages.RUN_TABS`)."""
    # imported here: the package imports the page modules, which import this one
    from profkit.dashboard.pages import RUN_TABS

    return RUN_TABS


def register_run_page(module: str, results, layout, tab: RunTab,
                      query: tuple[str, ...] = ()) -> None:
    """Register one of a run's tab pages at ``/run/<run_key>/<tab.path>`` (the overview's
    path is ""); ``layout(results, run_key, **chosen)`` builds it, ``chosen`` being the URL
    query parameters named in ``query`` (as Dash passes them: a string, or a list when
    repeated)."""
    # Only the names asked for are passed on: the others are the user's (``?results=``).
    template = "/run/<run_key>" + (f"/{tab.path}" if tab.path else "")
    dash.register_page(module, path_template=template,
                       name=tab.label, title=f"profkit: {tab.title}", order=_order(tab),
                       layout=lambda run_key="", **q: layout(
                           results, run_key, **{k: q[k] for k in query if k in q}))


def _order(tab: RunTab) -> int:
    """Where Dash tries the page's URL template: in the tab bar's order, but the overview's
    ``/run/<run_key>`` after the others, since its ``<run_key>`` would match their URLs."""
    tabs = declared_tabs()
    return tabs.index(tab) if tab.path else len(tabs)


def stored_run(results, store) -> str:
    """The run key a page's ``RUN_STORE`` holds; stops the callback (PreventUpdate) when it
    names no run the dashboard knows."""
    key = store.get("run") if isinstance(store, dict) else None
    if results.registry.get(key) is None:
        raise PreventUpdate
    return key


def run_page(results, run_key, tab: RunTab, body, *, needs_run: bool = True,
             keep: bool = False) -> html.Div:
    """One of a run's pages: its tabs, the banner saying what is missing from the run, then
    ``body(run, analysis)``'s panels (``run`` None unless ``needs_run``: reading the events
    is the slow part, and most pages draw from the analysis alone). "Not found" for a key
    that names no run (never a file); the reason when nothing of the run can be shown.
    ``keep``: the page depends on the run's files alone (no query, no time), so it is drawn
    once and sent again as it is (:meth:`~profkit.dashboard.server.results.ResultCache.page`)."""
    entry = results.registry.get(run_key)
    if entry is None:
        return C.not_found(run_key)
    def draw():
        return _draw(results, entry, tab, body, needs_run)

    try:
        return results.page(tab.path, entry.key, draw) if keep else draw()
    except UnknownRun:  # gone in a rescan since
        return C.not_found(run_key)
    except (ProfkitError, OSError) as exc:
        return html.Div([run_tabs(entry.key, entry.label, tab.path), C.error_card(str(exc))])


def _draw(results, entry, tab: RunTab, body, needs_run: bool) -> html.Div:
    analysis = results.analysis(entry.key)
    run = results.run(entry.key) if needs_run else None
    panels = attempt("this page", lambda: body(run, analysis),
                     lambda why: [C.error_card(f"this page could not be drawn: {why}")])
    return html.Div([run_tabs(entry.key, entry.label, tab.path),
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


def run_tabs(key: str, label: str, active: str) -> html.Div:
    """The run's title and its tab bar, the tab whose path is ``active`` highlighted."""
    tabs = [dcc.Link(tab.label, href=C.run_href(key, tab.path),
                     className="tab active" if tab.path == active else "tab")
            for tab in declared_tabs()]
    return html.Div(className="runbar", children=[
        html.Div([html.Span("run", className="muted"), html.H1(label)], className="runtitle"),
        html.Div(tabs, className="tabs"),
    ])
