"""A short per-rank summary of a loaded run: what was captured and where GPU time went.

This is not the bottleneck analysis (profkit.analyzers); it is the quick look that
``profkit merge`` and ``profkit summary`` print.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import intervals
from profkit import schema as S
from profkit.model import RankData, Run, step_spans, step_times_ns


def rank_summary(data: RankData) -> dict:
    """Counts and GPU time of one rank. Window: the profiled steps (CPU ranges joined with
    the GPU work they launched; the time between profiler cycles is not in it) when the
    trace has them, else first GPU start to last GPU end. Times in ms."""
    ev = data.events
    gpu = ev[ev[S.KIND].isin(S.GPU_KINDS)]
    row = {
        "rank": data.rank,
        "events": len(ev),
        "gpu_events": len(gpu),
        "steps": len(data.steps),
        "collectives": len(data.collectives),
    }
    times = step_times_ns(data.steps)
    row["step_ms_median"] = float(np.median(times) / 1e6) if len(times) else np.nan
    window = _window(data, gpu)
    window_ns = intervals.total(window)
    row["window_ms"] = window_ns / 1e6
    busy = intervals.intersect(intervals.union(gpu[S.TS_NS], gpu[S.TS_NS] + gpu[S.DUR_NS]), window)
    row["gpu_busy_pct"] = 100.0 * intervals.total(busy) / window_ns if window_ns else np.nan
    for cls in S.CLASSES:
        part = gpu[gpu[S.CLASS] == cls]
        iv = intervals.intersect(intervals.union(part[S.TS_NS], part[S.TS_NS] + part[S.DUR_NS]),
                                 window)
        row[f"{cls}_ms"] = intervals.total(iv) / 1e6
    return row


def _window(data: RankData, gpu: pd.DataFrame) -> intervals.Intervals:
    if len(data.steps):
        return intervals.union(*step_spans(data.steps))
    if len(gpu):
        return intervals.union([gpu[S.TS_NS].min()], [(gpu[S.TS_NS] + gpu[S.DUR_NS]).max()])
    return intervals.union([], [])


def run_summary(run: Run) -> pd.DataFrame:
    return pd.DataFrame([rank_summary(d) for d in run.ranks.values()])


def format_summary(run: Run) -> str:
    table = run_summary(run)
    lines = [f"run {run.path}: world size {run.world_size}, {len(run.ranks)} rank(s) read"]
    cols = ["rank", "steps", "step_ms_median", "events", "gpu_events", "gpu_busy_pct",
            "compute_ms", "communication_ms", "memcpy_ms", "collectives"]
    lines.append(table[cols].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    for note in run.notes:
        lines.append(f"note: {note}")
    for s in run.skipped:
        lines.append(f"skipped: {s.path}: {s.reason}")
    if not any(d.has_gpu for d in run.ranks.values()):
        lines.append("note: no GPU events in this run; GPU time cannot be computed")
    return "\n".join(lines)
