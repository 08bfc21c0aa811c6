"""The kernel roofline as a figure: a pure function of the ``roofline`` table
(analyzers/measure/roofline.py), no I/O, no app state.

Log-log: arithmetic intensity (FLOP per byte moved) across, achieved TFLOP/s up; one point
per (rank, kernel), its area proportional to the kernel's time per step, its colour its
class. Each roof is drawn once and labelled: one memory roof ``intensity x bandwidth`` per
HBM bandwidth, and one flat compute roof per compute peak the table holds (the fp32 vector
peak for elementwise work, the tensor peak of each GEMM precision), from where it meets the
memory roof. The table's peaks are time-weighted means per kernel, so 989.4 and
989.3999999999999 are one roof. Kernels without a known cost are left out, and so are kernels
without FLOPs (copies, fills): they have no place on a FLOP axis (a floor under them would
stretch it over ten decades); the title counts both, with the copies' time per step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from profkit.dashboard.figures.charts import base_layout, empty_figure

BOUND_COLORS = {"math": "#2563eb", "memory": "#dc2626", "latency": "#9ca3af"}
ROOF_COLOR = "#1f2937"
MAX_MARKER_PX = 40
MIN_MARKER_PX = 5
ROOF_DIGITS = 4  # significant digits two peaks must share to be one roof


def roofline_figure(table: pd.DataFrame) -> go.Figure:
    """The roofline of the ``roofline`` table's kernels (module doc)."""
    if table is None or table.empty:
        return empty_figure("no kernels")
    known = table[table["bound"].isin(BOUND_COLORS) & np.isfinite(table["achieved_gbps"])
                  & (table["kernel_ms_per_step"] > 0)]
    if known.empty:
        return empty_figure("no kernel with a known cost: profile with record_shapes=True")
    has_flops = _positive(known["intensity_flop_per_byte"]) & _positive(known["achieved_tflops"])
    flopless, known = known[~has_flops], known[has_flops]
    title = "Kernel roofline" + _left_out(len(table) - len(known) - len(flopless), flopless)
    if known.empty:
        return empty_figure("no kernel with FLOPs to place on the roofline" + title[15:])
    x = known["intensity_flop_per_byte"].to_numpy(dtype=float)
    y = known["achieved_tflops"].to_numpy(dtype=float)
    compute, memory = roofs(known)
    ridges = [t * 1e3 / g for t in compute for g in memory] or [1.0]
    lo, hi = min(x.min(), 1e-2) / 2, max(x.max(), max(ridges)) * 4
    fig = go.Figure()
    _draw_roofs(fig, compute, memory, lo, hi)
    size = _sizes(known["kernel_ms_per_step"].to_numpy(dtype=float))
    for bound, color in BOUND_COLORS.items():
        rows = (known["bound"] == bound).to_numpy()
        if not rows.any():
            continue
        k = known[rows]
        fig.add_scatter(
            x=x[rows], y=y[rows], mode="markers", name=bound,
            marker=dict(size=size[rows], color=color, opacity=0.7, line=dict(width=0.5)),
            customdata=np.c_[k["short_name"].astype(str), k["op"].astype(str),
                             k["kernel_ms_per_step"], k["achieved_gbps"], k["rank"]],
            hovertemplate="%{customdata[0]} (%{customdata[1]}, rank %{customdata[4]})<br>"
                          "%{customdata[2]:.3f} ms/step, %{y:.3g} TFLOP/s, "
                          "%{customdata[3]:.0f} GB/s, %{x:.3g} FLOP/byte<extra>"
                          + bound + "</extra>")
    fig.update_xaxes(type="log", title_text="FLOP per byte moved",
                     range=[np.log10(lo), np.log10(hi)])
    fig.update_yaxes(type="log", title_text="achieved TFLOP/s")
    return base_layout(fig, title, height=420)


def roofs(table: pd.DataFrame) -> tuple[list[float], list[float]]:
    """The distinct compute peaks (TFLOP/s) and HBM bandwidths (GB/s) of ``table``, each
    once (to :data:`ROOF_DIGITS` significant digits), ascending."""
    def distinct(values: pd.Series) -> list[float]:
        v = values.to_numpy(dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        return sorted({float(f"{x:.{ROOF_DIGITS}g}") for x in v})
    return distinct(table["peak_tflops"]), distinct(table["peak_gbps"])


def _draw_roofs(fig: go.Figure, compute: list[float], memory: list[float],
                lo: float, hi: float) -> None:
    """One sloped line per bandwidth up to the highest compute peak, one flat line per
    compute peak from its ridge with the fastest bandwidth; each with its label."""
    top = max(compute) if compute else None
    for gbps in memory:
        x1 = top * 1e3 / gbps if top else hi
        xs = np.geomspace(lo, min(x1, hi), 50)
        fig.add_scatter(x=xs, y=xs * gbps / 1e3, mode="lines", showlegend=False,
                        line=dict(color=ROOF_COLOR, width=1.5, dash="dot"),
                        name=f"memory roof {gbps:g} GB/s",
                        hovertemplate=f"memory roof: HBM {gbps:g} GB/s<extra></extra>")
        at = np.log10(lo) + 0.4 * (np.log10(min(x1, hi)) - np.log10(lo))  # along the slope
        fig.add_annotation(x=at, y=at + np.log10(gbps / 1e3), text=f"HBM {gbps:g} GB/s",
                           showarrow=False, xanchor="right", yanchor="bottom", xshift=-4,
                           font=dict(size=10, color=ROOF_COLOR))
    fastest = max(memory) if memory else None
    for tflops in compute:
        x0 = tflops * 1e3 / fastest if fastest else lo
        fig.add_scatter(x=[x0, hi], y=[tflops, tflops], mode="lines", showlegend=False,
                        line=dict(color=ROOF_COLOR, width=1.5),
                        name=f"compute roof {tflops:g} TFLOP/s",
                        hovertemplate=f"compute roof: {tflops:g} TFLOP/s<extra></extra>")
        fig.add_annotation(x=np.log10(hi), y=np.log10(tflops), text=f"{tflops:g} TFLOP/s",
                           showarrow=False, xanchor="right", yanchor="bottom",
                           font=dict(size=10, color=ROOF_COLOR))


def _left_out(unknown: int, flopless: pd.DataFrame) -> str:
    parts = []
    if unknown:
        parts.append(f"{unknown} kernel(s) without a known cost")
    if len(flopless):
        ms = flopless["kernel_ms_per_step"].sum()
        parts.append(f"{len(flopless)} without FLOPs (copies, fills: {ms:.3g} ms/step)")
    return f" ({' and '.join(parts)} left out)" if parts else ""


def _positive(values: pd.Series) -> np.ndarray:
    v = values.to_numpy(dtype=float)
    return np.isfinite(v) & (v > 0)


def _sizes(ms: np.ndarray) -> np.ndarray:
    """Marker diameters whose areas follow the time per step."""
    top = ms.max() if len(ms) and ms.max() > 0 else 1.0
    return np.maximum(MAX_MARKER_PX * np.sqrt(ms / top), MIN_MARKER_PX)
