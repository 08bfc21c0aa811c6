"""Tables: the per-rank step breakdown, then every table a finding may point at (efficiency
and MFU, GPU time per stream,
compute kinds, collectives against the link's peak, stragglers, launches and the launch
queue, short kernels, fusion candidates, NVML, transfers, where the GPU waits for the host),
in display units, each sortable, filterable and exportable to CSV. A finding on the Overview
links to its table here (``/run/<key>/tables#table-<name>``)."""

from __future__ import annotations

from dash import Input, Output, State, html
from profkit.dashboard import ids
from profkit.dashboard.pages import frame
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import tables as T

# After the page is drawn, bring the table a link's #fragment names into view (the browser
# looked for it before the table existed), a few times over a second: the tables above it
# are drawn after it and push it down.
SCROLL_JS = """
function(_children, hash) {
    if (hash && hash.length > 1) {
        const id = decodeURIComponent(hash.slice(1));
        let tries = 0;
        const scroll = () => {
            const el = document.getElementById(id);
            if (el) { el.scrollIntoView({block: "start"}); }
            if (++tries < 8) { setTimeout(scroll, 150); }
        };
        setTimeout(scroll, 0);
    }
    return hash || "";
}
"""

TAB = frame.RunTab("tables", "Tables", "tables")


def layout(results, run_key: str = "") -> html.Div:
    return frame.run_page(results, run_key, TAB, lambda _run, a: body(a), needs_run=False,
                      keep=True)


def body(a) -> list:
    present = [s for s in T.TABLES if not T.source(a, s).empty]
    absent = [s.title.split(":")[0] for s in T.TABLES if s not in present]
    contents = C.card("Tables", html.Ul(className="toc", children=[
        html.Li(html.A(s.title, href=f"#{T.anchor(s.name)}")) for s in present]),
        html.P(f"Empty in this run: {', '.join(absent)}.", className="hint") if absent else None)
    cards = [frame.panel(s.title, lambda s=s: C.table_card(
        f"t-{s.name}", s, T.source(a, s), id=T.anchor(s.name))) for s in present]
    return [html.Div([contents, *cards], id=ids.TABLES_BODY),
            html.Div(id=ids.TABLES_SCROLLED, hidden=True)]


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB)
    app.clientside_callback(SCROLL_JS, Output(ids.TABLES_SCROLLED, "children"),
                            Input(ids.TABLES_BODY, "children"), State(ids.URL, "hash"))
