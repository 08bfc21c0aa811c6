"""``create_app(runs, roots)``: the Dash app (Dash Pages, one module per page).

Offline and local by design: every asset is served by the app itself (no CDN, no external
stylesheet), no chart has a button that sends it anywhere
(:data:`~profkit.dashboard.ui.components.GRAPH_CONFIG`), the server binds 127.0.0.1 unless
told otherwise (:mod:`~profkit.dashboard.server.serving`: waitress, a token by default), debug
is off, there is no upload component and request bodies are capped, callback requests the
page would never send get a 4xx (:mod:`profkit.dashboard.server.guard`), and run data is
reached only through opaque keys of the :class:`RunRegistry`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import dash
from dash import Dash, dcc, html
from profkit.dashboard import colors, ids
from profkit.dashboard.server import busy, guard
from profkit.dashboard.server.early import EarlyGate

# pandas, the analysis code and the pages are imported by finish_app, not with this module:
# `profkit dashboard` serves its first answers before them (server/early.py)

log = logging.getLogger(__name__)
ASSETS = Path(__file__).parent / "assets"
MAX_REQUEST_BYTES = 1 << 20  # callback payloads are keys and selections: a few KB
REPO_SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "runs"
# Code chunks of the component libraries that no page renders (date pickers, sliders, uploads,
# Markdown and MathJax, the DataTable, AG Grid's enterprise modules), by library module. Dash's
# eager loading (create_app) would fetch and parse them with the page: ~6 of its ~12 MB of
# script, parsed while the run is analysed on the same cores. They load on demand instead.
UNUSED_CHUNKS = {"dash.dcc": ("datepicker", "highlight", "markdown", "mathjax", "slider", "upload"),
                 "dash.dash_table": ("export", "highlight", "table"),
                 "dash_ag_grid": ("enterprise",)}


def default_roots() -> list[Path]:
    """The bundled sample runs, when this is a source checkout that has them."""
    return [REPO_SAMPLES] if REPO_SAMPLES.is_dir() else []


def with_part_colors(index: str) -> str:
    """Dash's page template with the step parts' CSS variables (:func:`colors.part_css`)
    declared after the stylesheets, so that a part added to the parts table has its
    ``--<key>`` with no edit of style.css."""
    return index.replace("{%css%}", "{%css%}\n        <style>" + colors.part_css() + "</style>", 1)


def _import_analysis_code() -> None:
    """Import the loader and analyzers at start-up rather than on the first page request
    (~0.4 s on a small machine); no run is read here."""
    import profkit.analyzers.analyze  # noqa: F401
    import profkit.analyzers.compare.diff  # noqa: F401

    import profkit.run.loader  # noqa: F401


def _load_unused_chunks_on_demand() -> None:
    """Mark the :data:`UNUSED_CHUNKS` "lazy" (Dash fetches them only if a component asks)."""
    import importlib

    for module_name, chunks in UNUSED_CHUNKS.items():
        names = {f"async-{chunk}.js" for chunk in chunks}
        for resource in getattr(importlib.import_module(module_name), "_js_dist", []):
            if Path(resource.get("relative_package_path", "")).name in names:
                resource["async"] = "lazy"


def _load_plotly_after_first_paint() -> None:
    """Leave plotly.js (4.8 MB, registered by Dash as it starts) out of the page's blocking
    scripts: ``assets/plotly_early.js`` loads it, off the main thread, once the page's first
    content is drawn. A browser without its compiled code (a fresh profile) spent ~0.5-0.8 s
    on it before drawing anything, the verdict included."""
    import dash.dcc

    for resource in dash.dcc._js_dist:
        if resource.get("namespace") == "plotly":
            resource["async"] = "lazy"


def create_shell() -> Dash:
    """The Dash app without its pages: Dash and the component libraries the pages render
    (so that its index page lists every script it will need), the guards and an
    :class:`~profkit.dashboard.server.early.EarlyGate` (``app.profkit_gate``), which answers
    the index page and its files until :func:`finish_app` has loaded the rest and holds the
    other requests until then. Neither pandas nor the analysis code is imported."""
    import dash_ag_grid  # noqa: F401 - its scripts in the index page from the first answer

    _load_unused_chunks_on_demand()
    app = Dash(__name__, use_pages=True, pages_folder="", assets_folder=str(ASSETS),
               serve_locally=True, external_stylesheets=[], external_scripts=[],
               title="profkit", update_title=None, suppress_callback_exceptions=True,
               include_pages_meta=False,  # no page's meta tags: the early index is every page's
               compress=False, eager_loading=True)  # eager: the chunks the pages render are
    # fetched and parsed with the other bundles, while the server draws the page, not after
    # it (the chunks no page uses are left to load on demand first; plotly.js after the
    # first paint)
    _load_plotly_after_first_paint()
    app.server.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    app.index_string = with_part_colors(app.index_string)
    guard.install(app)
    busy.install(app)  # after the guard: a turn only for a request it lets through
    app.profkit_gate = EarlyGate(app).install()  # ahead of them all
    return app


def finish_app(app: Dash, runs: list[Path], roots: list[Path], results=None,
               background: bool = True) -> Dash:
    """Complete ``app`` (from :func:`create_shell`) with its pages, its layout and its
    results: those in ``results`` (a ResultCache over the same runs and roots, made before so
    that the named runs' analysis has started) or a new one over ``runs`` (run folders or
    trace files) and every run found under ``roots`` (rescanned whenever the Runs page
    loads); ``background``: whether the Runs page analyses the runs it lists of its own
    accord (for a new one). Then its gate lets every request through."""
    from profkit.dashboard.server.registry import RunRegistry
    from profkit.dashboard.server.results import ResultCache
    from profkit.dashboard.ui import components

    _import_analysis_code()
    results = results or ResultCache(RunRegistry(runs, roots), background=background)
    # the pages (plotly's figures with them) load with an app, not with this module
    from profkit.dashboard import pages

    pages.register(app, results)
    app.layout = html.Div(className="app", children=[
        dcc.Location(id=ids.URL, refresh="callback-nav"),
        components.header(),
        html.Main(page_loading(dash.page_container), className="content"),
        html.Footer("profkit dashboard: every file stays on this machine", className="footer"),
    ])
    app.profkit_results = results  # for tests and the CLI
    app.profkit_gate.ready()
    return app


def create_app(runs: list[Path], roots: list[Path], results=None,
               background: bool = True) -> Dash:
    """The dashboard over ``runs`` and ``roots``, complete (:func:`create_shell`, then
    :func:`finish_app` with ``results`` and ``background``)."""
    return finish_app(create_shell(), runs, roots, results, background)


def warm_up(app: Dash, runs: list[Path]) -> None:
    """Start on what the first page will need while the browser connects: the runs named on
    the command line (read and analysed, or read back from the result cache, in the
    background) and plotly's figure classes (imported on first use: ~0.2 CPU s). Not those
    while a large run is analysed first (:mod:`~profkit.dashboard.server.early_runs`): its
    verdict waits for that analysis, which they would take the CPU from, and its charts
    (the first figures) are drawn while the browser loads plotly.js, which takes longer."""
    from profkit.dashboard.server import early_runs

    app.profkit_results.prefetch_named(runs)
    if not early_runs.running():
        threading.Thread(target=_first_figure, name="profkit-warm-up", daemon=True).start()


def _first_figure() -> None:
    from profkit.dashboard.figures import charts as figures

    figures.empty_figure("warming up").to_plotly_json()


def page_loading(container) -> dcc.Loading:
    """A spinner and a line saying what is going on while a page is drawn: the first view
    of a run reads and analyses its traces, seconds for a large one."""
    message = html.Div(id=ids.PAGE_LOADING, className="page-loading", children=[
        html.Div(className="spinner"),
        html.P("Reading and analysing the run: the first view of a large run takes a few "
               "seconds, later ones are immediate."),
    ])
    return dcc.Loading(container, target_components={"_pages_content": "children"},
                       custom_spinner=message, delay_show=250,
                       overlay_style={"visibility": "visible", "opacity": 0.35})
