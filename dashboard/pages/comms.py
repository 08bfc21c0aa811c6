"""Communication: collectives (bytes, latency, bus bandwidth), the rank x collective wait
heatmap, arrival skew over time and the straggler evidence. Clicking a heatmap cell shows
that collective."""

from __future__ import annotations

from dash import Input, Output, State, html
from dash.exceptions import PreventUpdate
from profkit.dashboard import ids
from profkit.dashboard.figures import charts as F
from profkit.dashboard.pages import frame
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import tables as T

TAB = frame.RunTab("comms", "Communication", "communication")


def collective_detail(a, key: str | None) -> html.Div:
    coll = a.table("collectives")
    row = coll[coll["key"] == key]
    if row.empty:
        return html.P("Click a cell of the wait heatmap to see one collective.", className="hint")
    waits = a.table("collective_waits")
    waits = waits[waits["key"] == key]
    r = row.iloc[0]
    facts = {"collective": r["collective"], "bytes": int(r["bytes"]), "latency_ns": r["latency_ns"],
             "busbw_gbps": r["busbw_gbps"], "last rank": int(r["last_rank"]), "step": int(r["step"])}
    facts.update({f"rank {int(w.rank)} wait_ns": w.wait_ns for w in waits.itertuples()})
    return html.Div([html.H3(key), C.kv_list(facts)])


def layout(results, run_key: str = "") -> html.Div:
    return frame.run_page(results, run_key, TAB,
                      lambda _run, a: body(a, results.facts(run_key).get("origin_ns", 0)),
                      needs_run=False, keep=True)


def nothing_to_show(a) -> str | None:
    """Why the page has nothing to show, in words, for a single-rank run without a
    collective, a collective wait or a straggler; None otherwise. (A run of several ranks
    keeps its panels, empty or not: with a rank missing, its collectives cannot be matched,
    and no sentence here would be sure why.)"""
    if any(len(a.table(name)) for name in ("collectives", "collective_waits", "stragglers")):
        return None
    world = max(int(a.run.get("world_size") or 0), len(a.run.get("ranks_analyzed") or []))
    if world > 1:
        return None
    return ("No communication: this is a single-rank run (one GPU), so there are no "
            "collectives between ranks, no waits and no stragglers to show.")


def body(a, origin_ns: int) -> list:
    """The page's panels; ``origin_ns``: time 0 of the skew chart (the timeline's). One
    card saying why when there is nothing to show (:func:`nothing_to_show`)."""
    why = nothing_to_show(a)
    if why:
        return [C.card("Communication", html.P(why, id=ids.C_NONE, className="summary"))]
    coll = a.table("collectives")
    return [
        html.Div(className="grid two", children=[
            frame.panel("Waits per rank and collective", lambda: C.card(
                None, C.graph(ids.C_WAITS, F.wait_heatmap(a.table("collective_waits"), coll)),
                C.loading(html.Div(collective_detail(a, None), id=ids.C_DETAIL)))),
            frame.panel("Arrival skew", lambda: C.card(
                None, C.graph(ids.C_SKEW, F.skew_scatter(coll, origin_ns)))),
        ]),
        frame.panel("Collectives", lambda: C.table_card(ids.C_TABLE, T.BY_NAME["collectives"],
                                                   T.with_links(a))),
        frame.panel("Stragglers", lambda: C.table_card(ids.C_STRAGGLERS, T.BY_NAME["stragglers"],
                                                  a.table("stragglers"))),
    ]


def clicked_collective(click) -> str | None:
    """The collective key a click on the wait heatmap carries; None for anything else."""
    points = click.get("points") if isinstance(click, dict) else None
    point = points[0] if isinstance(points, list) and points else None
    key = point.get("customdata") if isinstance(point, dict) else None
    return key if isinstance(key, str) else None


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB)

    @app.callback(Output(ids.C_DETAIL, "children"), Input(ids.C_WAITS, "clickData"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def show_collective(click, store):
        key = frame.stored_run(results, store)
        collective = clicked_collective(click)
        if collective is None:
            raise PreventUpdate
        return collective_detail(results.analysis(key), collective)
