"""What the timeline draws for one time window over several ranks: the lanes, and per lane
either every event of the window or, when the window holds more than ``MAX_EVENTS``, the
busy fraction per bin: the bin's covered time over its length (never a max or a count),
coloured by the group that covers most of it. Above ``COMPACT_ABOVE`` ranks each rank
is one row per layer (GPU, idle cause, CPU), always binned; otherwise a CPU thread shows
only the depth rows that the window has events on. Pure functions over
:class:`~profkit.dashboard.timeline.data.RankLanes`; times in ms after the run's origin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from profkit.dashboard.timeline.data import ALL, CAUSE, CPU, GPU, RankLanes

MAX_EVENTS = 4000  # above this many events in the window, draw busy-fraction bins instead
N_BINS = 400
COMPACT_ABOVE = 8  # more ranks than this: one row per rank and layer
BIN_COLUMNS = ["lane", "bin_ms", "busy", "group"]
EVENT_COLUMNS = ["lane", "group", "name", "start_ms", "end_ms", "rank", "layer", "row"]


@dataclass
class TimelineView:
    """What the timeline figure draws for one window."""

    ranks: list[int]  # in the order asked for (the straggler first)
    lanes: list[str]  # top to bottom
    rank_of: dict[str, int]  # lane -> rank
    layer_of: dict[str, str]  # lane -> GPU / CAUSE / CPU
    x0_ms: float
    x1_ms: float
    full_ms: tuple[float, float]  # the span of every profiled step of the ranks shown
    mode: str  # "events" or "bins"
    compact: bool
    n_events: int  # events of the lanes shown that overlap the window
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # EVENT_COLUMNS
    bins: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=BIN_COLUMNS))
    bin_ms: float = 0.0
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # rank, step, start/end_ms, used, reason
    counters: pd.DataFrame = field(default_factory=pd.DataFrame)  # rank, metric, t_ms, value, inside
    periods_ms: dict = field(default_factory=dict)  # (rank, metric) -> median sample period
    links: pd.DataFrame = field(default_factory=pd.DataFrame)  # see timeline.links.links_in_window
    flows: pd.DataFrame = field(default_factory=pd.DataFrame)  # see timeline.flows.launch_flows
    n_links: int = 0  # matched collectives starting in the window (some may not be drawn)
    phases: pd.DataFrame = field(default_factory=pd.DataFrame)  # see timeline.phases.view_phases


def layers_shown(show_cpu: bool) -> tuple[str, ...]:
    return (GPU, CAUSE, CPU) if show_cpu else (GPU, CAUSE)


def timeline_view(ranks: list[RankLanes], window: tuple[float, float] | None = None,
                  show_cpu: bool = False, max_events: int = MAX_EVENTS, n_bins: int = N_BINS,
                  compact_above: int = COMPACT_ABOVE) -> TimelineView:
    """The view of ``window`` (ms; None: every profiled step of these ranks)."""
    layers = layers_shown(show_cpu)
    compact = len(ranks) > compact_above
    lanes, rank_of, layer_of = [], {}, {}
    for r in ranks:
        for lane in (r.rows() if compact else r.lanes):
            if r.layer_of[lane] in layers:
                lanes.append(lane)
                rank_of[lane], layer_of[lane] = r.rank, r.layer_of[lane]
    full = (min((r.span_ms[0] for r in ranks), default=0.0),
            max((r.span_ms[1] for r in ranks), default=1.0))
    x0, x1 = clamp_window(window, full)
    n = sum(r.count_in(layers, x0 * 1e6, x1 * 1e6) for r in ranks)
    view = TimelineView([r.rank for r in ranks], lanes, rank_of, layer_of, x0, x1, full,
                        "bins" if compact or n > max_events else "events", compact, n)
    if view.mode == "bins":
        view.bin_ms = (x1 - x0) / n_bins
        view.bins = bin_lanes(ranks, lanes, rank_of, x0, x1, n_bins)
    else:
        view.events = events_in_window(ranks, layers, x0, x1)
    if not compact:  # a thread's depth rows: those the window has events on
        drawn = set((view.bins if view.mode == "bins" else view.events)["lane"])
        view.lanes = [lane for lane in lanes if layer_of[lane] != CPU or lane in drawn]
    view.steps = steps_in_window(ranks, x0, x1)
    view.counters, view.periods_ms = counters_in_window(ranks, x0, x1)
    return view


def clamp_window(window: tuple[float, float] | None, full: tuple[float, float]
                 ) -> tuple[float, float]:
    """``window`` kept within one run length of the run on either side (a zoom-out far past
    the run asks for nothing more) and at least 1 ns wide; None: ``full``."""
    if window is None:
        return full
    reach = max(full[1] - full[0], 1e-3)
    x0 = min(max(window[0], full[0] - reach), full[1] + reach)
    x1 = min(max(window[1], full[0] - reach), full[1] + reach)
    return (x0, x1) if x1 > x0 else (x0, x0 + 1e-6)


def events_in_window(ranks: list[RankLanes], layers, x0: float, x1: float) -> pd.DataFrame:
    """The events of ``layers`` overlapping [x0, x1] ms, each with its rank, layer and
    row in the rank's layer table (what a click on it sends back: :mod:`.event`)."""
    parts = []
    for r in ranks:
        for layer in layers:
            ev = r.events.get(layer)
            if ev is None:
                continue
            head = ev.iloc[: int(np.searchsorted(ev["start_ms"].to_numpy(), x1, side="right"))]
            mine = head.loc[head["end_ms"].to_numpy() >= x0, EVENT_COLUMNS[:5]]
            parts.append(mine.assign(rank=r.rank, layer=layer, row=mine.index.to_numpy()))
    if not parts:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    out = pd.concat([p.astype({c: str for c in EVENT_COLUMNS[:3]}) for p in parts],
                    ignore_index=True)
    return out


def bin_lanes(ranks: list[RankLanes], lanes: list[str], rank_of: dict[str, int],
              x0: float, x1: float, n_bins: int = N_BINS) -> pd.DataFrame:
    """Per lane and bin of [x0, x1) ms: ``busy`` (covered time of the lane over the bin
    length, 0..1) and the ``group`` covering most of the bin. Bins where the lane is idle
    are left out."""
    edges_ms = np.linspace(x0, x1, n_bins + 1)
    edges_ns, width_ns = edges_ms * 1e6, np.diff(edges_ms * 1e6)
    by_rank = {r.rank: r for r in ranks}
    frames = []
    for lane in lanes:
        r = by_rank[rank_of[lane]]
        total = r.cover[(lane, ALL)].per_bin_ns(edges_ns) / width_ns
        groups = [g for (name, g) in r.cover if name == lane and g != ALL]
        per_group = np.stack([r.cover[(lane, g)].per_bin_ns(edges_ns) for g in groups])
        top = per_group.argmax(axis=0)
        keep = total > 1e-9
        frames.append(pd.DataFrame({
            "lane": lane, "bin_ms": edges_ms[:-1][keep], "busy": np.clip(total[keep], 0, 1),
            "group": np.array(groups, dtype=object)[top[keep]]}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=BIN_COLUMNS)


def steps_in_window(ranks: list[RankLanes], x0: float, x1: float) -> pd.DataFrame:
    parts = [r.steps.assign(rank=r.rank) for r in ranks if len(r.steps)]
    if not parts:
        return pd.DataFrame(columns=["rank", "step", "start_ms", "end_ms", "used", "reason"])
    steps = pd.concat(parts, ignore_index=True)
    return steps[(steps["end_ms"] >= x0) & (steps["start_ms"] <= x1)].reset_index(drop=True)


def counters_in_window(ranks: list[RankLanes], x0: float, x1: float) -> tuple[pd.DataFrame, dict]:
    """Per rank and metric: the samples inside [x0, x1] ms (``inside``) plus the last one
    before and the first one after, so a window shorter than the sample period still shows
    the value held across it; and each series' median sample period (ms)."""
    parts, periods = [], {}
    for r in ranks:
        for metric, g in r.counters.groupby("metric", sort=False):
            t, v = g["t_ms"].to_numpy(), g["value"].to_numpy()
            lo = max(int(np.searchsorted(t, x0, side="left")) - 1, 0)
            hi = min(int(np.searchsorted(t, x1, side="right")) + 1, len(t))
            parts.append(pd.DataFrame({"rank": r.rank, "metric": metric, "t_ms": t[lo:hi],
                                       "value": v[lo:hi],
                                       "inside": (t[lo:hi] >= x0) & (t[lo:hi] <= x1)}))
            periods[(r.rank, metric)] = float(np.median(np.diff(t))) if len(t) > 1 else math.nan
    if not parts:
        return pd.DataFrame(columns=["rank", "metric", "t_ms", "value", "inside"]), periods
    return pd.concat(parts, ignore_index=True), periods


def parse_window(relayout: dict | None) -> tuple[float, float] | None | str:
    """The x window (ms) a plotly relayout event asks for: a zoom or pan (``xaxis.range[0]``
    and ``[1]``), a reset to a range (``xaxis.range``: [lo, hi], what a double-click sends
    when the figure set the range), on any x axis of the subplots; None for the full range
    (``xaxis.autorange``); "keep" when the event is not about the x axis or names no usable
    window."""
    if not isinstance(relayout, dict) or not relayout:
        return "keep"
    items = [(k, v) for k, v in relayout.items() if isinstance(k, str) and k.startswith("xaxis")]
    if any(k.endswith(".autorange") and v is True for k, v in items):
        return None
    lo = next((v for k, v in items if k.endswith(".range[0]")), None)
    hi = next((v for k, v in items if k.endswith(".range[1]")), None)
    pair = next((v for k, v in items if k.endswith(".range")), None)
    if (lo is None or hi is None) and isinstance(pair, list) and len(pair) == 2:
        lo, hi = pair
    return _finite_window(lo, hi)


def _finite_window(lo, hi) -> tuple[float, float] | str:
    if isinstance(lo, bool) or isinstance(hi, bool) or not isinstance(lo, (int, float, str)) \
            or not isinstance(hi, (int, float, str)):
        return "keep"
    try:
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError, OverflowError):
        return "keep"
    # NaN, infinite or overflowing widths cannot be binned: not a window a zoom asks for
    ok = math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo)
    return (min(lo, hi), max(lo, hi)) if ok else "keep"
