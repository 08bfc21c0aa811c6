"""Timeline: one rank's GPU streams and CPU threads as lanes, steps marked, NVML counters
below on the same time axis. Zooming re-queries the server, which sends the events of the
window, or their busy fraction per lane and bin when the window holds too many to draw.
A button downloads the run's merged Perfetto trace."""

from __future__ import annotations

import logging

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate
from profkit.dashboard import components as C
from profkit.dashboard import figures as F
from profkit.dashboard import ids
from profkit.dashboard import timeline_data as T

log = logging.getLogger(__name__)
LEGEND = {**{k: F.CLASS_COLORS[k] for k in ("compute", "communication", "memcpy", "memset")},
          "CPU op": F.CPU_KIND_COLORS["cpu_op"], "CUDA runtime": F.CPU_KIND_COLORS["runtime"],
          "annotation": F.CPU_KIND_COLORS["annotation"]}


def base_ns(run) -> int:
    """The run's time origin: the earliest profiled step of any rank (else first event)."""
    starts = [int(d.steps["ts_ns"].min()) for d in run.ranks.values() if len(d.steps)]
    if not starts:
        starts = [int(d.events["ts_ns"].min()) for d in run.ranks.values() if len(d.events)]
    return min(starts) if starts else 0


def lanes_for(results, key: str, rank: int):
    """The rank's lane table, cached with the run (it is the expensive part of a re-query)."""
    run = results.run(key)
    origin = base_ns(run)
    table = results.get_or_compute(("lanes", key, results.fingerprint(key), rank),
                         lambda: T.lane_table(run.ranks[rank].events, origin))
    return run, origin, table


def view_figure(results, key: str, rank: int, window) -> tuple:
    run, origin, table = lanes_for(results, key, rank)
    data = run.ranks[rank]
    view = T.timeline_view(table, data.steps, data.counters, origin, window)
    shown = "busy fraction per bin" if view.mode == "bins" else "every event"
    info = (f"rank {rank}: {view.n_events:,} events in {view.x1_ms - view.x0_ms:.2f} ms "
            f"shown as {shown}" + (f" ({view.bin_ms * 1e3:.0f} us bins); zoom in for events"
                                   if view.mode == "bins" else ""))
    return F.timeline_figure(view, f"rank {rank}"), info


def figure_or_error(results, key: str, rank: int, window) -> tuple:
    """:func:`view_figure`, or an empty figure and the reason when the rank cannot be drawn
    (the rank picker stays usable)."""
    return C.attempt(f"rank {rank}'s timeline", lambda: view_figure(results, key, rank, window),
                     lambda why: (F.empty_figure(f"could not be drawn: {why}"), why))


def layout(results, run_key: str = "") -> html.Div:
    return C.run_page(results, run_key, "timeline", lambda run, _a: body(results, run_key, run))


def body(results, run_key: str, run) -> list:
    return [C.panel("Timeline", lambda: _timeline_card(results, run_key, run))]


def _timeline_card(results, run_key: str, run) -> html.Section:
    rank = run.rank_ids[0]
    fig, info = figure_or_error(results, run_key, rank, None)
    controls = html.Div(className="controls", children=[
        html.Label(["rank", dcc.Dropdown(id=ids.TL_RANK, options=[
            {"label": f"rank {r}", "value": r} for r in run.rank_ids], value=rank,
            clearable=False, className="dropdown")]),
        html.Span(info, id=ids.TL_INFO, className="muted"),
        html.Button("Download merged Perfetto trace", id=ids.TL_DOWNLOAD_BTN, className="button"),
        dcc.Download(id=ids.TL_DOWNLOAD),
    ])
    return C.card(None, controls, C.legend(LEGEND),
                  dcc.Loading(C.graph(ids.TL_GRAPH, fig), type="dot"))


def register(app, results) -> None:
    C.register_run_page(__name__, results, layout, tab="timeline", name="Timeline",
                        title="timeline", order=2)

    @app.callback(Output(ids.TL_GRAPH, "figure"), Output(ids.TL_INFO, "children"),
                  Input(ids.TL_RANK, "value"), Input(ids.TL_GRAPH, "relayoutData"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def requery(rank, relayout, store):
        key = C.stored_run(results, store)
        if rank not in results.run(key).rank_ids:
            raise PreventUpdate
        window = None
        if dash.ctx.triggered_id == ids.TL_GRAPH:
            window = T.parse_window(relayout)
            if window == "keep":
                raise PreventUpdate
        return figure_or_error(results, key, rank, window)

    @app.callback(Output(ids.TL_DOWNLOAD, "data"), Input(ids.TL_DOWNLOAD_BTN, "n_clicks"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def download(_clicks, store):
        key = C.stored_run(results, store)
        name, data = results.merged_trace(key)
        return dcc.send_bytes(data, name, type="application/gzip")
