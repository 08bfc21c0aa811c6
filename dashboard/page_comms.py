"""Communication: collectives (bytes, latency, bus bandwidth), the rank x collective wait
heatmap, arrival skew over time and the straggler evidence. Clicking a heatmap cell shows
that collective."""

from __future__ import annotations

import pandas as pd
from dash import Input, Output, State, html
from dash.exceptions import PreventUpdate
from profkit.dashboard import components as C
from profkit.dashboard import figures as F
from profkit.dashboard import ids
from profkit.dashboard.page_timeline import base_ns


def collective_rows(coll: pd.DataFrame) -> pd.DataFrame:
    if coll.empty:
        return pd.DataFrame(columns=["collective"])
    return pd.DataFrame({
        "key": coll["key"], "collective": coll["collective"], "pg": coll["pg"], "step": coll["step"],
        "ranks": coll["n_ranks"], "MB": coll["bytes"] / 1e6, "latency_us": coll["latency_ns"] / 1e3,
        "busbw_GBps": coll["busbw_gbps"], "start_skew_us": coll["start_skew_ns"] / 1e3,
        "last_rank": coll["last_rank"],
    })


def straggler_rows(table: pd.DataFrame) -> pd.DataFrame:
    cols = ["rank", "straggler", "n_last", "n_collectives", "late_share", "wait_frac", "evidence"]
    return table[[c for c in cols if c in table]] if not table.empty else table


def collective_detail(a, key: str | None) -> html.Div:
    coll = a.table("collectives")
    row = coll[coll["key"] == key]
    if row.empty:
        return html.P("Click a cell of the wait heatmap to see one collective.", className="hint")
    waits = a.table("collective_waits")
    waits = waits[waits["key"] == key]
    r = row.iloc[0]
    facts = {"collective": r["collective"], "bytes": int(r["bytes"]), "latency_us": r["latency_ns"] / 1e3,
             "busbw_GBps": r["busbw_gbps"], "last rank": int(r["last_rank"]), "step": int(r["step"])}
    facts.update({f"rank {int(w.rank)} wait_us": w.wait_ns / 1e3 for w in waits.itertuples()})
    return html.Div([html.H3(key), C.kv_list(facts)])


def layout(results, run_key: str = "") -> html.Div:
    return C.run_page(results, run_key, "comms", body)


def body(run, a) -> list:
    coll = a.table("collectives")
    return [
        html.Div(className="grid two", children=[
            C.panel("Waits per rank and collective", lambda: C.card(
                None, C.graph(ids.C_WAITS, F.wait_heatmap(a.table("collective_waits"), coll)),
                html.Div(collective_detail(a, None), id=ids.C_DETAIL))),
            C.panel("Arrival skew", lambda: C.card(
                None, C.graph(ids.C_SKEW, F.skew_scatter(coll, base_ns(run))))),
        ]),
        C.panel("Collectives", lambda: C.card(
            "Collectives", C.data_table(ids.C_TABLE, collective_rows(coll)))),
        C.panel("Stragglers", lambda: C.card("Stragglers", C.data_table(
            ids.C_STRAGGLERS, straggler_rows(a.table("stragglers"))))),
    ]


def clicked_collective(click) -> str | None:
    """The collective key a click on the wait heatmap carries; None for anything else."""
    points = click.get("points") if isinstance(click, dict) else None
    point = points[0] if isinstance(points, list) and points else None
    key = point.get("customdata") if isinstance(point, dict) else None
    return key if isinstance(key, str) else None


def register(app, results) -> None:
    C.register_run_page(__name__, results, layout, tab="comms", name="Communication",
                        title="communication", order=4)

    @app.callback(Output(ids.C_DETAIL, "children"), Input(ids.C_WAITS, "clickData"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def show_collective(click, store):
        key = C.stored_run(results, store)
        collective = clicked_collective(click)
        if collective is None:
            raise PreventUpdate
        return collective_detail(results.analysis(key), collective)
