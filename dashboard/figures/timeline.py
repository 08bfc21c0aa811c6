"""The timeline figure, a pure function of a :class:`~profkit.dashboard.timeline.view.TimelineView`.

Ranks are stacked on one time axis (ms after the run's origin), each with its GPU streams,
its GPU-idle cause lane and, on demand, its CPU threads one row per nesting depth. Matched
collectives are joined from rank to rank at their starts (the slant is the arrival skew).
Each rank's step windows, the analysis' own disjoint ones, are bands over its lanes; steps
left out of the verdict are amber with a dashed edge and say why on hover. NVML counters
sit below as the samples they are: markers held until the next reading, never a line
interpolated between them.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from profkit.analyzers import units as U
from profkit.dashboard.colors import CLASS_COLORS, CPU_KIND_COLORS, PART_COLORS, STRAGGLER_COLOR
from profkit.dashboard.figures import phase_bands as PB
from profkit.dashboard.figures.charts import base_layout, metric_unit

GROUP_COLORS = {**CPU_KIND_COLORS, **CLASS_COLORS, **PART_COLORS}
LANE_PX, COMPACT_LANE_PX, COUNTER_PX = 24, 11, 100
LINK_COLOR = "#111827"
STEP_FILLS = ("#e0e7ff", "#f1f5f9")  # alternating bands of used steps
STEP_EDGE = "#a5b4fc"
LEFT_OUT_FILL, LEFT_OUT_EDGE = "#fde68a", "#b45309"
MAX_BANDS = 300  # step bands drawn per rank up to this many in all, else the first rank's only
MAX_LABELS = 40  # step labels per rank in one window
LABEL_MIN_SHARE = 0.02  # a step showing less of the window than this gets no label
RIGHT_EDGE = 0.9  # a label starting past this share of the window is right-aligned
BAR_THICKNESS = 0.7  # an event's bar, in lanes
LABEL_CHAR_PX, MIN_MARGIN_PX, MAX_MARGIN_PX = 6.2, 230, 420  # lane labels' margin
MAX_LABEL_CHARS = 64  # a lane label's characters: (420 - 16) / 6.2
_TAG = re.compile(r"<[^>]*>")
MIN_COUNTER_SAMPLES = 3
FLOW_NAME, FLOW_COLOR = "launch -> GPU", "rgba(79, 70, 229, 0.55)"  # CPU launch to its work  # samples inside the window a counter needs to be drawn unasked


def unit_of(metric: str) -> str:
    """The unit a counter reads in (the Counters page's: :func:`charts.metric_unit`)."""
    return metric_unit(metric)[0]


def positions(view) -> dict[str, int]:
    """Lane -> its y position: lanes are rows of a numeric axis labelled with their names
    (the top lane highest), since plotly.js 4.1 fails to draw several heatmaps whose rows
    are different categories of one axis."""
    n = len(view.lanes)
    return {lane: n - 1 - i for i, lane in enumerate(view.lanes)}


def add_events(fig: go.Figure, view, thickness: float = BAR_THICKNESS) -> None:
    """One horizontal bar per event from its start to its end, ``thickness`` lanes tall:
    hover and click work anywhere on a bar. Each bar carries (rank, layer, row) for the
    click's details (:mod:`~profkit.dashboard.timeline.event`); the lane is on the axis,
    so the hover says what runs there (its text is most of a zoom's bytes)."""
    if view.events.empty:
        return
    pos = positions(view)
    for group, ev in view.events.groupby("group", sort=False):
        dur = ev["end_ms"] - ev["start_ms"]
        label = ev["name"].str.slice(0, 80) + " (" + (dur * 1e3).round(1).astype(str) + " us)"
        fig.add_trace(go.Bar(
            orientation="h", base=ev["start_ms"].to_numpy(), x=dur.to_numpy(),
            y=ev["lane"].map(pos).to_numpy(), width=thickness, name=group, showlegend=False,
            customdata=np.c_[ev["rank"].to_numpy(object), ev["layer"].to_numpy(object),
                             ev["row"].to_numpy(object)],
            hovertext=label.to_numpy(), marker=dict(color=GROUP_COLORS.get(group, "#6b7280"),
                                                    line=dict(width=0)),
            hovertemplate="%{hovertext}<extra>" + group + "</extra>", _validate=False),
            row=1, col=1)


def _rows(grid: np.ndarray) -> list[list]:
    """A 2-D array as nested lists (plotly.js reads no 2-D typed array as customdata), NaN
    as None, rounded to 0.1%."""
    return [[None if np.isnan(v) else round(float(v), 3) for v in row] for row in grid]


def bin_grid(view) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """(bin starts, z, groups, busy) over every lane (row k at y position k, so the cells
    of one heatmap line up with the lanes): z = index of the bin's dominant group + its busy
    fraction x 0.999, NaN where the lane is idle; busy the fraction itself."""
    bins, pos = view.bins, positions(view)
    x = np.sort(bins["bin_ms"].unique())
    groups = sorted(bins["group"].unique(), key=lambda g: list(GROUP_COLORS).index(g)
                    if g in GROUP_COLORS else len(GROUP_COLORS))
    busy = np.full((len(view.lanes), len(x)), np.nan)
    z = busy.copy()
    row = bins["lane"].map(pos).to_numpy()
    col = np.searchsorted(x, bins["bin_ms"].to_numpy())
    busy[row, col] = bins["busy"].to_numpy()
    z[row, col] = bins["group"].map({g: i for i, g in enumerate(groups)}).to_numpy() \
        + 0.999 * busy[row, col]
    return x, z, groups, busy


def group_scale(groups: list[str]) -> list[list]:
    """A colour scale over [0, len(groups)]: within each group's unit, from transparent
    (idle) to the group's colour (busy for the whole bin)."""
    n, stops = len(groups), []
    for i, g in enumerate(groups):
        stops += [[i / n, "rgba(255,255,255,0)"],
                  [(i + 0.999) / n, GROUP_COLORS.get(g, "#6b7280")]]
    stops[-1][0] = 1.0
    return stops


def add_bins(fig: go.Figure, view) -> None:
    """One heatmap of every lane: a cell is the lane's busy fraction in that bin (its
    covered time over the bin length: for the cause lane, its idle time), in the colour of
    the group covering most of it."""
    x, z, groups, busy = bin_grid(view)
    fig.add_trace(go.Heatmap(
        x=x + view.bin_ms / 2, y=np.arange(len(view.lanes)), z=z, customdata=_rows(busy),
        name="busy fraction per bin", zmin=0, zmax=len(groups), showscale=False,
        hoverongaps=False, colorscale=group_scale(groups),
        hovertemplate="%{x:.3f} ms: %{customdata:.0%} of the bin covered<extra></extra>",
        _validate=False), row=1, col=1)  # checking 2 x lanes x bins cells took ~0.5 s


def add_links(fig: go.Figure, view) -> None:
    """Each matched collective as a line through its start on every rank shown (rows of one
    collective are adjacent in ``view.links``)."""
    links = view.links
    if links is None or links.empty:
        return
    group = pd.factorize(links["key"])[0]
    at = np.arange(len(links)) + group  # each collective's points, then a gap
    size = len(links) + group.max() + 1
    x, y, text = (np.full(size, None, dtype=object) for _ in range(3))
    x[at] = links["start_ms"].to_numpy()
    y[at] = links["lane"].map(positions(view)).to_numpy()
    text[at] = (links["collective"].astype(str) + " " + links["bytes"].map(U.size)
                + "<br>start skew " + links["skew_ms"].round(3).astype(str)
                + " ms, last: rank " + links["last_rank"].astype(str) + "<br>rank "
                + links["rank"].astype(str) + " starts").to_numpy()
    fig.add_trace(go.Scatter(x=x, y=y, text=text, mode="lines+markers",
                             name="collective arrival", showlegend=False,
                             line=dict(color=LINK_COLOR, width=1.2),
                             marker=dict(size=5, color=LINK_COLOR),
                             hovertemplate="%{text}<br>%{x:.3f} ms<extra></extra>"), row=1, col=1)


def add_flows(fig: go.Figure, view) -> None:
    """An arrow from each CUDA runtime call to the GPU work it queued (``view.flows``,
    :func:`profkit.dashboard.timeline.flows.launch_flows`), as one line trace with gaps."""
    flows = getattr(view, "flows", None)
    if flows is None or flows.empty:
        return
    pos = positions(view)
    n = len(flows)
    x, y = np.full(3 * n, None, dtype=object), np.full(3 * n, None, dtype=object)
    x[0::3], x[1::3] = flows["launch_ms"].to_numpy(), flows["start_ms"].to_numpy()
    y[0::3], y[1::3] = flows["cpu_lane"].map(pos).to_numpy(), flows["gpu_lane"].map(pos).to_numpy()
    text = np.full(3 * n, None, dtype=object)
    delay_us = ((flows["start_ms"] - flows["launch_ms"]) * 1e3).round(1).astype(str)
    text[0::3] = text[1::3] = ("launch of " + flows["name"].str.slice(0, 80) + "<br>starts "
                               + delay_us + " us after the call").to_numpy()
    size = np.zeros(3 * n)
    size[1::3] = 9  # the arrowhead at the GPU end
    fig.add_trace(go.Scatter(x=x, y=y, text=text, mode="lines+markers", name=FLOW_NAME,
                             showlegend=False, line=dict(color=FLOW_COLOR, width=0.8),
                             marker=dict(symbol="arrow", angleref="previous", size=size,
                                         color=FLOW_COLOR),
                             hovertemplate="%{text}<extra></extra>"), row=1, col=1)


def rank_blocks(view) -> dict[int, tuple[float, float]]:
    """rank -> (bottom, top) of its lanes on the category axis (lane i from the top sits at
    len - 1 - i), each widened by half a lane."""
    n = len(view.lanes)
    blocks: dict[int, list[int]] = {}
    for i, lane in enumerate(view.lanes):
        blocks.setdefault(view.rank_of[lane], []).append(n - 1 - i)
    return {r: (min(p) - 0.5, max(p) + 0.5) for r, p in blocks.items()}


def step_bands(view) -> tuple[list[dict], list[dict]]:
    """Shapes and labels of the step windows: per rank over its own lanes; when that would
    be too many shapes, the first rank's windows over every lane."""
    steps, blocks = view.steps, rank_blocks(view)
    if steps.empty or not blocks:
        return [], []
    if len(steps) > MAX_BANDS:
        first = view.ranks[0]
        steps = steps[steps["rank"] == first]
        blocks = {first: (-0.5, len(view.lanes) - 0.5)}
    shapes, labels = [], []
    for rank, mine in steps.groupby("rank", sort=False):
        if rank not in blocks:
            continue
        y0, y1 = blocks[rank]
        for i, s in enumerate(mine.itertuples(index=False)):
            shapes.append(_band(s, rank, i, y0, y1))
            if len(mine) <= MAX_LABELS:
                labels.append(_band_label(s, y1, view.x0_ms, view.x1_ms))
    return shapes, [label for label in labels if label is not None]


def _band(s, rank: int, i: int, y0: float, y1: float) -> dict:
    left_out = not s.used
    return dict(type="rect", xref="x", yref="y", x0=s.start_ms, x1=s.end_ms, y0=y0, y1=y1,
                name=f"step {s.step} · rank {rank}" + (" · left out" if left_out else ""),
                fillcolor=LEFT_OUT_FILL if left_out else STEP_FILLS[i % 2],
                opacity=0.55 if left_out else 0.5, layer="below",
                line=dict(width=1, color=LEFT_OUT_EDGE, dash="dash") if left_out
                else dict(width=1, color=STEP_EDGE))


def _band_label(s, y_top: float, x0: float, x1: float) -> dict | None:
    """A step's label inside the plot: at the left of the step's visible part, or
    right-aligned at its visible end when it begins by the right edge (a label past the
    edge is cut); none when too little of the step shows for a label."""
    lo, hi = max(s.start_ms, x0), min(s.end_ms, x1)
    if hi - lo < LABEL_MIN_SHARE * (x1 - x0):
        return None
    right = lo > x0 + RIGHT_EDGE * (x1 - x0)
    left_out = not s.used
    return dict(x=hi if right else lo, y=y_top, xref="x", yref="y",
                xanchor="right" if right else "left", yanchor="top",
                text=f"step {s.step}" + (" · left out" if left_out else ""), showarrow=False,
                font=dict(size=10, color=LEFT_OUT_EDGE if left_out else "#4f46e5"),
                bgcolor="rgba(255,255,255,0.8)",
                hovertext=(f"left out of the verdict: {s.reason}" if left_out
                           else "used for the verdict"))


def counter_title(view, metric: str) -> str:
    """``gpu_util_pct (%): 2 samples in this 31.0 ms window (one every ~100 ms)``."""
    c = view.counters[view.counters["metric"] == metric]
    inside = c[c["inside"].astype(bool)].groupby("rank").size()
    counts = [(r, int(inside.get(r, 0))) for r in view.ranks if (r, metric) in view.periods_ms]
    periods = [view.periods_ms[(r, metric)] for r, _ in counts]
    n = (", ".join(f"rank {r}: {k}" for r, k in counts) if len(counts) > 1
         else str(counts[0][1]) if counts else "0")
    every = f" (one every ~{np.nanmedian(periods):.0f} ms)" if np.isfinite(periods).any() else ""
    unit = unit_of(metric)
    return (f"{metric}{f' ({unit})' if unit else ''}: {n} sample(s) in this "
            f"{view.x1_ms - view.x0_ms:.1f} ms window{every}")


def add_counters(fig: go.Figure, view, metrics: list[str]) -> None:
    palette = ["#0f766e", "#b91c1c", "#1d4ed8", "#a16207", "#7c3aed", "#0e7490"]
    for row, metric in enumerate(metrics, start=2):
        c = view.counters[view.counters["metric"] == metric]
        for j, rank in enumerate(view.ranks):
            mine = c[c["rank"] == rank]
            if mine.empty:
                continue
            fig.add_trace(go.Scatter(
                x=mine["t_ms"], y=mine["value"] * metric_unit(metric)[1],
                mode="lines+markers", line_shape="hv",
                name=f"rank {rank}", legendgroup=f"rank {rank}", showlegend=row == 2,
                line=dict(color=palette[j % len(palette)], width=1.5), marker=dict(size=7),
                hovertemplate=f"rank {rank} {metric}: " + "%{y:.1f} " + unit_of(metric)
                              + " read at %{x:.3f} ms<extra></extra>"), row=row, col=1)
        fig.update_yaxes(title_text=unit_of(metric), row=row, col=1)


def _clip(label: str) -> str:
    """A lane label that fits :data:`MAX_MARGIN_PX`: its middle cut out past
    :data:`MAX_LABEL_CHARS` (the rank and the depth at its ends stay)."""
    if len(label) <= MAX_LABEL_CHARS:
        return label
    half = (MAX_LABEL_CHARS - 1) // 2
    return label[:half] + "…" + label[-(MAX_LABEL_CHARS - 1 - half):]


def label_margin_px(labels) -> int:
    """The left margin that holds the longest lane label whole (tags aside): about 6.2 px a
    character at the lanes' 10 px font, within [MIN_MARGIN_PX, MAX_MARGIN_PX]. A fixed
    230 px cut ``rank 0 · thread 1099 (pt_autograd_0) · depth 0`` short."""
    longest = max((len(_TAG.sub("", str(t))) for t in labels or ()), default=0)
    return int(min(MAX_MARGIN_PX, max(MIN_MARGIN_PX, LABEL_CHAR_PX * longest + 16)))


def tick_labels(view, stragglers) -> list[str]:
    """Each lane's label, the straggler's in red; a CPU thread's depth rows after its first
    say only their depth (the thread is named once)."""
    out, thread = [], None
    for lane in view.lanes:
        owner, _, depth = lane.rpartition(" · depth ")
        text = f"depth {depth}" if owner and owner == thread else _clip(lane)
        thread = owner or None
        out.append(f"<span style='color:{STRAGGLER_COLOR}'>{text}</span>"
                   if view.rank_of[lane] in stragglers else text)
    return out


def counter_metrics(view) -> list[str]:
    """Every NVML metric of the view's counters, in their order."""
    return list(dict.fromkeys(view.counters["metric"])) if len(view.counters) else []


def resolvable_metrics(view, minimum: int = MIN_COUNTER_SAMPLES) -> list[str]:
    """The metrics with at least ``minimum`` samples inside the window on every shown rank
    that has the metric: a counter read every 100 ms says nothing about a 30 ms window
    (one reading, held, reads 0-10% busy under a GPU that is 96% busy)."""
    out = []
    for metric in counter_metrics(view):
        c = view.counters[view.counters["metric"] == metric]
        inside = c[c["inside"].astype(bool)].groupby("rank").size()
        ranks = [r for r in view.ranks if (c["rank"] == r).any()]
        if ranks and min(int(inside.get(r, 0)) for r in ranks) >= minimum:
            out.append(metric)
    return out


def timeline_figure(view, stragglers=(), all_counters: bool = False) -> go.Figure:
    """Lanes of every rank shown (top), NVML counters (below), one time axis in ms: only
    the counters that resolve the window (:func:`resolvable_metrics`), unless
    ``all_counters``."""
    metrics = counter_metrics(view) if all_counters else resolvable_metrics(view)
    lane_px = COMPACT_LANE_PX if view.compact else LANE_PX
    heights = [lane_px * max(len(view.lanes), 1) + 40] + [COUNTER_PX] * len(metrics)
    fig = make_subplots(rows=1 + len(metrics), cols=1, shared_xaxes=True,
                        vertical_spacing=min(0.06, 40 / sum(heights)) if metrics else 0.0,
                        row_heights=[h / sum(heights) for h in heights],
                        subplot_titles=[""] + [counter_title(view, m) for m in metrics],
                        # unvalidated: checking a few hundred step bands and traces property
                        # by property took most of a zoom's 0.5 s (the tests check the output)
                        figure=go.Figure(_validate=False))
    # the counters' titles (how many samples the window holds) start at the plot's left
    # edge: centred, a long one ran past both sides of a narrow figure
    fig.update_annotations(x=0, xanchor="left", font=dict(size=11))
    if view.mode == "events":
        add_events(fig, view)
    elif len(view.bins):
        add_bins(fig, view)
    add_links(fig, view)
    add_flows(fig, view)
    add_counters(fig, view, metrics)
    shapes, labels = step_bands(view)
    bands, names = PB.phase_bands(getattr(view, "phases", None), rank_blocks(view), view.x0_ms,
                                  view.x1_ms, len(view.lanes))
    shapes, labels = shapes + bands, labels + names  # inference phases above the step bands
    fig.update_yaxes(tickvals=list(positions(view).values()), showgrid=False, zeroline=False,
                     ticktext=tick_labels(view, set(stragglers)), fixedrange=True,
                     range=[-0.5, len(view.lanes) - 0.5], tickfont=dict(size=10), row=1, col=1)
    fig.update_xaxes(range=[view.x0_ms, view.x1_ms])  # every row: counters reach past it
    fig.update_xaxes(title_text="time (ms after the first step)", row=1 + len(metrics), col=1)
    fig = base_layout(fig, height=sum(heights) + 90)
    fig.update_layout(uirevision="timeline", dragmode="zoom",
                      margin=dict(l=label_margin_px(fig.layout.yaxis.ticktext), t=40),
                      shapes=shapes, annotations=list(fig.layout.annotations) + labels,
                      # the counters' legend at the left: the modebar sits at the right
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0,
                                  xanchor="left"), hovermode="closest", barmode="overlay")
    return fig
