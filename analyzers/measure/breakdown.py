"""Where each step's time goes: every instant of a step charged to exactly one part
(:mod:`profkit.analyzers.measure.charge`), per step and per rank, over the steps that speak for the
steady state (:mod:`profkit.analyzers.measure.steps`).

The parts of a step sum to its time (``steps.step_windows``). A rank's fractions and
primary part use only its *used* steps: the first and last recorded steps and one-off steps
are left out (``excluded_reason`` says why) unless ``--steps`` names the steps to use.
Without ``ProfilerStep#`` ranges the window is first GPU start to last GPU end, minus
one-off host calls (``steps.one_off_spans``) and compilation (:mod:`.compilation`), as one
step numbered -1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import (
    AFTER_SYNC,
    BLOCKING_COPY,
    OVERLAP,
    charged_intervals,
)
from profkit.analyzers.measure.compilation import (
    COMPILE_NS,
    compile_spans,
    rank_compile_ranges,
    window_compilation,
)
from profkit.analyzers.measure.health import rank_health
from profkit.analyzers.measure.hostwork import host_work_where
from profkit.analyzers.measure.idle_code import idle_code
from profkit.analyzers.measure.shapesetup import shape_setup
from profkit.analyzers.measure.steps import (
    REASON,
    USED,
    capture_spans,
    choose_steps,
    one_off_spans,
    step_windows,
)
from profkit.analyzers.measure.stepwork import USED_WORK_TABLES, used_step_work
from profkit.analyzers.options import DEFAULT_OPTIONS, AnalysisOptions
from profkit.analyzers.parts import HOST_SIDE, PARTS
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import values_in
from profkit.model import RankData, Run

VERDICT_CLASSES = PARTS  # every part can bound a step
CAPTURE = "capture_ns"
ONE_OFF_COLUMNS = ("rank", "name", S.TS_NS, S.DUR_NS, "inner", "inner_ns")


def step_columns() -> list[str]:
    """The columns of ``step_breakdown``: one per part (ns), between the step's and the
    views'; a function, so that it follows the part table (parts.py)."""
    return ["rank", S.STEP, "step_ns", *PARTS, BLOCKING_COPY, AFTER_SYNC, OVERLAP, CAPTURE,
            COMPILE_NS, USED, REASON]


def _windows(data: RankData, gpu: pd.DataFrame, compiling: iv.Intervals
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame]:
    """(starts, ends, step numbers, one-off calls cut out) of the windows to break down."""
    if len(data.steps):
        starts, ends, numbers = step_windows(data.steps)
        return starts, ends, numbers, data.events.iloc[:0]
    lo, hi = gpu_span(gpu)
    slow = one_off_spans(data.events, lo, hi)
    slow_spans = iv.union(slow[S.TS_NS], slow[S.TS_NS] + slow[S.DUR_NS])
    cut = iv.complement(iv.union_of(slow_spans, compiling), lo, hi)
    if not len(cut[0]):  # nothing but compilation: keep it, for the steps to say so
        cut = iv.complement(slow_spans, lo, hi)
    return cut[0], cut[1], np.full(len(cut[0]), -1), slow


def gpu_span(gpu: pd.DataFrame) -> tuple[int, int]:
    """(first GPU start, last GPU end) in ns: the window of a trace without steps."""
    return int(gpu[S.TS_NS].min()), int((gpu[S.TS_NS] + gpu[S.DUR_NS]).max())


def rank_steps(data: RankData, opts: AnalysisOptions = DEFAULT_OPTIONS,
               th: Thresholds = DEFAULT, by_thread: dict | None = None,
               one_offs: list | None = None, cut_step: int | None = None) -> pd.DataFrame:
    """One row per step: step_ns and the ns charged to each part (summing to step_ns), the
    GPU-busy share of host_sync, hidden communication, graph capture and compile time, and
    whether the step is used for the rank's verdict (with the reason when not)."""
    gpu = data.gpu_events
    if gpu.empty:  # a CPU-only trace: there is no GPU time to break down
        return pd.DataFrame(columns=step_columns())
    compiling = compile_spans(rank_compile_ranges(data))
    starts, ends, numbers, slow = _windows(data, gpu, compiling)
    if one_offs is not None:
        one_offs.append(slow)
    if not len(starts):  # no window has any length: every event at one instant, 0 ns long
        return pd.DataFrame(columns=step_columns())
    parts = charged_intervals(data, int(starts.min()), int(ends.max()), by_thread)
    table = pd.DataFrame({  # built whole: each column added one by one costs an index insert
        "rank": data.rank, S.STEP: numbers, "step_ns": ends - starts,
        **{part: iv.covered_each(parts[part], starts, ends)
           for part in (*PARTS, BLOCKING_COPY, AFTER_SYNC, OVERLAP)},
        CAPTURE: iv.covered_each(capture_spans(data.events), starts, ends),
        COMPILE_NS: iv.covered_each(compiling, starts, ends)})
    if not len(data.steps):
        table = table.groupby(["rank", S.STEP], as_index=False).sum()
    used, reasons = choose_steps(table, table[CAPTURE].to_numpy(), opts.steps,
                                 th.step_outlier_frac, table[COMPILE_NS].to_numpy(),
                                 th.compile_step_frac, cut_step)
    table[USED], table[REASON] = used, reasons
    if by_thread is not None:
        keep = iv.union(starts[np.isin(numbers, table.loc[used, S.STEP])],
                        ends[np.isin(numbers, table.loc[used, S.STEP])])
        for key, ivs in by_thread.items():
            by_thread[key] = iv.intersect(ivs, keep)
    return table[step_columns()]


def rank_compilation(data: RankData) -> pd.DataFrame:
    """Compilation per step of one rank (:func:`.compilation.window_compilation`); without
    steps, over the whole window as step -1 (where it is cut out of the breakdown)."""
    if len(data.steps):
        starts, ends, numbers = step_windows(data.steps)
    else:
        gpu = data.gpu_events
        if gpu.empty:
            return window_compilation(rank_compile_ranges(data), np.empty(0), np.empty(0),
                                      np.empty(0), data.rank)
        lo, hi = gpu_span(gpu)
        starts, ends, numbers = np.array([lo]), np.array([hi]), np.array([-1])
    return window_compilation(rank_compile_ranges(data), starts, ends, numbers, data.rank)


def stream_table(data: RankData) -> pd.DataFrame:
    """Per stream of one rank: GPU time by class in the profiled steps (ns) and op count
    (the classes a stream ran, in category order; streams whose ops all lack a class are
    left out)."""
    ev = data.events
    rows = values_in(ev[S.KIND], S.GPU_KINDS)
    if len(data.steps):
        rows &= ev[S.STEP].to_numpy() >= 0
    cls, stream = ev[S.CLASS].array.codes[rows], ev[S.STREAM].to_numpy()[rows]
    named = cls >= 0
    streams, at = np.unique(stream[named], return_inverse=True)
    used, column = np.unique(cls[named], return_inverse=True)
    ns = np.zeros((len(streams), len(used)), dtype=np.int64)
    np.add.at(ns, (at, column), ev[S.DUR_NS].to_numpy()[rows][named])
    table = pd.DataFrame(ns, columns=[f"{c}_ns" for c in ev[S.CLASS].dtype.categories[used]])
    table.insert(0, S.STREAM, streams)
    every, ops = np.unique(stream, return_counts=True)
    table["ops"] = ops[np.searchsorted(every, streams)]
    table["busy_ns"] = ns.sum(axis=1)
    return table.assign(rank=data.rank)


def compute_subclasses(data: RankData) -> pd.DataFrame:
    """Compute kernel time in the profiled steps by sub-class (gemm, attention, ...), ns, and
    its share of all compute kernel time (kernels summed, overlaps not merged)."""
    ev = data.events
    rows = values_in(ev[S.CLASS], (S.CLS_COMPUTE,)) \
        & ((ev[S.STEP] >= 0).to_numpy() | (not len(data.steps)))
    sub, dur = ev[S.SUBCLASS], ev[S.DUR_NS].to_numpy()[rows]
    if isinstance(sub.dtype, pd.CategoricalDtype) and dur.dtype == np.int64 and rows.any():
        # by the sub-class codes (in category order, as grouping the column gives them)
        codes = sub.array.codes[rows]
        named = codes >= 0
        count = np.bincount(codes[named], minlength=len(sub.dtype.categories))
        used = np.flatnonzero(count)
        ns = np.zeros(len(count), dtype=np.int64)
        np.add.at(ns, codes[named], dur[named])
        kernel_ns = pd.Series(ns[used])
        return pd.DataFrame({S.SUBCLASS: pd.Categorical.from_codes(used, dtype=sub.dtype),
                             "kernel_ns": kernel_ns, "kernels": count[used].astype(np.int64),
                             "share": kernel_ns / kernel_ns.sum()}).assign(rank=data.rank)
    comp = ev.loc[rows, [S.SUBCLASS, S.DUR_NS]]
    table = comp.groupby(S.SUBCLASS, observed=True)[S.DUR_NS].agg(["sum", "count"])
    table.columns = ["kernel_ns", "kernels"]
    table["share"] = table["kernel_ns"] / table["kernel_ns"].sum() if len(table) else []
    return table.reset_index().assign(rank=data.rank)


def rank_parts(data: RankData, opts: AnalysisOptions = DEFAULT_OPTIONS,
               th: Thresholds = DEFAULT, cut_step: int | None = None) -> dict:
    """The breakdown tables of one rank (the per-rank half of :func:`analyze_breakdown`),
    the code that filled its GPU-idle time, and its trace-health counts; ``cut_step``: the
    step the job failed in (never used)."""
    gpu = data.has_gpu
    by_thread: dict = {}
    one_offs: list = []
    steps = rank_steps(data, opts, th, by_thread, one_offs, cut_step)
    slow = one_offs[0] if one_offs else data.events.iloc[:0]
    return {"step_breakdown": steps,
            "stream_breakdown": stream_table(data) if gpu else None,
            "compute_subclasses": compute_subclasses(data) if gpu else None,
            "idle_code": idle_code(data.events, by_thread, data.rank),
            "host_work_where": host_work_where(data, by_thread),
            "shape_setup": shape_setup(data, by_thread, steps),
            "one_off_calls": pd.DataFrame({"rank": data.rank, "name": slow[S.NAME].astype(str),
                                           S.TS_NS: slow[S.TS_NS], S.DUR_NS: slow[S.DUR_NS],
                                           "inner": slow.get("inner", ""),
                                           "inner_ns": slow.get("inner_ns", 0)},
                                          columns=list(ONE_OFF_COLUMNS)),
            "health": rank_health(data),
            "compilation": rank_compilation(data),
            **used_step_work(data, steps)}


def analyze_breakdown(run: Run, opts: AnalysisOptions = DEFAULT_OPTIONS,
                      th: Thresholds = DEFAULT) -> Result:
    """Tables ``step_breakdown`` (:func:`step_columns`), ``rank_breakdown`` (rank, steps
    used, steps recorded, step_time_ms median of the used steps, one fraction column per
    part, comm_overlap_frac, primary), ``stream_breakdown`` (rank, stream, ns per class, ops,
    busy_ns), ``compute_subclasses`` (rank, subcls, kernel_ns, kernels, share), ``idle_code``
    (rank, part, code, idle_ns), ``shape_setup`` (ops setting up for new input shapes:
    :data:`.shapesetup.COLUMNS`), ``one_off_calls`` (rank, name, ts_ns, dur_ns),
    ``compilation`` (steps that compiled: :data:`.compilation.COMPILE_COLUMNS`), and what
    the used steps ran (``used_step_kernels``, ``used_step_ops``: :mod:`.stepwork`)."""
    return combine_breakdown([rank_parts(d, opts, th) for d in run.ranks.values()])


def rank_columns() -> list[str]:
    """The columns of ``rank_breakdown``: one fraction per part (as :func:`step_columns`)."""
    return ["rank", "steps", "steps_recorded", "step_time_ms", *PARTS, "comm_overlap_frac",
            "primary"]


def combine_breakdown(parts: list[dict]) -> Result:
    """:func:`analyze_breakdown` from every rank's :func:`rank_parts`."""
    # a rank without GPU work has no step rows (an untyped empty frame): left out of the
    # concat, so that the others' columns stay numeric
    frames = [p["step_breakdown"] for p in parts if len(p["step_breakdown"])]
    steps = pd.concat(frames, ignore_index=True) if frames else \
        pd.DataFrame(columns=step_columns())
    if all(steps[c].dtype.kind in "iu" for c in (*PARTS, OVERLAP, "step_ns", S.STEP)):
        rows = _rank_rows(steps)  # integer parts: numpy sums, exact in any order
    else:
        rows = _rank_rows_pandas(steps)
    tables = {"step_breakdown": steps, "rank_breakdown": pd.DataFrame(rows, columns=rank_columns())}
    for name in ("stream_breakdown", "compute_subclasses", "idle_code", "one_off_calls",
                 "compilation", "host_work_where", "shape_setup", *USED_WORK_TABLES):
        frames = [p[name] for p in parts if p.get(name) is not None and len(p[name])]
        tables[name] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Result(tables=tables)


def _rank_rows(steps: pd.DataFrame) -> list[dict]:
    """:func:`_rank_rows_pandas`'s rows from numpy columns (one rank at a time, ~0.1 ms each
    instead of ~1 ms): the same integer sums, the same divisions and medians."""
    rank = steps["rank"].to_numpy()
    order = np.argsort(rank, kind="stable")
    ranks, first = np.unique(rank[order], return_index=True)
    used_all, step = steps[USED].astype(bool).to_numpy(), steps[S.STEP].to_numpy()
    parts = np.column_stack([steps[p].to_numpy(np.int64) for p in PARTS])
    overlap, step_ns = steps[OVERLAP].to_numpy(np.int64), steps["step_ns"].to_numpy()
    rows = []
    for r, lo, hi in zip(ranks.tolist(), first.tolist(), [*first[1:].tolist(), len(order)]):
        mine = order[lo:hi]
        used = mine[used_all[mine]]
        total = parts[used].sum(axis=0)
        if total.sum() <= 0:  # nothing usable on this rank (e.g. only graph capture)
            continue
        fractions = dict(zip(PARTS, total / total.sum()))
        comm = float(total[PARTS.index("communication")] + overlap[used].sum())
        rows.append({"rank": int(r), "steps": int((step[used] >= 0).sum()),
                     "steps_recorded": int((step[mine] >= 0).sum()),
                     "step_time_ms": float(np.median(step_ns[used].astype(np.float64)) / 1e6),
                     **{p: float(fractions[p]) for p in PARTS},
                     "comm_overlap_frac": float(overlap[used].sum()) / comm if comm else np.nan,
                     "primary": dominant_part(fractions)})
    return rows


def _rank_rows_pandas(steps: pd.DataFrame) -> list[dict]:
    """One ``rank_breakdown`` row per rank with used step time (any column dtypes)."""
    rows = []
    for rank, group in steps.groupby("rank"):
        used = group[group[USED].astype(bool)]
        total = used[list(PARTS)].sum()
        if total.sum() <= 0:  # nothing usable on this rank (e.g. only graph capture)
            continue
        fractions = total / total.sum()
        primary = dominant_part(fractions)
        comm = float(total["communication"] + used[OVERLAP].sum())
        rows.append({"rank": int(rank), "steps": int((used[S.STEP] >= 0).sum()),
                     "steps_recorded": int((group[S.STEP] >= 0).sum()),
                     "step_time_ms": float(used["step_ns"].median() / 1e6),
                     **{p: float(fractions[p]) for p in PARTS},
                     "comm_overlap_frac": float(used[OVERLAP].sum()) / comm if comm else np.nan,
                     "primary": primary})
    return rows


def dominant_part(fractions) -> str:
    """The part that bounds a step: the largest of :data:`VERDICT_CLASSES`, the host side
    (:data:`HOST_SIDE`) counted as one, then its larger part."""
    # launch overhead and host work often come together, and splitting them must not let a
    # smaller cause win (a step 48% on the host is host-bound, however that splits)
    host = sum(float(fractions[p]) for p in HOST_SIDE)
    best = max((c for c in VERDICT_CLASSES if c not in HOST_SIDE), key=lambda c: fractions[c])
    if host > float(fractions[best]):
        return max(HOST_SIDE, key=lambda c: fractions[c])
    return best
