"""Memory: the GPU memory PyTorch's caching allocator held over the run (the trace's
``[memory]`` events, captured with ``profile_memory=True``): allocated and reserved per rank
on the time axis with the step bands, each peak marked and the device's capacity drawn; the
per-rank peaks (``memory_ranks``); what is live at the peak, where the analysis measured it
(``memory_live``). The Overview's peak-memory tile is :func:`peak_tile`. A run without
memory events gets one line saying so, no empty chart or table."""

from __future__ import annotations

import pandas as pd
from dash import html
from profkit.analyzers.report.memoryline import batch_growth, fullest
from profkit.dashboard import ids
from profkit.dashboard.figures import memory as M
from profkit.dashboard.pages import frame
from profkit.dashboard.pages.counters import all_steps
from profkit.dashboard.pages.timeline import base_ns
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import tables as T

TAB = frame.RunTab("memory", "Memory", "memory")
LIVE_TABLE = "memory_live"  # what is live at the peak, per rank, device and op
LIVE_ROWS = 50
NOT_AVAILABLE = ("What is live at the peak: not available (this analysis has no memory_live "
                 "table).")
HINT = ("PyTorch's caching allocator, from the trace's [memory] events: allocated (solid) is "
        "what live tensors use, reserved (dashed) what the allocator holds from the driver; "
        "the star marks each rank's highest allocated point; steps are shaded; the dotted line "
        "is the device's memory.")


def live_at_peak(a) -> pd.DataFrame | None:
    """What is live at the peak as the analysis measured it (its ``memory_live`` table:
    the allocations alive at the allocated peak, by the op that made them), largest first;
    None where the analysis has no such table or it is empty."""
    live = a.table(LIVE_TABLE) if hasattr(a, "table") else pd.DataFrame()
    if live is None or live.empty:
        return None
    size = next((c for c in ("live_bytes", "bytes") if c in live), None)
    return live.sort_values(size, ascending=False, kind="stable") if size else live


def _in_gb(table: pd.DataFrame) -> pd.DataFrame:
    """``*_bytes`` columns as ``*_gb`` (decimal GB, as the reports print memory)."""
    out = table.copy()
    for col in [c for c in out.columns if c.endswith("_bytes")]:
        out[col.removesuffix("_bytes") + "_gb"] = pd.to_numeric(out.pop(col)) / 1e9
    return out


def points(run) -> pd.DataFrame:
    return M.memory_points({r: d.table("memory") for r, d in run.ranks.items()})


def layout(results, run_key: str = "") -> html.Div:
    return frame.run_page(results, run_key, TAB, lambda run, a: body(run, a), keep=True)


def body(run, a) -> list:
    """The chart, the per-rank peaks and what is live at the peak; for a run without GPU
    memory events, one line saying so."""
    pts = points(run)
    if pts.empty:
        return [C.card("Memory", html.P(M.NO_MEMORY, id=ids.M_NONE, className="muted"))]
    ranks = a.table("memory_ranks")
    capacity = ranks["capacity_bytes"].tolist() if "capacity_bytes" in ranks else []
    panels = [frame.panel("GPU memory over time", lambda: C.card(
        "GPU memory over time", C.graph(ids.M_GRAPH, M.memory_figure(
            pts, all_steps(run), base_ns(run), capacity)), html.P(HINT, className="hint")))]
    if not ranks.empty:
        panels.append(frame.panel("Memory per rank", lambda: C.table_card(
            ids.M_RANKS, T.BY_NAME["memory_ranks"], ranks)))
    panels.append(frame.panel("Live at the peak", lambda: live_card(a)))
    return panels


def live_card(a) -> html.Section:
    live = live_at_peak(a)
    if live is None:
        return C.card("Live at the peak", html.P(NOT_AVAILABLE, id=ids.M_LIVE, className="muted"))
    return C.card("Live at the peak", html.Div(
        C.data_table(f"{ids.M_LIVE}-table", _in_gb(live.head(LIVE_ROWS))), id=ids.M_LIVE),
        html.P("the allocations alive at each rank's allocated peak, by the op that made "
               "them, largest first", className="hint"))


def peak_tile(a) -> html.Section:
    """The Overview's tile: the rank-device nearest its capacity (highest reserved) with
    its peak allocated of the capacity, peak reserved, the headroom and how far the batch
    could grow (``batch_headroom_x``, if the step's transient memory scales with it; where
    the headroom finding would say it, at least ``memory_headroom_min_x``)."""
    row = fullest(a)
    if row is None:
        return C.card("Peak memory", html.P(M.NO_MEMORY, className="muted"), id=ids.M_TILE)
    ranks = a.table("memory_ranks")
    cap = float(row["capacity_bytes"])
    alloc, reserved = float(row["peak_allocated_bytes"]), float(row["peak_reserved_bytes"])
    known = pd.notna(cap) and cap > 0
    facts = {f"peak allocated ({alloc / cap:.1%} of the GPU)" if known else "peak allocated":
             f"{alloc / 1e9:.1f} / {cap / 1e9:.1f} GB" if known else f"{alloc / 1e9:.1f} GB",
             "peak reserved": f"{reserved / 1e9:.1f} GB"}
    if known:
        facts["headroom"] = f"{max(cap - reserved, 0) / 1e9:.1f} GB"
    grow = batch_growth(row)
    if grow is not None:
        facts["batch could grow"] = f"~{float(grow):.0f}x"
    where = f"rank {int(row['rank'])}" + (f" of {len(ranks)} rank-devices" if len(ranks) > 1
                                          else "")
    stats = html.Div([html.Div([html.Div(v, className="stat-value"),
                                html.Div(k, className="stat-label")], className="stat")
                      for k, v in facts.items()], className="mem-stats")
    note = ("the allocator's peak over the steps the verdict uses, " + where +
            ("; the batch growth assumes the step's transient memory scales with it"
             if grow is not None else ""))
    return C.card("Peak memory", stats, html.P(note, className="hint"), id=ids.M_TILE)


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB)
