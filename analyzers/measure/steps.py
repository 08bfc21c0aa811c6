"""Which stretches of a trace are steps, and which steps speak for the steady state.

- :func:`step_windows`: disjoint per-step windows (CPU range joined with its GPU work).
- :func:`apply_step_marker`: steps from a user annotation (``--step-marker train_step``) for
  traces without ``ProfilerStep#`` ranges.
- :func:`choose_steps`: the steps a verdict should use. Profiler start and stop distort the
  first and last recorded step (CUPTI start-up, a final drain), a one-off step (a
  checkpoint, an evaluation) is not the steady state, and neither is a step that records a
  CUDA graph or compiles (torch.compile's Dynamo, AOTAutograd, Inductor, Triton autotuning:
  :mod:`.compilation`): such steps are left out of verdicts, with the reason, unless
  ``--steps A:B`` names the steps to use. When every step compiles, recompiling is the
  run's steady state: its steps stay its steps (step time, ``profkit diff``), and the rank
  gets no bottleneck verdict (:func:`compiling_ranks`), rather than compile time read as
  launch overhead.
- :func:`capture_spans`: CUDA-graph capture windows (launches recorded, nothing executed).
- :func:`one_off_spans`: single host calls so slow they are not the workload (CUDA lazy
  module loading in a first ``cudaLaunchKernel``, ...): cut out of a step-less window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.units import ms_of_ns

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, values_in
from profkit.model import RankData, step_spans
from profkit.trace.ingest import add_gpu_spans, assign_steps

CAPTURE_BEGIN_RE = r"^(?:cuda|hip|cu)StreamBeginCapture"
CAPTURE_END_RE = r"^(?:cuda|hip|cu)StreamEndCapture"
# Only called while a capture is in progress (IsCapturing, by contrast, is asked routinely).
CAPTURE_INFO_RE = r"^(?:cuda|hip|cu)StreamGetCaptureInfo"
USED, REASON = "used", "excluded_reason"
LOADING = "data_loading"  # the charged part (analyzers/parts.py)
CUT_REASON = "cut short: the job ran out of memory in this step"


def step_windows(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint (start, end, step) windows, one per step: from the end of the previous step's
    span (or its own start) to the end of its span (CPU range joined with its GPU work)."""
    order = np.argsort(steps[S.TS_NS].to_numpy(), kind="stable")
    steps = steps.iloc[order]
    start, end = step_spans(steps)
    prev_end = np.concatenate([[start[0]], end[:-1]]) if len(end) else end
    start = np.maximum(start, np.minimum(prev_end, end))
    keep = end > start
    return start[keep], end[keep], steps[S.STEP].to_numpy()[keep]


def marker_ranges(events: pd.DataFrame, name: str) -> pd.DataFrame:
    """Host ranges named ``name`` (exactly, else matching it as a regex), outermost only."""
    host = events[values_in(events[S.KIND], (S.KIND_ANNOTATION, S.KIND_CPU_OP, S.KIND_PYTHON))]
    rows = host[(host[S.NAME] == name).to_numpy()]
    if rows.empty:
        rows = host[category_mask(host[S.NAME], name)]
    rows = rows.sort_values([S.TS_NS, S.DUR_NS], ascending=[True, False])
    ends = (rows[S.TS_NS] + rows[S.DUR_NS]).to_numpy()
    reach = np.maximum.accumulate(ends) if len(ends) else ends
    inner = np.zeros(len(rows), bool)
    inner[1:] = rows[S.TS_NS].to_numpy()[1:] < reach[:-1]  # starts inside an earlier range
    return rows[~inner]


def apply_step_marker(data: RankData, name: str) -> int:
    """Make the ranges named ``name`` this rank's steps (numbered 0, 1, ... in time order),
    re-assigning the step of every event and collective; returns how many were found."""
    rows = marker_ranges(data.events, name)
    steps = pd.DataFrame({S.STEP: np.arange(len(rows), dtype=np.int64),
                          S.TS_NS: rows[S.TS_NS].to_numpy(np.int64),
                          S.DUR_NS: rows[S.DUR_NS].to_numpy(np.int64)})
    data.events[S.STEP] = assign_steps(data.events, steps)
    data.steps = add_gpu_spans(steps, data.events)
    coll = data.collectives
    if len(coll):
        by_corr = data.events.loc[data.events[S.CORRELATION] >= 0].drop_duplicates(S.CORRELATION)
        step_of = by_corr.set_index(S.CORRELATION)[S.STEP]
        mapped = coll[S.CORRELATION].map(step_of)
        coll[S.STEP] = mapped.fillna(-1).astype(np.int64)
    return len(steps)


def marker_candidates(events: pd.DataFrame, min_count: int = 3) -> list[tuple[str, int]]:
    """User annotations that repeat and never overlap themselves: names a trace without
    ``ProfilerStep#`` could use as ``--step-marker`` (name, count), most frequent first."""
    ann = events[values_in(events[S.KIND], (S.KIND_ANNOTATION,))]
    ann = ann[~category_mask(ann[S.NAME], "^ProfilerStep#|DataLoader|^Optimizer|^##")]
    out = []
    for name, group in ann.groupby(S.NAME, observed=True):
        if len(group) < min_count:
            continue
        ts = np.sort(group[S.TS_NS].to_numpy())
        ends = ts + group[S.DUR_NS].to_numpy()[np.argsort(group[S.TS_NS].to_numpy())]
        if (ts[1:] >= ends[:-1]).all():
            out.append((str(name), len(group)))
    return sorted(out, key=lambda x: -x[1])[:3]


def capture_spans(events: pd.DataFrame) -> iv.Intervals:
    """CUDA/HIP graph capture windows: from each BeginCapture to the next EndCapture on the
    same thread (to the thread's last event when the capture never ends in the trace)."""
    host = values_in(events[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER))
    begins = host & category_mask(events[S.NAME], CAPTURE_BEGIN_RE)
    if not begins.any():  # no capture (most traces): no rows to select
        return iv.union([], [])
    begin = events.loc[begins, [S.TID, S.TS_NS]]
    end = events.loc[host & category_mask(events[S.NAME], CAPTURE_END_RE),
                     [S.TID, S.TS_NS, S.DUR_NS]]
    starts, stops = [], []
    for tid, b in begin.groupby(S.TID):
        e = end[end[S.TID] == tid]
        e_ts = np.sort((e[S.TS_NS] + e[S.DUR_NS]).to_numpy())
        b_ts = np.sort(b[S.TS_NS].to_numpy())
        last = int((events[S.TS_NS] + events[S.DUR_NS]).max())
        pos = np.searchsorted(e_ts, b_ts, side="left")
        starts.append(b_ts)
        stops.append(np.where(pos < len(e_ts), e_ts[np.minimum(pos, len(e_ts) - 1)], last))
    if not starts:
        return iv.union([], [])
    return iv.union(np.concatenate(starts), np.concatenate(stops))


def capture_calls(events: pd.DataFrame) -> int:
    """Capture-state queries (``cudaStreamGetCaptureInfo``) in the trace:
    graph capture in progress when the Begin/End calls themselves fall outside it."""
    host = values_in(events[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER))
    return int((host & category_mask(events[S.NAME], CAPTURE_INFO_RE)).sum())


def choose_steps(table: pd.DataFrame, capture_ns: np.ndarray, chosen: tuple | None,
                 tolerance: float, compile_ns: np.ndarray | None = None,
                 compile_frac: float = 0.05, cut_step: int | None = None
                 ) -> tuple[np.ndarray, list[str]]:
    """(used mask, reason per step) for one rank's ``step_breakdown`` rows (time order).

    ``chosen`` (lo, hi) step numbers from ``--steps``: exactly those are used. Otherwise a
    step is left out when most of it is CUDA-graph capture, when at least ``compile_frac`` of
    it is compilation (``compile_ns``) while other steps do not compile, or when its time is
    more than ``tolerance`` above (or below 1/(1+tolerance) of) the median step: at the
    edges of the recording that is profiler start-up or a final drain, in the middle a
    one-off. At most half the steps are left out as outliers, and with fewer than 3 none.
    A long step after the first whose excess is mostly data loading (the table's
    ``data_loading`` column) stays: the DataLoader's wait is the workload's, whatever the
    step's place (issue 40: with three steps, a last step's shard wait read as profiler
    stop flipped the verdict from data loading to host work).
    ``cut_step``: a step the job failed in (out of memory: ``allocator.rank_oom``), never
    used, whatever ``chosen`` says: it did not run to its end."""
    n = len(table)
    steps = table[S.STEP].to_numpy()
    reasons = [""] * n
    cut = steps == cut_step if cut_step is not None else np.zeros(n, bool)
    if chosen is not None:
        lo, hi = chosen
        used = (steps >= lo) & (steps <= hi) & ~cut
        return used, [CUT_REASON if c else "outside --steps" if not u else ""
                      for u, c in zip(used, cut)]
    step_ns = table["step_ns"].to_numpy(np.float64)
    capture = capture_ns / np.maximum(step_ns, 1) > 0.5
    for i in np.flatnonzero(capture):
        reasons[i] = "CUDA graph capture (launches recorded, nothing ran)"
    for i in np.flatnonzero(cut):
        reasons[i] = CUT_REASON
    capture |= cut  # left out like a capture: neither compiling nor an outlier candidate
    compiling = _compiling(step_ns, compile_ns, compile_frac) & ~capture
    if compiling.sum() == (~capture).sum():  # every step compiles: that is the run's steady state
        compiling[:] = False
    for i in np.flatnonzero(compiling):
        reasons[i] = f"compiles: {ms_of_ns(compile_ns[i])} of {ms_of_ns(step_ns[i])} in torch.compile"
    steady = ~capture & ~compiling
    if steady.sum() >= 3:
        _outliers(step_ns, steady, tolerance, reasons, _loading_ns(table))
    used = np.array([r == "" for r in reasons])
    if not used.any():
        return np.ones(n, bool) if steady.all() else used, reasons
    return used, reasons


def _compiling(step_ns: np.ndarray, compile_ns: np.ndarray | None, frac: float) -> np.ndarray:
    """Steps at least ``frac`` of which is compilation."""
    if compile_ns is None:
        return np.zeros(len(step_ns), bool)
    return (compile_ns > 0) & (compile_ns >= frac * np.maximum(step_ns, 1))


def compiling_ranks(steps: pd.DataFrame, frac: float) -> list[int]:
    """Ranks whose every used step compiles for at least ``frac`` of its time (``compile_ns``
    of ``step_breakdown``): their steps show the compiler, so they get no bottleneck
    verdict."""
    if steps.empty or "compile_ns" not in steps:
        return []
    used = steps[steps[USED].astype(bool)]
    compiling = _compiling(used["step_ns"].to_numpy(np.float64), used["compile_ns"].to_numpy(),
                           frac)
    every = pd.Series(compiling, index=used.index).groupby(used["rank"]).all()
    return [int(r) for r in every[every].index]


def _loading_ns(table: pd.DataFrame) -> np.ndarray | None:
    """Each step's data-loading ns (the charged part), where the table has it."""
    return table[LOADING].to_numpy(np.float64) if LOADING in table else None


def _outliers(step_ns: np.ndarray, candidates: np.ndarray, tolerance: float,
              reasons: list[str], loading_ns: np.ndarray | None = None) -> None:
    idx = np.flatnonzero(candidates)
    ratio = step_ns[idx] / np.median(step_ns[idx])  # robust while fewer than half are odd
    odd = (ratio > 1 + tolerance) | (ratio < 1 / (1 + tolerance))
    if odd.sum() > len(idx) // 2:  # no steady state to speak of: keep them all
        return
    if loading_ns is not None:  # a long step the DataLoader made long is the workload's
        odd[1:] &= ~_data_wait(step_ns[idx], loading_ns[idx])[1:]
    for k in np.flatnonzero(odd):
        i = idx[k]
        where = ("first recorded step (profiler start-up)" if k == 0 else
                 "last recorded step (profiler stop)" if k == len(idx) - 1 else "one-off step")
        reasons[i] = f"{where}: {ratio[k]:.1f}x the median step"


def _data_wait(step_ns: np.ndarray, loading_ns: np.ndarray) -> np.ndarray:
    """Steps longer than the median step with at least half of the excess in data loading
    beyond its own median: the step waited for the DataLoader (a new shard, a slow batch),
    which the trace records as the workload's own wait, not the profiler's start or stop.
    (The caller does not ask of the first recorded step: a DataLoader starting its workers
    is a one-off.)"""
    excess = step_ns - np.median(step_ns)
    loading = loading_ns - np.median(loading_ns)
    return (excess > 0) & (loading >= 0.5 * excess)


WAITING_CALL_RE = r"(?i)memcpy|synchron|sync$|wait|query"


# CPU ops whose length can be the GPU work they wait for (a copy to the host, .item()).
WAITING_OP_RE = r"(?i)copy|item|scalar|^aten::to$|nonzero|synchron|wait"
# The kinds a one-off can be: runtime / driver calls, and the ops and annotations around
# them (the first aten::addmm sets up cuBLAS and loads its kernels; the first batch of a
# DataLoader with workers waits for them to start)
ONE_OFF_KINDS = (S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_CPU_OP, S.KIND_ANNOTATION)


def one_off_spans(events: pd.DataFrame, lo: int, hi: int, min_ns: int = 10_000_000,
                  factor: float = 50.0, share: float = 0.05) -> pd.DataFrame:
    """Host calls (runtime / driver calls, CPU ops, annotations) that took at least
    ``min_ns``, ``factor`` times the median of their own name and ``share`` of the window
    [lo, hi): one-off events (lazy module loading, JIT, first-call set-up, DataLoader
    workers starting) rather than the workload's behaviour. A name called once is never one
    (its median is itself). Calls that wait for the GPU (copies, synchronisations, event
    waits, ``.item()``) are never one-offs: their length is the work they wait for."""
    kinds = events[S.KIND]
    host = events[values_in(kinds, ONE_OFF_KINDS) & (events[S.DUR_NS] >= min_ns).to_numpy()]
    runtime = values_in(host[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER))
    host = host[~category_mask(host[S.NAME], WAITING_CALL_RE)
                & (runtime | ~category_mask(host[S.NAME], WAITING_OP_RE))]
    if host.empty:
        return _outermost(host)
    med = events[events[S.NAME].isin(host[S.NAME].unique())].groupby(
        S.NAME, observed=True)[S.DUR_NS].median()
    slow = host[(host[S.DUR_NS] >= factor * host[S.NAME].map(med).astype(float)).to_numpy()
                & (host[S.DUR_NS] >= share * max(hi - lo, 1)).to_numpy()]
    return _outermost(slow)


def _outermost(spans: pd.DataFrame) -> pd.DataFrame:
    """The spans not inside another of them (the first aten::linear holds its first
    aten::addmm: one one-off, named once), each with the longest runtime / driver call of
    the others inside it (``inner``, ``inner_ns``; "" and 0 without one)."""
    spans = spans.sort_values([S.TS_NS, S.DUR_NS], ascending=[True, False], kind="stable")
    start = spans[S.TS_NS].to_numpy()
    ends = start + spans[S.DUR_NS].to_numpy()
    inside = np.zeros(len(spans), bool)
    if len(spans) > 1:
        inside[1:] = ends[1:] <= np.maximum.accumulate(ends)[:-1]
    outer = np.maximum.accumulate(np.where(~inside, np.arange(len(spans)), 0))
    runtime = values_in(spans[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER)) & inside
    out = spans[~inside].copy()
    out["inner"], out["inner_ns"] = "", 0
    for i in np.flatnonzero(runtime)[np.argsort(-ends[runtime] + start[runtime])]:
        row = out.index.get_loc(spans.index[outer[i]])
        if not out.iat[row, out.columns.get_loc("inner_ns")]:
            out.iat[row, out.columns.get_loc("inner")] = str(spans[S.NAME].iat[i])
            out.iat[row, out.columns.get_loc("inner_ns")] = int(ends[i] - start[i])
    return out


def run_step_times_ns(steps: pd.DataFrame) -> np.ndarray:
    """One time per used step of a run (ns): the median over the ranks that ran it. The run's
    median step, which every output shows, is the median of these."""
    if steps.empty:
        return np.array([], float)
    used = steps[steps[USED].astype(bool)]
    return used.groupby(S.STEP)["step_ns"].median().to_numpy(float)


def run_median_step_ms(steps: pd.DataFrame) -> float:
    """The run's median used step in ms (NaN without used steps)."""
    times = run_step_times_ns(steps)
    return float(np.median(times)) / 1e6 if len(times) else float("nan")
