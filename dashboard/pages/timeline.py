"""Timeline: the ranks that matter on one time axis (by default up to eight: the straggler
and the peer that waits for it most first), with matched collectives linked across ranks,
the analysis' step windows, each rank's GPU-idle time coloured by its cause, CPU threads on
demand (with an arrow from each CUDA runtime call to the GPU work it queued) and the NVML
counters that resolve the window below. Events are bars: hover anywhere on one for its name, click
it for its details beside the figure. Every
range change, zoom in or out, re-queries the server, which sends the events of the window,
or their busy fraction per lane and bin when the window holds too many to draw.
``?ranks=1,0&t0=..&t1=..`` (ms after the first step) opens a given view: the Overview's
findings link there. A button downloads the run's merged Perfetto trace."""

from __future__ import annotations

import logging
import threading

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate
from profkit.analyzers.parts import part_label
from profkit.dashboard import colors, ids
from profkit.dashboard.figures import charts as F
from profkit.dashboard.figures import timeline as FT
from profkit.dashboard.pages import frame
from profkit.dashboard.timeline import data as TD
from profkit.dashboard.timeline import event as TE
from profkit.dashboard.timeline import flows as TF
from profkit.dashboard.timeline import links as TL
from profkit.dashboard.timeline import phases as TP
from profkit.dashboard.timeline import search as TS
from profkit.dashboard.timeline import view as TV
from profkit.dashboard.ui import components as C

log = logging.getLogger(__name__)
TAB = frame.RunTab("timeline", "Timeline", "timeline")
_CPU = colors.CPU_KIND_COLORS
LEGEND = {**{k: colors.CLASS_COLORS[k] for k in ("compute", "communication", "memcpy", "memset")},
          **{f"idle: {part_label(k)}": colors.PART_COLORS[k] for k in TD.IDLE_CAUSES},
          "CPU op": _CPU["cpu_op"], "CUDA runtime": _CPU["runtime"],
          "annotation": _CPU["annotation"], "collective arrival": FT.LINK_COLOR,
          FT.FLOW_NAME + " (CPU threads)": FT.FLOW_COLOR,
          "step left out of the verdict": FT.LEFT_OUT_FILL}
MAX_RANKS = 256  # ranks drawn at once (compact rows, binned)
CPU_OPTION = "cpu"
COUNTERS_OPTION = "counters"  # every NVML counter, also those too slow for the window
# The run's time origin, also read by the Communication and Counters pages so that their
# times are the timeline's.
base_ns = TD.origin_ns
UTIL_NOTE = ("NVML utilisation is the share of the last sample period in which any kernel "
             "ran; it cannot resolve steps shorter than the sample period. Each marker is "
             "one reading, held until the next; the GPU lanes above are the exact record.")


ZOOM_FILTER_JS = """function (relayout) {
    const zoom = /^xaxis\\d*\\.(autorange|range|range\\[[01]\\])$/;
    if (relayout && Object.keys(relayout).some(k => zoom.test(k))) { return relayout; }
    return window.dash_clientside.no_update;
}"""


class LaneCache:
    """The lanes of each rank of one run, built the first time the rank is drawn, and the
    run's collective links: one item of the result cache per run, whatever its rank count."""

    def __init__(self, run, analysis):
        self.run, self.analysis = run, analysis
        self.origin = TD.origin_ns(run)
        self._lanes: dict[int, TD.RankLanes] = {}
        self._links = None
        self._lock = threading.Lock()

    def lanes(self, rank: int) -> TD.RankLanes:
        with self._lock:
            if rank not in self._lanes:
                steps = self.analysis.table("step_breakdown")
                status = steps[steps["rank"] == rank] if len(steps) else None
                self._lanes[rank] = TD.rank_lanes(self.run.ranks[rank], self.origin, status)
            return self._lanes[rank]

    def links(self):
        with self._lock:
            if self._links is None:
                self._links = TL.link_table(self.analysis, self.run, self.origin)
            return self._links


def lane_cache(results, key: str) -> LaneCache:
    run, analysis = results.loaded(key)
    return results.get_or_compute(("timeline", key, results.fingerprint(key)),
                                  lambda: LaneCache(run, analysis))


def stragglers_of(analysis) -> list[int]:
    return [int(s["rank"]) for s in analysis.stragglers]


def ranks_label(ranks: list[int], stragglers) -> str:
    if len(ranks) > 4:
        return f"{len(ranks)} ranks"
    names = [f"rank {r}" + (" (straggler)" if r in stragglers else "") for r in ranks]
    return ", ".join(names)


def info_text(view, stragglers) -> str:
    shown = "busy fraction per bin" if view.mode == "bins" else "every event"
    text = (f"{ranks_label(view.ranks, stragglers)}: {view.n_events:,} events in "
            f"{view.x1_ms - view.x0_ms:.2f} ms shown as {shown}")
    if view.mode == "bins":
        text += f" ({view.bin_ms * 1e3:.0f} us bins)" + ("" if view.compact else "; zoom in for events")
    flows = getattr(view, "flows", None)
    if flows is not None and len(flows):
        text += f"; {len(flows)} launch -> GPU arrows"
    drawn = view.links["key"].nunique() if len(view.links) else 0
    if view.n_links:
        text += (f"; {drawn} matched collectives linked" if drawn == view.n_links else
                 f"; {drawn} of {view.n_links:,} matched collectives linked (largest skews)")
    return text


def hidden_counters_note(view, all_counters: bool) -> str:
    """Which NVML counters are left out of the figure for sampling too slowly for the
    window (:func:`~profkit.dashboard.figures.timeline.resolvable_metrics`), and how to see
    them; empty when none is."""
    hidden = [] if all_counters else [m for m in FT.counter_metrics(view)
                                      if m not in FT.resolvable_metrics(view)]
    if not hidden:
        return ""
    return (f" {len(hidden)} NVML counter(s) hidden ({', '.join(hidden)}): fewer than "
            f"{FT.MIN_COUNTER_SAMPLES} samples in this window, too few to tell anything about "
            "it; zoom out, or tick 'all NVML counters' to see them.")


def counters_note(view, all_counters: bool = False) -> str | None:
    """What the NVML rows can and cannot tell about this window: how many utilisation
    samples fall inside it (per rank when several are shown), then :data:`UTIL_NOTE`, then
    the counters hidden (:func:`hidden_counters_note`)."""
    if view.counters.empty:
        return None
    c = view.counters
    util = c[(c["metric"] == "gpu_util_pct") & c["inside"].astype(bool)]
    hidden = hidden_counters_note(view, all_counters)
    if not (c["metric"] == "gpu_util_pct").any():
        return UTIL_NOTE + hidden
    per_rank = util.groupby("rank").size()
    counts = [int(per_rank.get(r, 0)) for r in view.ranks]
    n = (str(counts[0]) if len(counts) == 1 else
         ", ".join(f"rank {r}: {k}" for r, k in zip(view.ranks, counts)))
    return (f"gpu_util_pct samples in this {view.x1_ms - view.x0_ms:.1f} ms window: {n}. "
            + UTIL_NOTE + hidden)


def view_figure(results, key: str, ranks: list[int], window, show_cpu: bool,
                all_counters: bool = False) -> tuple:
    cache = lane_cache(results, key)
    view = TV.timeline_view([cache.lanes(r) for r in ranks], window, show_cpu)
    view.links, view.n_links = TL.links_in_window(cache.links(), view.ranks, view.lanes,
                                                  view.compact, view.x0_ms, view.x1_ms)
    view.flows = TF.launch_flows(view, {r: (cache.lanes(r), cache.run.ranks[r].events)
                                        for r in view.ranks})
    view.phases = TP.view_phases(cache.analysis, cache.origin, view)
    stragglers = stragglers_of(cache.analysis)
    return (FT.timeline_figure(view, stragglers, all_counters), info_text(view, stragglers),
            counters_note(view, all_counters))


def figure_or_error(results, key: str, ranks: list[int], window, show_cpu: bool,
                    all_counters: bool = False) -> tuple:
    """:func:`view_figure`, or an empty figure and the reason when it cannot be drawn (the
    controls stay usable)."""
    return frame.attempt(f"the timeline of ranks {ranks}",
                     lambda: view_figure(results, key, ranks, window, show_cpu, all_counters),
                     lambda why: (F.empty_figure(f"could not be drawn: {why}"), why, None))


def layout(results, run_key: str = "", **query) -> html.Div:
    return frame.run_page(results, run_key, TAB,
                      lambda run, a: body(results, run_key, run, a, query))


def body(results, run_key: str, run, analysis, query: dict | None = None) -> list:
    return [frame.panel("Timeline", lambda: _timeline_card(results, run_key, run, analysis,
                                                       query or {}))]


def _timeline_card(results, run_key: str, run, analysis, query: dict) -> html.Section:
    asked, window = TL.query_view(run, analysis, **query)
    ranks = (asked or TL.default_ranks(run, analysis))[:MAX_RANKS]
    fig, info, note = figure_or_error(results, run_key, ranks, window, False)
    stragglers = stragglers_of(analysis)
    options = [{"label": f"rank {r}" + (" (straggler)" if r in stragglers else ""), "value": r}
               for r in run.rank_ids]
    controls = html.Div(className="controls", children=[
        html.Label(["ranks", dcc.Dropdown(id=ids.TL_RANKS, options=options, value=ranks,
                                          multi=True, clearable=False, className="dropdown")]),
        dcc.Checklist(id=ids.TL_CPU, options=[{"label": "CPU threads", "value": CPU_OPTION},
                                              {"label": "all NVML counters",
                                               "value": COUNTERS_OPTION}],
                      value=[], inline=True),
        dcc.Input(id=ids.TL_SEARCH, type="search", placeholder="search by name",
                  debounce=True, className="tl-search", maxLength=TS.MAX_QUERY),
        html.Button("Download merged Perfetto trace", id=ids.TL_DOWNLOAD_BTN, className="button"),
        dcc.Download(id=ids.TL_DOWNLOAD),
    ])
    graph = dcc.Graph(id=ids.TL_GRAPH, figure=fig,  # a double-click zooms out to the whole run
                      config={**C.GRAPH_CONFIG, "doubleClick": "autosize"})
    event = html.Aside(className="tl-event", children=[
        html.H2("Event"), C.loading(html.Div(TE.hint(), id=ids.TL_EVENT))])
    return C.card(None, controls, html.P(info, id=ids.TL_INFO, className="muted"),
                  html.P(id=ids.TL_FOUND, className="tl-found"),
                  C.legend({**LEGEND, **TP.legend(analysis)}),
                  html.Div([html.Div(dcc.Loading(graph, type="dot"), className="tl-figure"),
                            event], className="tl-body"),
                  html.P(note, id=ids.TL_NOTE, className="hint"), dcc.Store(id=ids.TL_ZOOM),
                  dcc.Store(id=ids.TL_WINDOW, data=list(window) if window else None))


def chosen_ranks(results, key: str, ranks) -> list[int]:
    """The dropdown's ranks that the run has, in their order; stops the callback when none."""
    known = set(results.run(key).rank_ids)
    chosen = [r for r in dict.fromkeys(ranks or []) if r in known][:MAX_RANKS]
    if not chosen:
        raise PreventUpdate
    return chosen


def window_of(trigger, relayout, stored):
    """The window to draw: the relayout's when a zoom triggered, else the one shown."""
    if trigger == ids.TL_ZOOM:
        window = TV.parse_window(relayout)
        if window == "keep":
            raise PreventUpdate
        return window
    return tuple(stored) if stored else None


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB, query=("ranks", "t0", "t1", "finding"))

    @app.callback(Output(ids.TL_GRAPH, "figure"), Output(ids.TL_INFO, "children"),
                  Output(ids.TL_NOTE, "children"), Output(ids.TL_WINDOW, "data"),
                  Input(ids.TL_RANKS, "value"), Input(ids.TL_CPU, "value"),
                  Input(ids.TL_ZOOM, "data"), State(ids.RUN_STORE, "data"),
                  State(ids.TL_WINDOW, "data"), prevent_initial_call=True)
    def requery(ranks, cpu, relayout, store, stored):
        key = frame.stored_run(results, store)
        chosen = chosen_ranks(results, key, ranks)
        window = window_of(dash.ctx.triggered_id, relayout, stored)
        fig, info, note = figure_or_error(results, key, chosen, window, CPU_OPTION in (cpu or []),
                                          COUNTERS_OPTION in (cpu or []))
        return fig, info, note, list(window) if window else None

    @app.callback(Output(ids.TL_FOUND, "children"), Input(ids.TL_SEARCH, "value"),
                  Input(ids.TL_RANKS, "value"), Input(ids.TL_WINDOW, "data"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def search(query, ranks, window, store):
        """The matches of a name: how many and their total time, run and window."""
        if not isinstance(query, str) or not query.strip():
            return ""
        key = frame.stored_run(results, store)
        chosen = chosen_ranks(results, key, ranks)
        cache = lane_cache(results, key)
        lanes = [cache.lanes(r) for r in chosen]
        # the window shown: the zoom's, else the profiled steps' (the view's default)
        shown = tuple(window) if window else (min(r.span_ms[0] for r in lanes),
                                              max(r.span_ms[1] for r in lanes))
        return frame.attempt("the search", lambda: TS.summary(
            TS.matches(lanes, query, shown), query,
            ranks_label(chosen, stragglers_of(cache.analysis))), lambda why: why)

    # Only relayouts about the x axis reach the server: Dash applies the answer to a
    # callback's latest request only, so a relayout that is no zoom (an autosize) sent
    # while a zoom's request is in flight would swallow the zoom's answer.
    app.clientside_callback(ZOOM_FILTER_JS, Output(ids.TL_ZOOM, "data"),
                            Input(ids.TL_GRAPH, "relayoutData"), prevent_initial_call=True)

    @app.callback(Output(ids.TL_EVENT, "children"), Input(ids.TL_GRAPH, "clickData"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def show_event(click, store):
        """The clicked event's details beside the figure."""
        key = frame.stored_run(results, store)
        return frame.attempt("the event", lambda: TE.details(lane_cache(results, key), click),
                         lambda why: html.P(f"could not be shown: {why}", className="error"))

    @app.callback(Output(ids.TL_DOWNLOAD, "data"), Input(ids.TL_DOWNLOAD_BTN, "n_clicks"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def download(_clicks, store):
        key = frame.stored_run(results, store)
        name, data = results.merged_trace(key)
        return dcc.send_bytes(data, name, type="application/gzip")
