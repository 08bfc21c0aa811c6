"""Per-rank lane tables of the timeline, built once per rank (the page caches them).

A rank's lanes, top to bottom: its GPU streams; its GPU-idle cause lane (the idle parts of
the charged-time model, :mod:`profkit.analyzers.measure.charge`, so that a launch-bound step reads
as a purple lane even where the kernels are too short to see); then its CPU threads, named
as the trace's metadata names them, one row per nesting depth (drawn on demand; a window
shows only the rows it has events on). Each lane also belongs to a *row* of the compact
view (one row per rank and layer: GPU, idle cause, CPU) used when many ranks are shown.

Times are ms after the run's origin (:func:`origin_ns`). Covered time is kept per lane
(and per row) and group as disjoint intervals with prefix sums (:class:`Coverage`), so a
zoom bins any window in O(bins log n) without touching the events again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import charged_intervals
from profkit.analyzers.measure.steps import step_windows

from profkit import intervals as iv
from profkit import schema as S
from profkit.classify.names import short_kernel_names
from profkit.model import RankData, step_spans

log = logging.getLogger(__name__)
GPU, CAUSE, CPU = "gpu", "cause", "cpu"  # lane layers, in drawing order within a rank
LAYER_TITLES = {GPU: "GPU", CAUSE: "GPU idle cause", CPU: "CPU"}
IDLE_CAUSES = ("cpu_launch", "host_work", "data_loading", "host_sync", "idle_other")
ALL = ""  # the group key of a lane's total covered time
MAX_DEPTH = 7  # CPU ranges nested deeper share the row of this depth
CPU_KINDS = (S.KIND_CPU_OP, S.KIND_ANNOTATION, S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_PYTHON,
             S.KIND_SYNC, S.KIND_OTHER)
TIMELINE_METRICS = ("gpu_util_pct", "sm_clock_mhz", "power_w", "gpm_sm_active_pct",
                    "gpm_tensor_active_pct")
# A trace's own counters (schema.TRACE_METRIC_PREFIX) follow NVML's, the first few by name:
# each is a row of the figure, and the Counters page shows every one.
MAX_TRACE_METRICS = 4


@dataclass
class Coverage:
    """A disjoint, sorted interval set (ns after the origin) with the prefix sums of its
    lengths: the covered time before any instant is one binary search away."""

    starts_ns: np.ndarray
    ends_ns: np.ndarray
    cum_ns: np.ndarray  # cum_ns[k]: length of the first k intervals

    @classmethod
    def of(cls, starts_ns, ends_ns) -> Coverage:
        s, e = iv.union(starts_ns, ends_ns)
        return cls(s, e, np.concatenate([[0], np.cumsum(e - s)]))

    def covered_before(self, t_ns: np.ndarray) -> np.ndarray:
        """Covered ns in (-inf, t) for each t."""
        k = np.searchsorted(self.starts_ns, t_ns, side="right")
        if len(self.starts_ns) == 0:
            return np.zeros(len(t_ns))
        last_end = self.ends_ns[np.maximum(k - 1, 0)]
        partial = np.where(k > 0, np.maximum(last_end - t_ns, 0), 0)  # the one reaching past t
        return self.cum_ns[k] - partial

    def per_bin_ns(self, edges_ns: np.ndarray) -> np.ndarray:
        """Covered ns inside each bin [edges[i], edges[i + 1])."""
        return np.diff(self.covered_before(np.asarray(edges_ns, dtype=np.float64)))


@dataclass
class RankLanes:
    """One rank's timeline: events per layer, lane order, covered time, steps, counters."""

    rank: int
    events: dict[str, pd.DataFrame]  # layer -> lane, group, name, start/end_ns, start/end_ms
    lanes: list[str]  # top to bottom
    layer_of: dict[str, str]  # lane or row -> GPU / CAUSE / CPU
    cover: dict[tuple[str, str], Coverage]  # (lane or row, group or ALL) -> covered time
    steps: pd.DataFrame  # step, start_ms, end_ms, used, reason (disjoint windows)
    counters: pd.DataFrame  # metric, t_ms, value (TIMELINE_METRICS only, time order)
    span_ms: tuple[float, float] = (0.0, 1.0)  # the rank's profiled window
    # layer -> end_ns sorted: how many events a window holds, in O(log n)
    sorted_ends: dict[str, np.ndarray] = field(default_factory=dict)

    def rows(self) -> list[str]:
        """The compact view's rows of this rank (one per layer it has), top to bottom."""
        return list(dict.fromkeys(row_name(self.rank, self.layer_of[lane]) for lane in self.lanes))

    def count_in(self, layers, x0_ns: float, x1_ns: float) -> int:
        """Events of ``layers`` that overlap [x0, x1]: all but those starting after x1 and
        those ending before x0 (no event does both)."""
        n = 0
        for layer in layers:
            if layer in self.events:
                starts = self.events[layer]["start_ns"].to_numpy()
                n += int(np.searchsorted(starts, x1_ns, side="right")
                         - np.searchsorted(self.sorted_ends[layer], x0_ns, side="left"))
        return n


def row_name(rank: int, layer: str) -> str:
    return f"rank {rank} · {LAYER_TITLES[layer]}"


def origin_ns(run) -> int:
    """The run's time origin: the start of the earliest step of any rank (its CPU range or
    its GPU work, whichever began first), else the earliest event."""
    starts = [int(step_spans(d.steps)[0].min()) for d in run.ranks.values() if len(d.steps)]
    if not starts:
        starts = [int(d.events[S.TS_NS].min()) for d in run.ranks.values() if len(d.events)]
    return min(starts) if starts else 0


def rank_windows(data: RankData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, step) of the rank's disjoint step windows (steps.step_windows);
    without steps, one window -1 from the first GPU start to the last GPU end."""
    if len(data.steps):
        return step_windows(data.steps)
    gpu = data.gpu_events
    if gpu.empty:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    lo, hi = int(gpu[S.TS_NS].min()), int((gpu[S.TS_NS] + gpu[S.DUR_NS]).max())
    return np.array([lo]), np.array([hi]), np.array([-1])


def nesting_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Depth of each range among the ranges enclosing it (0: outermost), for ranges sorted
    by start, longest first at equal starts. A range is open at the start of the i-th one
    unless it ended by then, and every range that ended by then came before it: so the
    depth is i minus the ranges that ended. Empty ranges count as 1 ns long."""
    ends = np.maximum(ends, starts + 1)
    closed = np.searchsorted(np.sort(ends), starts, side="right")
    return np.arange(len(starts)) - closed


def _frame(layer: str, codes: np.ndarray, names: list[str], group, name, start_ns,
           end_ns, source=None) -> pd.DataFrame:
    """A layer's events, sorted by start, lanes as a categorical of ``names``; ``source``:
    each event's row in the rank's events table (-1: none, the cause lane's segments)."""
    n = len(codes)
    frame = pd.DataFrame({"lane": pd.Categorical.from_codes(codes, names),
                          "group": pd.Categorical(group), "name": pd.Categorical(name),
                          "start_ns": np.asarray(start_ns, np.int64),
                          "end_ns": np.asarray(end_ns, np.int64),
                          "source": np.full(n, -1, np.int64) if source is None
                          else np.asarray(source, np.int64)})
    frame = frame.sort_values("start_ns", kind="stable", ignore_index=True)
    frame["start_ms"], frame["end_ms"] = frame["start_ns"] / 1e6, frame["end_ns"] / 1e6
    return frame


def gpu_rows(rank: int, events: pd.DataFrame, origin: int) -> pd.DataFrame:
    """Kernels, copies and memsets on ``rank {R} · GPU stream {N}`` lanes (by stream
    number), grouped by class, named as people read them (profkit/classify/names.py: a templated
    kernel's full name is ~150 characters, sent twice per event on every zoom). GPU
    annotations are left out: they are copies of CPU ranges drawn over the kernels."""
    rows = np.flatnonzero(events[S.KIND].isin(S.GPU_KINDS).to_numpy())
    gpu = events.iloc[rows]
    streams, codes = np.unique(gpu[S.STREAM].to_numpy(), return_inverse=True)
    start = gpu[S.TS_NS].to_numpy(np.int64) - origin
    names = pd.Categorical(gpu[S.NAME].astype(str))
    short = pd.Categorical.from_codes(names.codes, short_kernel_names(list(names.categories)))
    return _frame(GPU, codes, [f"rank {rank} · GPU stream {s}" for s in streams],
                  gpu[S.CLASS].array, short, start, start + gpu[S.DUR_NS].to_numpy(np.int64),
                  rows)


def thread_labels(pids: np.ndarray, tids: np.ndarray, names: dict[str, str]) -> list[str]:
    """Each thread's name as the trace's metadata gives it (``names``: {"pid:tid": name},
    Kineto writes ``thread 1099 (pt_autograd_0)``), else ``thread <tid>``; a name that two
    threads share gets the tid."""
    labels = [names.get(f"{p}:{t}") or f"thread {t}" for p, t in zip(pids, tids)]
    shared = {lab for lab in labels if labels.count(lab) > 1}
    return [f"{lab} ({t})" if lab in shared else lab for lab, t in zip(labels, tids)]


def cpu_rows(rank: int, events: pd.DataFrame, origin: int,
             thread_names: dict[str, str] | None = None) -> pd.DataFrame:
    """Host ranges on ``rank {R} · {thread} · depth {d}`` lanes (:func:`thread_labels`):
    nested ranges (step annotation > module > op > launch call) stacked one row per depth,
    the busiest thread first. The profiler's own span (category ``Trace``, the whole
    capture on a thread of its own) is left out."""
    mask = events[S.KIND].isin(CPU_KINDS).to_numpy() & (events[S.CAT].astype(str) != "Trace").to_numpy()
    rows = np.flatnonzero(mask)
    cpu = events.iloc[rows]
    tid, ts = cpu[S.TID].to_numpy(), cpu[S.TS_NS].to_numpy(np.int64)
    pid = cpu[S.PID].to_numpy()
    end = ts + cpu[S.DUR_NS].to_numpy(np.int64)
    order = np.lexsort((-end, ts, tid))
    tid, ts, end, pid, rows = tid[order], ts[order], end[order], pid[order], rows[order]
    depth = np.zeros(len(ts), dtype=np.int64)
    bounds = np.flatnonzero(np.diff(tid)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(ts)]):
        depth[lo:hi] = nesting_depth(ts[lo:hi], end[lo:hi])
    threads, first, thread_code = np.unique(tid, return_index=True, return_inverse=True)
    labels = thread_labels(pid[first], threads, thread_names or {})
    rank_of_thread = np.argsort(np.argsort(-np.bincount(thread_code, weights=end - ts),
                                           kind="stable"), kind="stable")
    key = rank_of_thread[thread_code] * (MAX_DEPTH + 1) + np.minimum(depth, MAX_DEPTH)
    keys, codes = np.unique(key, return_inverse=True)  # sorted: busiest thread, then depth
    thread_at = np.argsort(rank_of_thread)  # busyness order -> thread
    names = [f"rank {rank} · {labels[thread_at[k // (MAX_DEPTH + 1)]]} · depth {k % (MAX_DEPTH + 1)}"
             for k in keys]
    return _frame(CPU, codes, names, cpu[S.KIND].array.take(order),
                  cpu[S.NAME].array.take(order), ts - origin, end - origin, rows)


def cause_rows(data: RankData, origin: int) -> pd.DataFrame:
    """The rank's GPU-idle time inside its step windows, one segment per instant's cause
    (cpu_launch, host_work, data_loading, host_sync, idle_other) as analyzers/measure/charge.py charges it."""
    lo, hi, _ = rank_windows(data)
    empty = np.empty(0, np.int64)
    if len(lo) == 0 or not data.has_gpu:
        return _frame(CAUSE, empty, [], [], [], empty, empty)
    parts = charged_intervals(data, int(lo.min()), int(hi.max()))
    cut = [iv.intersect(parts[p], (lo, hi)) for p in IDLE_CAUSES]  # between cycles: no step
    group = np.concatenate([np.full(len(s), p, dtype=object) for p, (s, _) in zip(IDLE_CAUSES, cut)])
    starts = np.concatenate([s for s, _ in cut]) - origin
    ends = np.concatenate([e for _, e in cut]) - origin
    return _frame(CAUSE, np.zeros(len(starts), np.int64), [f"rank {data.rank} · GPU idle cause"],
                  group, group, starts, ends)


def coverage(rank: int, layer: str, frame: pd.DataFrame) -> dict[tuple[str, str], Coverage]:
    """Covered time per (lane, group), per lane, per (row, group) and per row of a layer."""
    out: dict[tuple[str, str], Coverage] = {}
    row = row_name(rank, layer)
    for (lane, group), g in frame.groupby(["lane", "group"], sort=False, observed=True):
        out[(str(lane), str(group))] = Coverage.of(g["start_ns"], g["end_ns"])
    for lane, g in frame.groupby("lane", sort=False, observed=True):
        out[(str(lane), ALL)] = Coverage.of(g["start_ns"], g["end_ns"])
    for group, g in frame.groupby("group", sort=False, observed=True):
        out[(row, str(group))] = Coverage.of(g["start_ns"], g["end_ns"])
    out[(row, ALL)] = Coverage.of(frame["start_ns"], frame["end_ns"])
    return out


def step_table(data: RankData, origin: int, status: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rank's disjoint step windows (ms) with whether the verdict used each step and
    why not (``status``: the analysis' step_breakdown rows of this rank)."""
    start, end, step = rank_windows(data)
    table = pd.DataFrame({"step": step, "start_ms": (start - origin) / 1e6,
                          "end_ms": (end - origin) / 1e6, "used": True, "reason": ""})
    if status is not None and len(status):
        known = status.drop_duplicates("step").set_index("step")
        table["used"] = table["step"].map(known["used"]).fillna(True).astype(bool)
        table["reason"] = table["step"].map(known["excluded_reason"]).fillna("").astype(str)
    return table


def timeline_metrics(names) -> list[str]:
    """The metrics the timeline draws, of those present: NVML's of :data:`TIMELINE_METRICS`,
    then up to :data:`MAX_TRACE_METRICS` of the trace's own counters."""
    present = set(names)
    trace = sorted(m for m in present if m.startswith(S.TRACE_METRIC_PREFIX))
    return [m for m in TIMELINE_METRICS if m in present] + trace[:MAX_TRACE_METRICS]


def counter_table(counters: pd.DataFrame, origin: int) -> pd.DataFrame:
    """The timeline's metrics (:func:`timeline_metrics`) in time order: metric, t_ms, value."""
    if len(counters):
        names = counters[S.METRIC].astype(str)
        counters = counters[names.isin(timeline_metrics(names.unique())).to_numpy()]
    c = counters
    out = pd.DataFrame({"metric": c[S.METRIC].astype(str).to_numpy() if len(c) else [],
                        "t_ms": (c[S.TS_NS].to_numpy() - origin) / 1e6 if len(c) else [],
                        "value": c[S.VALUE].to_numpy() if len(c) else []})
    return out.sort_values(["metric", "t_ms"], kind="stable", ignore_index=True)


def rank_lanes(data: RankData, origin: int, status: pd.DataFrame | None = None) -> RankLanes:
    """Everything the timeline draws of one rank (``status``: its step_breakdown rows)."""
    built = {GPU: gpu_rows(data.rank, data.events, origin), CAUSE: cause_rows(data, origin),
             CPU: cpu_rows(data.rank, data.events, origin, data.meta.get("thread_names"))}
    events = {layer: f for layer, f in built.items() if len(f)}
    lanes, layer_of, cover = [], {}, {}
    for layer, frame in events.items():
        mine = [str(c) for c in frame["lane"].cat.categories]  # in drawing order
        lanes += mine
        layer_of.update(dict.fromkeys(mine + [row_name(data.rank, layer)], layer))
        cover.update(coverage(data.rank, layer, frame))
    steps = step_table(data, origin, status)
    starts = [f["start_ms"].iloc[0] for f in events.values()]
    ends = [f["end_ms"].max() for f in events.values()]
    span = ((float(steps["start_ms"].min()), float(steps["end_ms"].max())) if len(steps) else
            (float(min(starts)), float(max(ends))) if starts else (0.0, 1.0))
    sorted_ends = {layer: np.sort(f["end_ns"].to_numpy()) for layer, f in events.items()}
    return RankLanes(data.rank, events, lanes, layer_of, cover, steps,
                     counter_table(data.counters, origin), span, sorted_ends)
