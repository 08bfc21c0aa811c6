"""A short per-rank summary of a loaded run: what was captured and where GPU time went.

This is not the bottleneck analysis (profkit.analyzers); it is the quick look that
``profkit merge`` and ``profkit summary`` print.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import intervals
from profkit import schema as S
from profkit.columns import values_in
from profkit.model import RankData, Run, step_spans, step_times_ns
from profkit.textout import PIPE_WIDTH, plural, table_lines, wrap


def rank_summary(data: RankData) -> dict:
    """Counts and GPU time of one rank. Window: the profiled steps (CPU ranges joined with
    the GPU work they launched; the time between profiler cycles is not in it) when the
    trace has them, else first GPU start to last GPU end (one "step"). Counts (``events``,
    ``gpu_events``, ``collectives``) are totals over the trace; ``{class}_ms_per_step`` is
    the GPU time of each kernel class in the window over its steps (busy: overlapped with
    other work or not), the mean per step, as the analysis gives its times;
    ``communication_exposed_ms_per_step`` the communication time no other kernel class
    hides (the analysis' communication part, which on a pipeline also holds the bubble's
    wait for the peer stage); ``step_ms_median`` the median step."""
    ev = data.events
    gpu = ev[values_in(ev[S.KIND], S.GPU_KINDS)]
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
    steps = max(len(data.steps), 1)
    busy_by_class = {}
    for cls in S.CLASSES:
        part = gpu[gpu[S.CLASS] == cls]
        busy_by_class[cls] = intervals.intersect(
            intervals.union(part[S.TS_NS], part[S.TS_NS] + part[S.DUR_NS]), window)
        row[f"{cls}_ms_per_step"] = intervals.total(busy_by_class[cls]) / 1e6 / steps
    hidden = intervals.union_of(*(busy_by_class[c] for c in S.CLASSES
                                  if c != S.CLS_COMMUNICATION))
    exposed = intervals.subtract(busy_by_class[S.CLS_COMMUNICATION], hidden)
    row["communication_exposed_ms_per_step"] = intervals.total(exposed) / 1e6 / steps
    return row


def _window(data: RankData, gpu: pd.DataFrame) -> intervals.Intervals:
    if len(data.steps):
        return intervals.union(*step_spans(data.steps))
    if len(gpu):
        return intervals.union([gpu[S.TS_NS].min()], [(gpu[S.TS_NS] + gpu[S.DUR_NS]).max()])
    return intervals.union([], [])


def run_summary(run: Run) -> pd.DataFrame:
    return pd.DataFrame([rank_summary(d) for d in run.ranks.values()])


# What format_summary prints: (column, header), and what the headers mean.
SHOWN = (("rank", "rank"), ("steps", "steps"), ("step_ms_median", "step ms (median)"),
         ("events", "events"), ("gpu_events", "GPU events"), ("gpu_busy_pct", "% GPU busy"),
         ("compute_ms_per_step", "compute busy ms/step"),
         ("communication_ms_per_step", "comms busy ms/step"),
         ("communication_exposed_ms_per_step", "comms exposed ms/step"),
         ("memcpy_ms_per_step", "transfer busy ms/step"), ("collectives", "collectives"))
LEGEND = ("ms/step: GPU time per step (the mean over the profiled steps, or over the one "
          "window of a trace without steps); busy: the time the class's kernels ran, hidden "
          "under other work or not; comms exposed: communication kernels' time not hidden "
          "under compute or copies, what `profkit analyze` charges to communication (its "
          "share of the step); events and collectives: totals over the trace")
MS_DIGITS = 2  # ms/step columns: an exposed 0.11 ms must not read 0.1 beside a 1.3 busy


def format_summary(run: Run, width: int = PIPE_WIDTH) -> str:
    """The summary as text for ``width`` columns."""
    table = run_summary(run)
    lines = [f"run {run.path}: world size {run.world_size}, "
             f"{plural(len(run.ranks), 'rank')} read"]
    rows = [[_cell(v, MS_DIGITS if col.endswith("_ms_per_step") else 1) for v in table[col]]
            for col, _ in SHOWN]
    lines += table_lines([head for _, head in SHOWN], [list(r) for r in zip(*rows)], width)
    lines += wrap(f"({LEGEND})", width, "  ", "   ")
    lines += [f"note: {note}" for note in run.notes]  # one line each, to grep for
    lines += [f"skipped: {s.path}: {s.reason}" for s in run.skipped]
    if not any(d.has_gpu for d in run.ranks.values()):
        lines.append("note: no GPU events in this run; GPU time cannot be computed")
    return "\n".join(lines)


def _cell(value, digits: int = 1) -> str:
    if isinstance(value, (float, np.floating)):
        return "-" if not np.isfinite(value) else f"{value:.{digits}f}"
    return str(value)
