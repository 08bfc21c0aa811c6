"""The kernel roofline as a figure: a pure function of the ``roofline`` table
(analyzers/measure/roofline.py), no I/O, no app state.

Log-log: arithmetic intensity (FLOP per byte moved) across, achieved TFLOP/s up; one point
per (rank, kernel), its area proportional to the kernel's time per step, its colour its
class. The roofs are drawn for every (compute peak, HBM peak) pair the table holds: the
memory roof ``intensity x bandwidth`` rising to each compute peak (the fp32 vector peak for
elementwise work, the tensor peak of each GEMM precision). Kernels without a known cost are
left out (the title counts them); kernels without FLOPs (copies) sit on the figure's floor.
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


def roofline_figure(table: pd.DataFrame) -> go.Figure:
    """The roofline of the ``roofline`` table's kernels (module doc)."""
    if table is None or table.empty:
        return empty_figure("no kernels")
    known = table[table["bound"].isin(BOUND_COLORS) & np.isfinite(table["achieved_gbps"])
                  & (table["kernel_ms_per_step"] > 0)]
    if known.empty:
        return empty_figure("no kernel with a known cost: profile with record_shapes=True")
    x = _floor(known["intensity_flop_per_byte"])
    y = _floor(known["achieved_tflops"])
    lo, hi = min(x.min(), 1e-2) / 2, max(x.max(), _ridge(known).max()) * 4
    fig = go.Figure()
    for tflops, gbps in _roofs(known):
        xs = np.geomspace(lo, hi, 200)
        fig.add_scatter(x=xs, y=np.minimum(tflops, xs * gbps / 1e3), mode="lines",
                        line=dict(color=ROOF_COLOR, width=1.5), showlegend=False,
                        name=f"roof {tflops:g} TFLOP/s, {gbps:g} GB/s",
                        hovertemplate=f"roof: {tflops:g} TFLOP/s, {gbps:g} GB/s<extra></extra>")
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
    fig.update_xaxes(type="log", title_text="FLOP per byte moved")
    fig.update_yaxes(type="log", title_text="achieved TFLOP/s")
    left_out = len(table) - len(known)
    title = "Kernel roofline" + (f" ({left_out} kernel(s) without a known cost left out)"
                                 if left_out else "")
    return base_layout(fig, title, height=420)


def _floor(values: pd.Series) -> np.ndarray:
    """Positive values for a log axis: zero or missing ones (copies: no FLOPs) at a floor
    two decades under the smallest positive one."""
    v = values.to_numpy(dtype=float)
    positive = v[np.isfinite(v) & (v > 0)]
    floor = positive.min() / 100 if len(positive) else 1e-6
    return np.where(np.isfinite(v) & (v > 0), v, floor)


def _roofs(table: pd.DataFrame) -> list[tuple[float, float]]:
    pairs = table[["peak_tflops", "peak_gbps"]].dropna().drop_duplicates()
    return [(float(t), float(g)) for t, g in pairs.itertuples(index=False)]


def _ridge(table: pd.DataFrame) -> np.ndarray:
    """FLOP per byte where each compute roof meets the memory roof."""
    ridge = (table["peak_tflops"] * 1e3 / table["peak_gbps"]).to_numpy(dtype=float)
    return ridge[np.isfinite(ridge)] if np.isfinite(ridge).any() else np.array([1.0])


def _sizes(ms: np.ndarray) -> np.ndarray:
    """Marker diameters whose areas follow the time per step."""
    top = ms.max() if len(ms) and ms.max() > 0 else 1.0
    return np.maximum(MAX_MARKER_PX * np.sqrt(ms / top), MIN_MARKER_PX)
