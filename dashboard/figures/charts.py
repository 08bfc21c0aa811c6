"""Figures as pure functions: analysis tables in, plotly Figure out. No I/O, no app state.

Times on axes are milliseconds (``*_ms``); the tables carry nanoseconds (``*_ns``).
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from profkit.analyzers.analyze import part_name
from profkit.analyzers.measure.breakdown import PARTS
from profkit.analyzers.parts import PART_TABLE
from profkit.dashboard.colors import CLASS_COLORS, PART_COLORS, STRAGGLER_COLOR

from profkit.classify.names import short_kernel_names

LABEL_SHARE = 0.05  # a step narrower than this share of the axis is labelled with the others
LEFT_OUT, LEFT_OUT_COLOR = "left out of the verdict", "#b45309"  # steps the verdict skips
FONT = dict(family="Inter, system-ui, -apple-system, Segoe UI, sans-serif", size=12,
            color="#1f2937")
# Room that plotly would otherwise make itself (its axes and colour bars widen a margin that
# is too narrow for them) by drawing the chart a second time: ~0.2 s of a warm Overview of
# a large run's ~1 s (BENCHMARKS.md). Plotly still widens a margin that is too narrow.
COLORBAR_MARGIN = 104  # right of a heatmap, for its colour bar and labels up to "1500"
MS_AXIS_MARGIN = 64  # left of a chart in ms, for its title and labels up to "1500"
MAX_STEP_LABELS = 8  # labelled steps on a chart's x axis: more get rotated, which needs room
LEGEND_MARGIN = 64  # below a chart, for a one-line legend under its axis labels
STEP_LABEL_MARGIN = 32  # right of a chart of steps: half the last step's label, "step 12345"
OPTIONAL = {p.key: p.optional for p in PART_TABLE}


def base_layout(fig: go.Figure, title: str | None = None, height: int = 320,
                **margin: int) -> go.Figure:
    """The app's look; ``margin``: sides (l, r, t, b) wider than the default, in px."""
    fig.update_layout(template="plotly_white", font=FONT, height=height,
                      margin=dict(l=56, r=16, t=40 if title else 16, b=40) | margin,
                      title=dict(text=title, x=0.01, font=dict(size=14)) if title else None,
                      legend=dict(orientation="h", y=-0.18, x=0), hoverlabel=dict(font_size=12))
    return fig


# an NVML metric's unit suffix -> the unit it reads in and the factor to it (longest
# suffixes first). Sizes in decimal MB and GB, as the text report (analyzers/units.size) and
# the tables print them: NVML's MiB/s become MB/s, bytes GB.
METRIC_UNITS = (("_mibps", "MB/s", 2**20 / 1e6), ("_bytes", "GB", 1e-9),
                ("_mhz", "MHz", 1.0), ("_pct", "%", 1.0), ("_mj", "mJ", 1.0), ("_w", "W", 1.0),
                ("_c", "°C", 1.0))


def metric_unit(metric: str) -> tuple[str, float]:
    """(the unit ``metric`` reads in, the factor from its stored values to it)."""
    for suffix, unit, scale in METRIC_UNITS:
        if metric.endswith(suffix) and len(metric) > len(suffix):
            return unit, scale
    return "", 1.0


def metric_label(metric: str) -> str:
    """``sm_clock_mhz`` -> ``sm clock (MHz)``: the name in words, the unit in brackets."""
    for suffix, unit, _ in METRIC_UNITS:
        if metric.endswith(suffix) and len(metric) > len(suffix):
            return f"{metric[: -len(suffix)].replace('_', ' ')} ({unit})"
    return metric.replace("_", " ")


def shown_parts(ranks: pd.DataFrame | None = None) -> list[str]:
    """The parts a chart of ``ranks`` (the rank breakdown: a column of each part's share)
    draws, in PARTS order: every part but an optional one no rank has time in (the pipeline
    bubble of a run that is not a pipeline), as the text report's rank table
    (:attr:`~profkit.analyzers.parts.Part.optional`). None: every part."""
    if ranks is None:
        return list(PARTS)
    return [p for p in PARTS if not OPTIONAL[p] or (
        p in ranks and (pd.to_numeric(ranks[p], errors="coerce").fillna(0) > 0).any())]


def part_legend(ranks: pd.DataFrame | None = None) -> dict[str, str]:
    """Display name -> colour of the parts :func:`shown_parts` draws for ``ranks``, in PARTS
    order (for an HTML legend)."""
    return {part_name(p): PART_COLORS[p] for p in shown_parts(ranks)}


def empty_figure(message: str, height: int = 220) -> go.Figure:
    fig = base_layout(go.Figure(), height=height)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper",
                       yref="paper", font=dict(size=14, color="#6b7280"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def breakdown_bars(ranks: pd.DataFrame, stragglers: list[int] = (),
                   selected: int | None = None) -> go.Figure:
    """Per-rank stacked bars of the median step split into PARTS (ms), PARTS order."""
    if ranks.empty:
        return empty_figure("no profiled steps")
    labels = [f"rank {r}" for r in ranks["rank"]]
    fig = go.Figure()
    for part in shown_parts(ranks):
        ms = ranks[part] * ranks["step_time_ms"]
        fig.add_bar(x=labels, y=ms, name=part_name(part), marker_color=PART_COLORS[part],
                    customdata=np.c_[ranks[part] * 100, ranks["rank"]],
                    hovertemplate="%{x} " + part_name(part) + ": %{y:.2f} ms "
                                  "(%{customdata[0]:.1f}%)<extra></extra>")
    # the legend is HTML under the chart (part_legend): a plotly legend of long part names
    # wraps into rows that eat the plot area of a narrow chart
    fig.update_layout(barmode="stack", clickmode="event", showlegend=False)
    for r in stragglers:
        fig.add_annotation(x=f"rank {r}", y=float(ranks.loc[ranks["rank"] == r, "step_time_ms"].max()),
                           text="straggler", showarrow=True, arrowhead=2, ay=-28,
                           font=dict(color=STRAGGLER_COLOR))
    if selected is not None and f"rank {selected}" in labels:
        i = labels.index(f"rank {selected}")
        fig.add_vrect(x0=i - 0.5, x1=i + 0.5, fillcolor="#2563eb", opacity=0.07, line_width=0)
    fig.update_yaxes(title_text="median step (ms)")
    return base_layout(fig, "Step breakdown per rank", l=MS_AXIS_MARGIN)


def step_heatmap(steps: pd.DataFrame, verdict_ranks=None) -> go.Figure:
    """Rank x step heatmap of step time (ms). The colour scale starts at 0 ms, so that
    steps of 10.4 and 10.7 ms look alike and a step twice as long stands out. Steps the
    analysis left out of the verdict (``used`` False) are crossed in amber, with why on
    hover; so are the used steps of ranks outside ``verdict_ranks`` (the ranks whose steps
    the verdict counts: a rank whose every step compiles gives none, and a run of such ranks
    no verdict at all). None: every rank's used steps count."""
    if steps.empty:
        return empty_figure("no profiled steps")
    grid = steps.pivot_table(index="rank", columns="step", values="step_ns", aggfunc="sum") / 1e6
    why = _step_status(steps, verdict_ranks).reindex(index=grid.index, columns=grid.columns)
    x, y = [f"step {s}" for s in grid.columns], [f"rank {r}" for r in grid.index]
    fig = go.Figure(go.Heatmap(
        z=grid.to_numpy(), x=x, y=y, colorscale="Blues", colorbar=dict(title="ms"),
        customdata=why.fillna("").to_numpy(), zmin=0, zmax=_top(grid.to_numpy()),
        hovertemplate="%{y}, %{x}: %{z:.2f} ms<br>%{customdata}<extra></extra>", xgap=2, ygap=2))
    out = why.stack()
    out = out[out.str.startswith("left out")]
    if len(out):
        fig.add_scatter(
            x=[f"step {s}" for _, s in out.index], y=[f"rank {r}" for r, _ in out.index],
            text=out.tolist(), mode="markers", name=LEFT_OUT, showlegend=True,
            marker=dict(symbol="x-thin", size=14, line=dict(width=2.5, color=LEFT_OUT_COLOR)),
            hovertemplate="%{y}, %{x}: %{text}<extra></extra>")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(legend=dict(y=-0.25))
    label_some(fig, x, MAX_STEP_LABELS)
    return base_layout(fig, "Step time, rank x step", height=max(220, 110 + 40 * len(grid)),
                       r=COLORBAR_MARGIN, **({"b": LEGEND_MARGIN} if len(out) else {}))


def _step_status(steps: pd.DataFrame, verdict_ranks=None) -> pd.DataFrame:
    """Rank x step: "used for the verdict", or "left out of the verdict: <why>"."""
    n = len(steps)
    used = steps["used"].astype(bool).to_numpy() if "used" in steps else np.ones(n, bool)
    reasons = (steps["excluded_reason"].fillna("").astype(str).to_numpy()
               if "excluded_reason" in steps else np.full(n, ""))
    if verdict_ranks is not None:
        counted = steps["rank"].isin(list(verdict_ranks)).to_numpy()
        compiling = (steps["compile_ns"].fillna(0).to_numpy() > 0 if "compile_ns" in steps
                     else np.zeros(n, bool))
        why_not = np.where(compiling, "it compiles (torch.compile): no steady state",
                           "its rank gives no verdict")
        reasons = np.where(used & ~counted, why_not, reasons)
        used = used & counted
    text = ["used for the verdict" if u else f"{LEFT_OUT}: {r}" if r else LEFT_OUT
            for u, r in zip(used, reasons)]
    frame = steps[["rank", "step"]].assign(status=text)
    return frame.drop_duplicates(["rank", "step"]).pivot(index="rank", columns="step",
                                                         values="status")


def rank_steps_bars(steps: pd.DataFrame, rank: int) -> go.Figure:
    """One rank's steps as stacked PARTS bars (ms)."""
    mine = steps[steps["rank"] == rank]
    if mine.empty:
        return empty_figure(f"rank {rank} has no profiled steps")
    fig = go.Figure()
    x = [f"step {s}" for s in mine["step"]]
    for part in shown_parts(steps):  # the parts of the run's legend, of every rank
        fig.add_bar(x=x, y=mine[part] / 1e6, name=part_name(part), marker_color=PART_COLORS[part],
                    hovertemplate="%{x} " + part_name(part) + ": %{y:.2f} ms<extra></extra>")
    fig.update_layout(barmode="stack", showlegend=False)  # HTML legend: see breakdown_bars
    fig.update_yaxes(title_text="ms")
    label_some(fig, x, 2 * MAX_STEP_LABELS)  # a chart as wide as the page
    return base_layout(fig, f"Rank {rank}: every step", l=MS_AXIS_MARGIN, r=STEP_LABEL_MARGIN)


def label_some(fig: go.Figure, categories: list[str], most: int) -> go.Figure:
    """Label every k-th of the x axis's ``categories`` (from the first), at most ``most``
    labels: crowded labels are rotated by plotly, which then widens the bottom margin and
    draws the chart again (see the margins above). Hover still names every bar."""
    step = -(-len(categories) // most)
    if step > 1:
        fig.update_xaxes(tickmode="array", tickvals=list(categories[::step]))
    return fig


def kernel_bars(kernels: pd.DataFrame, top: int = 15) -> go.Figure:
    """Horizontal bars of the kernels with the most GPU time, coloured by class, named as
    people read them (short names), the full name on hover."""
    if kernels.empty:
        return empty_figure("no kernels")
    k = kernels.nlargest(top, "total_ns").iloc[::-1]
    names = short_kernel_names(k["name"].astype(str).tolist())
    colors = [CLASS_COLORS.get(c, "#6b7280") for c in k["cls"]]
    classes = [part_name(str(c)) for c in k["cls"]]
    full = [_wrapped(n) for n in k["name"].astype(str)]
    # positions, not names, on the y axis: two kernels may share a short name
    fig = go.Figure(go.Bar(x=k["total_ns"] / 1e6, y=list(range(len(k))), orientation="h",
                           marker_color=colors, customdata=np.c_[classes, k["count"], full],
                           hovertemplate="%{customdata[2]}<br>%{x:.2f} ms, %{customdata[1]} "
                                         "calls, %{customdata[0]}<extra></extra>"))
    fig.update_yaxes(tickvals=list(range(len(k))), ticktext=names, automargin=True)
    fig.update_xaxes(title_text="GPU time, all ranks (ms)")
    return base_layout(fig, "Top kernels by GPU time", height=120 + 22 * len(k))


def _wrapped(name: str, width: int = 100, max_chars: int = 600) -> str:
    """A full kernel name for a hover box: cut at ``max_chars``, broken every ``width``."""
    name = name if len(name) <= max_chars else name[: max_chars - 3] + "..."
    return "<br>".join(name[i:i + width] for i in range(0, len(name), width))


def _top(z: np.ndarray) -> float:
    """The top of a colour scale that starts at 0: the largest value (1 when none)."""
    finite = z[np.isfinite(z)]
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def wait_heatmap(waits: pd.DataFrame, collectives: pd.DataFrame) -> go.Figure:
    """Rank x collective heatmap of the time each rank waited in each collective (ms),
    collectives in start order."""
    if waits.empty:
        return empty_figure("no collectives matched across ranks")
    order = collectives.sort_values("start_ns")["key"].tolist()
    grid = waits.pivot_table(index="rank", columns="key", values="wait_ns", aggfunc="sum")
    grid = grid.reindex(columns=[k for k in order if k in grid.columns]) / 1e6
    fig = go.Figure(go.Heatmap(
        z=grid.to_numpy(), x=list(range(len(grid.columns))), y=[f"rank {r}" for r in grid.index],
        customdata=np.tile(np.array(grid.columns, dtype=object), (len(grid), 1)),
        colorscale="Oranges", colorbar=dict(title="wait ms"), ygap=2,
        zmin=0, zmax=_top(grid.to_numpy()),
        hovertemplate="%{y}<br>%{customdata}<br>wait %{z:.3f} ms<extra></extra>"))
    fig.update_xaxes(title_text="collective (in start order)")
    fig.update_yaxes(autorange="reversed")
    return base_layout(fig, "Wait per rank and collective", height=max(220, 110 + 40 * len(grid)))


def skew_scatter(collectives: pd.DataFrame, base_ns: int) -> go.Figure:
    """Start skew of every collective over time, coloured by the rank that arrived last."""
    if collectives.empty:
        return empty_figure("no collectives matched across ranks")
    fig = go.Figure()
    for last, group in collectives.groupby("last_rank"):
        fig.add_scatter(x=(group["start_ns"] - base_ns) / 1e6, y=group["start_skew_ns"] / 1e3,
                        mode="markers", name=f"last: rank {last}", marker=dict(size=8),
                        text=group["key"],
                        hovertemplate="%{text}<br>t=%{x:.2f} ms, skew %{y:.1f} us<extra></extra>")
    fig.update_xaxes(title_text="time (ms)")
    fig.update_yaxes(title_text="start skew (us)")
    return base_layout(fig, "Arrival skew over time")


def step_shading(fig: go.Figure, steps: pd.DataFrame, base_ns: int,
                 span_ms: float | None = None) -> None:
    """Alternate light bands for steps across every subplot, each labelled; when the steps
    are too narrow for their labels in a ``span_ms`` wide axis, one label names them all."""
    starts = (steps["ts_ns"].to_numpy(float) - base_ns) / 1e6
    ends = (np.maximum(steps["ts_ns"] + steps["dur_ns"], steps["gpu_end_ns"]).to_numpy(float)
            - base_ns) / 1e6
    for i, (x0, x1) in enumerate(zip(starts, ends)):
        fig.add_vrect(x0=x0, x1=x1, fillcolor="#e0e7ff" if i % 2 == 0 else "#f1f5f9",
                      opacity=0.5, line_width=0, layer="below", row="all", col=1)
    if not len(steps):
        return
    numbers = steps["step"].tolist()
    crowded = span_ms is not None and (ends - starts).min() < LABEL_SHARE * span_ms
    labels = ([(starts[0], f"steps {numbers[0]}-{numbers[-1]}")] if crowded and len(steps) > 1
              else [(x, f"step {n}") for x, n in zip(starts, numbers)])
    for x, text in labels:
        fig.add_annotation(x=x, y=1.0, yref="paper", xanchor="left", yanchor="bottom",
                           text=text, showarrow=False, font=dict(size=10, color="#4f46e5"))


def counters_figure(counters: pd.DataFrame, metrics: list[str], steps: pd.DataFrame,
                    base_ns: int, throttled: pd.DataFrame | None = None) -> go.Figure:
    """One row per metric, one line per rank (``counters`` has a ``rank`` column), on a time
    axis in ms after ``base_ns``; throttle periods (``throttled``: rank, t0_ns, t1_ns) red."""
    metrics = [m for m in metrics if m in set(counters.get("metric", []))]
    if counters.empty or not metrics:
        return empty_figure("no NVML counters in this run (capture with profkit.profile)")
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[metric_label(m) for m in metrics])
    palette = ["#2563eb", "#f59e0b", "#10b981", "#8b5cf6", "#dc2626", "#0ea5e9", "#a16207"]
    for i, metric in enumerate(metrics, start=1):
        for j, (rank, group) in enumerate(counters[counters["metric"] == metric].groupby("rank")):
            unit, scale = metric_unit(metric)
            fig.add_scatter(x=(group["ts_ns"] - base_ns) / 1e6, y=group["value"] * scale,
                            row=i, col=1, mode="lines+markers", name=f"rank {rank}",
                            legendgroup=str(rank), showlegend=i == 1,
                            line=dict(color=palette[j % len(palette)]),
                            hovertemplate=f"rank {rank} {metric}: " + "%{y:.1f} " + unit
                                          + "<extra></extra>")
    times = [(counters["ts_ns"] - base_ns) / 1e6, (steps["ts_ns"] - base_ns) / 1e6]
    step_shading(fig, steps, base_ns, span_ms=float(pd.concat(times).max() - pd.concat(times).min()))
    for row in (throttled if throttled is not None else pd.DataFrame()).itertuples(index=False):
        fig.add_vrect(x0=(row.t0_ns - base_ns) / 1e6, x1=(row.t1_ns - base_ns) / 1e6,
                      fillcolor=STRAGGLER_COLOR, opacity=0.18, line_width=0, row="all", col=1)
    fig.update_xaxes(title_text="time (ms)", row=len(metrics), col=1)
    fig = base_layout(fig, height=140 + 150 * len(metrics))
    fig.update_layout(legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1, xanchor="right"),
                      margin=dict(t=60))
    return fig


def diff_parts_bars(parts: pd.DataFrame) -> go.Figure:
    """Base vs new median ms per part (grouped horizontal bars: the parts' display names
    are long), parts in PARTS order from the top."""
    if parts.empty:
        return empty_figure("nothing to compare")
    p = parts.set_index("part").reindex([x for x in PARTS if x in set(parts["part"])])
    names = [part_name(x) for x in p.index]
    fig = go.Figure()
    fig.add_bar(y=names, x=p["base_ms"], name="base", marker_color="#94a3b8", orientation="h",
                hovertemplate="%{y}: %{x:.2f} ms<extra>base</extra>")
    fig.add_bar(y=names, x=p["new_ms"], name="new", orientation="h",
                marker_color=[PART_COLORS[x] for x in p.index],
                customdata=p["delta_ms"],
                hovertemplate="%{y}: %{x:.2f} ms (%{customdata:+.2f})<extra>new</extra>")
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="ms per step")
    fig.update_yaxes(autorange="reversed", automargin=True, tickvals=names,
                     ticktext=["<br>".join(textwrap.wrap(n, 24)) for n in names])
    return base_layout(fig, "Step time by part: base vs new", height=110 + 46 * len(names))

