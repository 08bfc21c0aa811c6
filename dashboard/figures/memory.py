"""GPU memory over time as pure functions: the ranks' ``memory`` tables (the allocator's
``[memory]`` events) in, a long table of points and a plotly Figure out.

The allocator's totals are drawn as step lines (each value holds until the next event) in
GB, allocated solid and reserved dashed in the rank's colour, over the steps' bands; each
rank-device's highest allocated point is marked (the run's highest labelled), and the
device's capacity is a dotted line. The points are thinned as the merged timeline's counter
tracks are (:func:`profkit.timeline.memorytracks.memory_series`: every peak kept).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from profkit.dashboard.colors import STRAGGLER_COLOR
from profkit.dashboard.figures.charts import base_layout, empty_figure, step_shading

from profkit.timeline.memorytracks import memory_series

NO_MEMORY = "no memory events in this trace (capture with profile_memory=True)"
MAX_LINES = 8  # rank-devices drawn: the ones with the highest peaks
POINTS_PER_SERIES = 1500
GB = 1e9
PALETTE = ("#2563eb", "#f59e0b", "#10b981", "#8b5cf6", "#0ea5e9", "#a16207", "#db2777",
           "#64748b")
POINT_COLUMNS = ("rank", "device", "metric", "ts_ns", "bytes")
METRICS = {"allocated_bytes": "allocated", "reserved_bytes": "reserved"}


def memory_points(tables: dict[int, pd.DataFrame],
                  max_points: int = POINTS_PER_SERIES) -> pd.DataFrame:
    """Every rank's GPU allocated and reserved series (``tables``: rank -> its ``memory``
    table) as rows of :data:`POINT_COLUMNS`, ``metric`` "allocated" or "reserved"."""
    frames = []
    for rank, table in sorted(tables.items()):
        for metric, device, ts_ns, values in memory_series(table, max_points=max_points):
            frames.append(pd.DataFrame({"rank": rank, "device": device,
                                        "metric": METRICS[metric], "ts_ns": ts_ns,
                                        "bytes": values}))
    if not frames:
        return pd.DataFrame(columns=list(POINT_COLUMNS))
    return pd.concat(frames, ignore_index=True)[list(POINT_COLUMNS)]


def peaks(points: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, device): the highest allocated point, its first instant (rank, device,
    ts_ns, bytes), highest first."""
    alloc = points[points["metric"] == "allocated"]
    if alloc.empty:
        return pd.DataFrame(columns=["rank", "device", "ts_ns", "bytes"])
    top = alloc.sort_values(["bytes", "ts_ns"], ascending=[False, True], kind="stable")
    top = top.drop_duplicates(["rank", "device"])
    return top[["rank", "device", "ts_ns", "bytes"]].reset_index(drop=True)


def memory_figure(points: pd.DataFrame, steps: pd.DataFrame, base_ns: int,
                  capacity_bytes: list[float] = ()) -> go.Figure:
    """Allocated and reserved GB per rank-device on a time axis in ms after ``base_ns``
    (at most :data:`MAX_LINES` rank-devices: the highest peaks), the steps shaded, each
    drawn rank-device's peak marked and ``capacity_bytes`` (the devices' memory) as lines."""
    if points.empty:
        return empty_figure(NO_MEMORY)
    top = peaks(points)
    drawn = top.head(MAX_LINES)
    fig = go.Figure()
    for i, (rank, device) in enumerate(zip(drawn["rank"], drawn["device"])):
        color, label = PALETTE[i % len(PALETTE)], _label(rank, device, top)
        mine = points[(points["rank"] == rank) & (points["device"] == device)]
        for metric, dash in (("allocated", "solid"), ("reserved", "dash")):
            series = mine[mine["metric"] == metric]
            fig.add_scatter(x=(series["ts_ns"] - base_ns) / 1e6, y=series["bytes"] / GB,
                            mode="lines", line=dict(color=color, dash=dash, width=1.5),
                            line_shape="hv", name=f"{label} {metric}", legendgroup=label,
                            hovertemplate=f"{label} {metric}: " + "%{y:.2f} GB<extra></extra>")
    fig.add_scatter(x=(drawn["ts_ns"] - base_ns) / 1e6, y=drawn["bytes"] / GB, mode="markers",
                    marker=dict(symbol="star", size=13, color=STRAGGLER_COLOR),
                    name="peak allocated", text=[_label(r, d, top) for r, d in
                                                 zip(drawn["rank"], drawn["device"])],
                    hovertemplate="%{text} peak: %{y:.2f} GB at %{x:.2f} ms<extra></extra>")
    best = drawn.iloc[0]
    fig.add_annotation(x=(best["ts_ns"] - base_ns) / 1e6, y=best["bytes"] / GB,
                       text=f"peak {best['bytes'] / GB:.2f} GB", showarrow=True, arrowhead=2,
                       ax=0, ay=-28, font=dict(size=11, color=STRAGGLER_COLOR))
    caps = sorted({float(c) for c in capacity_bytes if pd.notna(c) and c > 0})
    for cap in caps:
        fig.add_hline(y=cap / GB, line_dash="dot", line_color="#374151",
                      annotation_text=f"capacity {cap / GB:.1f} GB",
                      annotation_position="top left")
    if caps:
        _zoom_buttons(fig, float(points["bytes"].max()), caps[-1])
    times = pd.concat([(points["ts_ns"] - base_ns) / 1e6, (steps["ts_ns"] - base_ns) / 1e6])
    step_shading(fig, steps, base_ns, span_ms=float(times.max() - times.min()))
    fig.update_xaxes(title_text="time (ms)")
    fig.update_yaxes(title_text="GB", rangemode="tozero")
    fig = base_layout(fig, height=420)
    fig.update_layout(legend=dict(orientation="h", y=1.08, yanchor="bottom", x=1,
                                  xanchor="right"), margin=dict(t=84))
    return fig


def _zoom_buttons(fig: go.Figure, top_bytes: float, capacity_bytes: float) -> None:
    """Two buttons over the chart: the y axis up to the capacity (the headroom in view, as
    drawn first) or up to the data (its shape, where it is far below the capacity)."""
    to = {"the capacity": capacity_bytes, "the data": top_bytes}
    fig.update_yaxes(range=[0, 1.05 * capacity_bytes / GB])
    fig.update_layout(updatemenus=[dict(
        type="buttons", direction="right", showactive=True, active=0, x=0, xanchor="left",
        y=1.08, yanchor="bottom", pad=dict(l=0, t=0), font=dict(size=11),
        buttons=[dict(label=f"up to {name}", method="relayout",
                      args=[{"yaxis.range": [0, 1.05 * value / GB]}])
                 for name, value in to.items()])])


def _label(rank: int, device: int, top: pd.DataFrame) -> str:
    """``rank 0``, or ``rank 0 GPU 1`` where a rank has memory on several devices."""
    several = (top["rank"] == rank).sum() > 1
    return f"rank {rank} GPU {device}" if several else f"rank {rank}"
