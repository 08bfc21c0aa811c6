"""Server-side shaping of one rank's timeline: lanes (GPU streams, CPU threads), the events
of a time window, and, when the window holds too many events to draw, their busy fraction
per lane and time bin. Pure functions over the event table; times in, ms after ``base_ns``
out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from profkit import schema as S

MAX_EVENTS = 4000  # above this many events in the window, draw busy-fraction bins instead
N_BINS = 400
SKIP_KINDS = (S.KIND_GPU_ANNOTATION,)  # GPU-side copies of CPU ranges: they cover the kernels
TIMELINE_METRICS = ("sm_clock_mhz", "power_w", "gpu_util_pct", "gpm_sm_active_pct",
                    "gpm_tensor_active_pct")


@dataclass
class TimelineView:
    """What the timeline figure draws for one window."""

    lanes: list[str]  # top to bottom
    x0_ms: float
    x1_ms: float
    mode: str  # "events" or "bins"
    n_events: int  # events in the window
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # lane, group, name, start_ms, end_ms
    bins: pd.DataFrame = field(default_factory=pd.DataFrame)  # lane, group, bin_ms, busy (0..1)
    bin_ms: float = 0.0
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # step, start_ms, end_ms
    counters: pd.DataFrame = field(default_factory=pd.DataFrame)  # metric, t_ms, value


def lane_table(events: pd.DataFrame, base_ns: int) -> pd.DataFrame:
    """Events with their lane (``GPU stream N`` / ``CPU thread N``), group (GPU class, or
    CPU kind) and start/end in ms after ``base_ns``."""
    ev = events[~events[S.KIND].isin(SKIP_KINDS)]
    gpu = ev[S.KIND].isin(S.GPU_KINDS).to_numpy()
    lane = np.where(gpu, "GPU stream " + ev[S.STREAM].astype(str),
                    "CPU thread " + ev[S.TID].astype(str))
    group = np.where(gpu, ev[S.CLASS].astype(str), ev[S.KIND].astype(str))
    start = (ev[S.TS_NS].to_numpy() - base_ns) / 1e6
    return pd.DataFrame({"lane": lane, "group": group, "name": ev[S.NAME].astype(str).to_numpy(),
                         "start_ms": start, "end_ms": start + ev[S.DUR_NS].to_numpy() / 1e6})


def lane_order(table: pd.DataFrame) -> list[str]:
    """GPU streams first (by number), then CPU threads, busiest first."""
    counts = table["lane"].value_counts()
    gpu = sorted((x for x in counts.index if x.startswith("GPU")), key=lambda s: int(s.split()[-1]))
    cpu = [x for x in counts.index if not x.startswith("GPU")]
    return gpu + cpu


def busy_fraction(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy time of the intervals inside each bin over the bin width (capped at 1; nested
    intervals count once at most). O((n + bins) log n): the busy time before t is
    sum(max(0, t - start)) - sum(max(0, t - end)), from sorted prefix sums."""
    def covered(points: np.ndarray, t: np.ndarray) -> np.ndarray:
        points = np.sort(points)
        prefix = np.concatenate([[0.0], np.cumsum(points)])
        n = np.searchsorted(points, t, side="right")
        return n * t - prefix[n]

    total = covered(starts, edges) - covered(ends, edges)
    return np.clip(np.diff(total) / np.diff(edges), 0.0, 1.0)


def bin_lanes(table: pd.DataFrame, x0: float, x1: float, n_bins: int = N_BINS) -> pd.DataFrame:
    """Busy fraction per lane, group and bin of [x0, x1) (ms)."""
    edges = np.linspace(x0, x1, n_bins + 1)
    rows = []
    for (lane, group), g in table.groupby(["lane", "group"], sort=False):
        busy = busy_fraction(g["start_ms"].to_numpy(), g["end_ms"].to_numpy(), edges)
        keep = busy > 0
        rows.append(pd.DataFrame({"lane": lane, "group": group, "bin_ms": edges[:-1][keep],
                                  "busy": busy[keep]}))
    if not rows:
        return pd.DataFrame(columns=["lane", "group", "bin_ms", "busy"])
    return pd.concat(rows, ignore_index=True)


def full_range(table: pd.DataFrame, steps: pd.DataFrame) -> tuple[float, float]:
    if not steps.empty:
        return float(steps["start_ms"].min()), float(steps["end_ms"].max())
    if table.empty:
        return 0.0, 1.0
    return float(table["start_ms"].min()), float(table["end_ms"].max())


def step_table(steps: pd.DataFrame, base_ns: int) -> pd.DataFrame:
    end = np.maximum(steps[S.TS_NS] + steps[S.DUR_NS], steps[S.GPU_END_NS])
    return pd.DataFrame({"step": steps[S.STEP].to_numpy(),
                         "start_ms": (steps[S.TS_NS].to_numpy() - base_ns) / 1e6,
                         "end_ms": (end.to_numpy() - base_ns) / 1e6})


def timeline_view(table: pd.DataFrame, steps: pd.DataFrame, counters: pd.DataFrame,
                  base_ns: int, window: tuple[float, float] | None = None,
                  max_events: int = MAX_EVENTS, n_bins: int = N_BINS) -> TimelineView:
    """The view of ``window`` (ms; None: every profiled step). ``table`` from
    :func:`lane_table`; ``steps`` and ``counters`` are the rank's Run tables."""
    st = step_table(steps, base_ns)
    x0, x1 = window or full_range(table, st)
    if x1 <= x0:
        x1 = x0 + 1e-3
    inside = table[(table["end_ms"] >= x0) & (table["start_ms"] <= x1)]
    view = TimelineView(lanes=lane_order(table), x0_ms=x0, x1_ms=x1, mode="events",
                        n_events=len(inside), steps=st)
    if len(inside) > max_events:
        view.mode, view.bin_ms = "bins", (x1 - x0) / n_bins
        view.bins = bin_lanes(inside, x0, x1, n_bins)
    else:
        view.events = inside
    view.counters = counters_in_window(counters, base_ns, x0, x1)
    return view


def counters_in_window(counters: pd.DataFrame, base_ns: int, x0: float, x1: float) -> pd.DataFrame:
    """Samples of the timeline metrics inside [x0, x1] ms plus the last one before and the
    first one after, so that a window shorter than the sampling period (10 Hz NVML against
    10-50 ms steps) still shows the value that held during it."""
    c = counters[counters[S.METRIC].isin(TIMELINE_METRICS)] if not counters.empty else counters
    parts = []
    for metric, g in (c.groupby(S.METRIC, observed=True) if not c.empty else []):
        t = (g[S.TS_NS].to_numpy() - base_ns) / 1e6
        order = np.argsort(t, kind="stable")
        t, v = t[order], g[S.VALUE].to_numpy()[order]
        lo = max(int(np.searchsorted(t, x0, side="right")) - 1, 0)
        hi = min(int(np.searchsorted(t, x1, side="left")) + 1, len(t))
        parts.append(pd.DataFrame({"metric": str(metric), "t_ms": t[lo:hi], "value": v[lo:hi]}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["metric", "t_ms", "value"])


def parse_window(relayout: dict | None) -> tuple[float, float] | None | str:
    """The x window (ms) a plotly relayout event asks for; None when it asks for the full
    range (autorange); "keep" when the event is not about the x axis."""
    if not relayout:
        return "keep"
    if any(k.startswith("xaxis") and k.endswith("autorange") for k in relayout):
        return None
    lo = next((v for k, v in relayout.items() if k.startswith("xaxis") and k.endswith("range[0]")), None)
    hi = next((v for k, v in relayout.items() if k.startswith("xaxis") and k.endswith("range[1]")), None)
    if lo is None or hi is None:
        return "keep"
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError, OverflowError):
        return "keep"
    # NaN, infinite or overflowing widths cannot be binned: not a window a zoom asks for
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo) else "keep"
