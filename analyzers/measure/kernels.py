"""Kernels and their launches: what runs on the GPU, how it gets there, and what could fuse.

Tables (times in ns, fractions in [0, 1]):

- ``top_kernels``: kernels across ranks by total time (name, cls, subcls, count, total_ns,
  mean_ns, share of all kernel time, min/max per-rank total: a rank lacking it counts 0).
- ``top_ops``: CPU ops across ranks sorted by **self** time (inclusive time minus the time
  of CPU ops and runtime calls nested directly inside them on the same thread), with the
  inclusive total beside it.
- ``short_kernels``: per rank, kernels shorter than ``short_kernel_ns`` and their time.
- ``kernels_per_step``: per rank and step, kernel count and summed kernel time.
- ``launches``: per rank, launch calls (runtime/driver calls that enqueue GPU work), their
  duration and launch delay (GPU op start - launch call end, joined by correlation), slow
  runtime calls and CUDA graph launches. Ops replayed by a graph share the graph launch's
  correlation and get no per-op delay.
- ``queue_depth``: per rank and stream, GPU ops launched but not finished (enqueued at their
  launch call's start, dequeued at their end): max and time-weighted mean.
- ``fusion_candidates``: n-grams (n = 3) of consecutive short kernels on one stream by count.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.fusion import (
    FUSION_COLUMNS,
    fusion_candidates,
    rank_ngrams,
)
from profkit.analyzers.measure.npgroups import group_table
from profkit.analyzers.measure.tables import (
    RANK,
    empty,
    in_steps,
    kernels_of,
    name_mask,
    window_ns,
)
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import aggregate, as_text, row_groups, sorted_lookup, unique_rows, values_in
from profkit.model import RankData, Run

TOP_KERNEL_COLUMNS = (S.NAME, S.CLASS, S.SUBCLASS, "count", "total_ns", "mean_ns", "share",
                      "rank_min_total_ns", "rank_max_total_ns")
TOP_OP_COLUMNS = (S.NAME, "count", "self_ns", "total_ns", "mean_self_ns", "self_share")
SHORT_COLUMNS = (RANK, "kernels", "short_kernels", "short_frac", "short_total_ns",
                 "short_time_frac", "kernel_busy_frac", "window_ns")
PER_STEP_COLUMNS = (RANK, S.STEP, "kernels", "gpu_time_ns")
LAUNCH_COLUMNS = (RANK, "launch_calls", "launch_time_ns", "launch_time_frac",
                  "launch_median_ns", "launch_p95_ns", "delay_median_ns", "delay_p95_ns",
                  "delayed_launches", "slow_runtime_calls", "slow_runtime_ns",
                  "graph_launches", "graph_gpu_ops", "max_queue_depth")
QUEUE_COLUMNS = (RANK, S.STREAM, "gpu_ops", "max_depth", "mean_depth")

# Runtime / driver calls that enqueue GPU work (CUDA, HIP, driver API).
LAUNCH_RE = re.compile(r"launch|memcpy|memset", re.IGNORECASE)
GRAPH_LAUNCH_RE = re.compile(r"graphlaunch", re.IGNORECASE)
COPY_CALL_RE = re.compile(r"memcpy", re.IGNORECASE)
# Calls whose duration is waiting for the GPU, not overhead: left to the host-sync analysis.
SYNC_CALL_RE = re.compile(r"synchronize|^(?:cuda|hip|cu)Memcpy(?:DtoH)?$|EventQuery|StreamQuery",
                          re.IGNORECASE)
CPU_NEST_KINDS = (S.KIND_CPU_OP, S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_SYNC)
NEST_COLUMNS = (S.KIND, S.NAME, S.PID, S.TID, S.TS_NS, S.DUR_NS)  # what self_times reads, and the kind
CALL_COLUMNS = (S.NAME, S.CORRELATION, S.TS_NS, S.DUR_NS, S.STEP)  # what is read of launch and slow calls
# Fewer kernels (or launch calls) than this in the window: too little to call launch-bound.
MIN_KERNELS = 100
# CUDA's launch queue holds about 1024 ops (peers flag 1024 as full; a V100 trace here peaks
# at 1023 while its launch calls block): at this depth launch calls wait on the GPU.
QUEUE_FULL_DEPTH = 1000


# --- top kernels and ops ------------------------------------------------------------------

def kernel_totals(rank: int, rd: RankData) -> pd.DataFrame:
    """Count and summed duration of each kernel of one rank, by (name, cls, subcls)."""
    keys = [S.NAME, S.CLASS, S.SUBCLASS]
    k = kernels_of(rd)
    codes = np.stack([k[c].array.codes for c in keys]) \
        if all(isinstance(k[c].dtype, pd.CategoricalDtype) for c in keys) else None
    if codes is None or k.empty or (codes < 0).any():  # grouped as text (rows missing one left out)
        k = k[keys + [S.DUR_NS]].astype({c: str for c in keys})
        return k.groupby(keys)[S.DUR_NS].agg(["size", "sum"]).reset_index().assign(rank=rank)
    # On the category codes, then the (few) groups named and put in the order of their
    # names, as grouping the names as text would.
    groups, at, _ = unique_rows(list(codes))
    groups = groups.T
    total = np.zeros(groups.shape[1], dtype=np.int64)
    np.add.at(total, at, k[S.DUR_NS].to_numpy(np.int64))
    texts = [[str(v) for v in np.asarray(k[c].dtype.categories, dtype=object)[group]]
             for c, group in zip(keys, groups)]
    order = sorted(range(groups.shape[1]), key=lambda g: tuple(t[g] for t in texts))
    return pd.DataFrame({**{c: [t[g] for g in order] for c, t in zip(keys, texts)},
                         "size": np.bincount(at, minlength=groups.shape[1])[order].astype(np.int64),
                         "sum": total[order]}).assign(rank=rank)


def top_kernels(totals: list[pd.DataFrame], n_ranks: int, top_n: int) -> pd.DataFrame:
    """The ``top_n`` kernels over every rank's :func:`kernel_totals`."""
    keys = [S.NAME, S.CLASS, S.SUBCLASS]
    per_rank = pd.concat(totals, ignore_index=True) if totals else pd.DataFrame()
    if per_rank.empty:
        return empty(TOP_KERNEL_COLUMNS)
    spec = dict(count=("size", "sum"), total_ns=("sum", "sum"), present=(RANK, "nunique"),
                rank_min_total_ns=("sum", "min"), rank_max_total_ns=("sum", "max"))
    out = group_table(per_rank, keys, spec)  # numpy: a groupby costs ~1 ms here
    if out is None:
        out = aggregate(per_rank.groupby(keys), spec).reset_index()
    out.loc[out["present"] < n_ranks, "rank_min_total_ns"] = 0
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["share"] = out["total_ns"] / out["total_ns"].sum()
    out = out.sort_values("total_ns", ascending=False, kind="stable").head(top_n)
    return out[list(TOP_KERNEL_COLUMNS)].reset_index(drop=True)


def self_times(cpu: pd.DataFrame) -> np.ndarray:
    """Self time of each row of a CPU-side frame: its duration minus its direct children's,
    with nesting found per (pid, tid) from start order and depth (no row-wise loops)."""
    out = np.zeros(len(cpu), dtype=np.int64)
    start, dur = cpu[S.TS_NS].to_numpy(), cpu[S.DUR_NS].to_numpy()
    for idx in row_groups([cpu[S.PID].to_numpy(), cpu[S.TID].to_numpy()]):
        s, d = start[idx], dur[idx]
        pos = idx[d > 0]  # zero-length rows contain nothing and take nothing
        s, d = s[d > 0], d[d > 0]
        order = iv.nest_order(s, s + d)  # parents (longer) before children at equal starts
        pos, s, d = pos[order], s[order], d[order]
        depth = np.arange(len(s)) - iv.count_at_most(s + d, s)  # s is sorted
        parent = iv.parent_by_depth(depth)  # the last range before it, one level up
        child = np.zeros(len(s), dtype=np.int64)
        np.add.at(child, parent[parent >= 0], d[parent >= 0])
        out[pos] = np.maximum(d - child, 0)
    return out


def op_totals(rd: RankData) -> pd.DataFrame:
    """Count, self and inclusive time of each CPU op name of one rank."""
    cpu = rd.of_kinds(CPU_NEST_KINDS, NEST_COLUMNS)
    is_op = values_in(cpu[S.KIND], (S.KIND_CPU_OP,))
    ops = pd.DataFrame({"code": cpu[S.NAME].cat.codes.to_numpy()[is_op],
                        "self_ns": self_times(cpu)[is_op],
                        "total_ns": cpu[S.DUR_NS].to_numpy()[is_op]})
    # Aggregate on category codes, then name the (few) groups: no per-row strings.
    spec = dict(count=("self_ns", "size"), self_ns=("self_ns", "sum"), total_ns=("total_ns", "sum"))
    agg = group_table(ops, ["code"], spec)  # numpy: a groupby costs ~2 ms here
    if agg is None:
        agg = aggregate(ops.groupby("code"), spec).reset_index()
    code = agg.pop("code").to_numpy()
    agg[S.NAME] = np.asarray(cpu[S.NAME].cat.categories, dtype=object)[code]
    return agg


def top_ops(totals: list[pd.DataFrame], top_n: int) -> pd.DataFrame:
    """The ``top_n`` CPU ops by self time over every rank's :func:`op_totals`."""
    ops = pd.concat(totals, ignore_index=True) if totals else pd.DataFrame()
    if ops.empty:
        return empty(TOP_OP_COLUMNS)
    spec = dict(count=("count", "sum"), self_ns=("self_ns", "sum"), total_ns=("total_ns", "sum"))
    out = group_table(ops, [S.NAME], spec)
    if out is None:
        out = aggregate(ops.groupby(S.NAME), spec).reset_index()
    out["mean_self_ns"] = out["self_ns"] / out["count"]
    out["self_share"] = out["self_ns"] / max(out["self_ns"].sum(), 1)
    out = out.sort_values("self_ns", ascending=False, kind="stable").head(top_n)
    return out[list(TOP_OP_COLUMNS)].reset_index(drop=True)


# --- per-rank tables ----------------------------------------------------------------------

def short_kernel_row(rank: int, rd: RankData, short_ns: int) -> dict:
    k = in_steps(kernels_of(rd), rd)
    dur = k[S.DUR_NS].to_numpy()
    short = dur < short_ns
    window = window_ns(rd)
    busy = iv.total(iv.union(k[S.TS_NS], k[S.TS_NS] + k[S.DUR_NS]))
    return {RANK: rank, "kernels": len(dur), "short_kernels": int(short.sum()),
            "short_frac": short.mean() if len(dur) else np.nan,
            "short_total_ns": int(dur[short].sum()),
            "short_time_frac": dur[short].sum() / dur.sum() if dur.sum() else np.nan,
            "kernel_busy_frac": busy / window if window else np.nan, "window_ns": window}


def kernels_per_step(rank: int, rd: RankData) -> pd.DataFrame:
    k = kernels_of(rd)
    k = k[k[S.STEP] >= 0]
    out = k.groupby(S.STEP)[S.DUR_NS].agg(kernels="size", gpu_time_ns="sum").reset_index()
    return out.assign(rank=rank)[list(PER_STEP_COLUMNS)]


def launch_join(rd: RankData) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(launch calls, GPU ops with their launch call's start, per-op launch delays), found
    once per rank (:func:`_launch_join`; the kernels and inference measurements read it)."""
    return rd.derived(_launch_join)


def _launch_join(rd: RankData) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(launch calls, GPU ops with their launch call's start, per-op launch delays).

    GPU ops sharing a correlation (graph replays) get their graph launch's start but no
    delay; so does any op whose launch call is a graph launch."""
    cpu = rd.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), CALL_COLUMNS)
    gpu = rd.gpu_events
    gpu_corr = gpu[S.CORRELATION][gpu[S.CORRELATION] >= 0]
    is_launch = name_mask(cpu[S.NAME], LAUNCH_RE) | (
        cpu[S.CORRELATION].isin(gpu_corr).to_numpy() & (cpu[S.CORRELATION] >= 0).to_numpy())
    launches = cpu[is_launch]
    # each correlation's first launch call (sorted by correlation), and the GPU ops it made
    valid = np.flatnonzero(launches[S.CORRELATION].to_numpy() >= 0)
    first_corr, first = np.unique(launches[S.CORRELATION].to_numpy()[valid], return_index=True)
    first = valid[first]
    graph = name_mask(launches[S.NAME].iloc[first], GRAPH_LAUNCH_RE)
    gpu_corr, ts = gpu[S.CORRELATION].to_numpy(), gpu[S.TS_NS].to_numpy()
    pos = sorted_lookup(first_corr, gpu_corr)
    joined = pos >= 0
    call = first[pos[joined]]
    start = launches[S.TS_NS].to_numpy()[call]
    end = start + launches[S.DUR_NS].to_numpy()[call]
    _, each, count = np.unique(gpu_corr[joined], return_inverse=True, return_counts=True)
    single = ~(graph[pos[joined]] | (count[each] > 1))  # graph replays share a correlation
    enq = ts.copy()
    enq[joined] = np.minimum(start, ts[joined])
    enq = pd.DataFrame({S.STREAM: gpu[S.STREAM].to_numpy(), "enq": enq,
                        "end": (gpu[S.TS_NS] + gpu[S.DUR_NS]).to_numpy()}, index=gpu.index)
    delays = pd.DataFrame({S.TS_NS: ts[joined][single],
                           S.STEP: gpu[S.STEP].to_numpy()[joined][single],
                           "delay_ns": (ts[joined] - end)[single]})
    return launches, enq, delays


def slow_calls(rd: RankData, th: Thresholds) -> pd.DataFrame:
    """Runtime/driver calls in the steps above slow_runtime_call_ns, synchronisations and
    copies aside (a copy that blocks is host_sync's, an async one is a launch); found once
    per rank and threshold."""
    return rd.derived(_slow_calls, th.slow_runtime_call_ns)


def _slow_calls(rd: RankData, slow_ns: float) -> pd.DataFrame:
    rt = in_steps(rd.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), CALL_COLUMNS), rd)
    return rt[(rt[S.DUR_NS] > slow_ns).to_numpy()
              & ~name_mask(rt[S.NAME], SYNC_CALL_RE) & ~name_mask(rt[S.NAME], COPY_CALL_RE)]


def launch_row(rank: int, rd: RankData, joined: tuple, th: Thresholds) -> dict:
    launches, _, delays = joined
    launches_in, delays = in_steps(launches, rd), in_steps(delays, rd)
    # Copy calls are not launch overhead: a blocking one waits for its copy (host_sync).
    launches_in = launches_in[~name_mask(launches_in[S.NAME], COPY_CALL_RE)]
    graph = name_mask(launches_in[S.NAME], GRAPH_LAUNCH_RE)
    slow = slow_calls(rd, th)
    graph_corr = launches_in[S.CORRELATION][graph]
    graph_ops = rd.gpu_events[S.CORRELATION].isin(graph_corr[graph_corr >= 0]).sum()
    dur, delay = launches_in[S.DUR_NS].to_numpy(), delays["delay_ns"].to_numpy()
    window = window_ns(rd)

    def q(a: np.ndarray, p: float) -> float:
        return float(np.percentile(a, p)) if len(a) else np.nan

    return {RANK: rank, "launch_calls": len(dur), "launch_time_ns": int(dur.sum()),
            "launch_time_frac": dur.sum() / window if window else np.nan,
            "launch_median_ns": q(dur, 50), "launch_p95_ns": q(dur, 95),
            "delay_median_ns": q(delay, 50), "delay_p95_ns": q(delay, 95),
            "delayed_launches": int((delay > th.launch_delay_ns).sum()),
            "slow_runtime_calls": len(slow), "slow_runtime_ns": int(slow[S.DUR_NS].sum()),
            "graph_launches": int(graph.sum()), "graph_gpu_ops": int(graph_ops)}


def queue_depth(rank: int, enq: pd.DataFrame) -> pd.DataFrame:
    """Sweep over enqueue (+1) and end (-1) times of all streams at once: each stream's
    deltas sum to zero, so one cumulative sum over the (stream, time)-sorted sweep is each
    stream's depth. Ends sort before starts at equal times."""
    if enq.empty:
        return empty(QUEUE_COLUMNS)
    n = len(enq)
    stream = np.concatenate([enq[S.STREAM].to_numpy()] * 2)
    t = np.concatenate([enq["enq"].to_numpy(), enq["end"].to_numpy()])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((delta, t, stream))
    stream, t, depth = stream[order], t[order], np.cumsum(delta[order])
    same = np.append(stream[1:] == stream[:-1], False)
    dt = np.where(same, np.append(np.diff(t), 0), 0)
    sweep = pd.DataFrame({S.STREAM: stream, "t": t, "depth": depth, "area": depth * dt})
    spec = dict(max_depth=("depth", "max"), area=("area", "sum"), t0=("t", "min"), t1=("t", "max"))
    out = group_table(sweep, [S.STREAM], spec)
    if out is None:
        out = aggregate(sweep.groupby(S.STREAM), spec).reset_index()
    out["mean_depth"] = out["area"] / (out["t1"] - out["t0"]).where(lambda x: x > 0)
    out["gpu_ops"] = out[S.STREAM].map(enq[S.STREAM].value_counts())
    return out.assign(rank=rank)[list(QUEUE_COLUMNS)]


# --- entry point ---------------------------------------------------------------------------

def slow_call_facts(rank: int, rd: RankData, lc: dict, th: Thresholds,
                    used: dict[int, int] | None = None) -> dict | None:
    """The slow runtime calls of a rank's used steps (``used``: step -> ns; all profiled steps
    when None), None when there are none: their count and ns, the five names that took
    longest, ``[name, calls, total ns]``, and their share of the used steps' time. One-off
    calls of steps the verdict leaves out (lazy loading in a first step) do not count."""
    if not lc["slow_runtime_calls"]:
        return None
    slow = slow_calls(rd, th)
    window = window_ns(rd)
    if used is not None and len(rd.steps):
        slow = slow[slow[S.STEP].isin(list(used))]
        window = sum(used.values())
    if slow.empty:
        return None
    names = slow.groupby(as_text(slow[S.NAME]))[S.DUR_NS].agg(["size", "sum"])
    names = names.sort_values("sum", ascending=False).head(5)
    ns = int(slow[S.DUR_NS].sum())
    return {"rank": rank, "launch": lc, "calls": int(len(slow)), "ns": ns,
            "frac": ns / max(window, 1),
            "names": [[str(n), int(c), int(t)] for n, (c, t) in names.iterrows()]}


def no_gpu_result(tables: tuple[tuple[str, tuple[str, ...]], ...], what: str) -> Result:
    return Result(tables={name: empty(cols) for name, cols in tables},
                  facts={"topic": "no_gpu", "what": what})


TABLES = (("top_kernels", TOP_KERNEL_COLUMNS), ("top_ops", TOP_OP_COLUMNS),
          ("short_kernels", SHORT_COLUMNS), ("kernels_per_step", PER_STEP_COLUMNS),
          ("launches", LAUNCH_COLUMNS), ("queue_depth", QUEUE_COLUMNS),
          ("fusion_candidates", FUSION_COLUMNS))


def analyze_kernels(run: Run, thresholds: Thresholds = DEFAULT, *, top_n: int = 50) -> Result:
    """Kernel, CPU-op, launch, queue and fusion tables of a run (see the module docstring),
    and the slow runtime calls (facts). Ranks without GPU events are left out."""
    parts = [rank_kernel_parts(r, rd, thresholds) for r, rd in sorted(run.ranks.items())
             if rd.has_gpu]
    return combine_kernels(parts, thresholds, top_n=top_n)


def rank_kernel_parts(rank: int, rd: RankData, th: Thresholds,
                      used: dict[int, int] | None = None) -> dict:
    """The per-rank half of :func:`analyze_kernels`: rows, partial totals, slow calls."""
    joined = launch_join(rd)
    queue = queue_depth(rank, joined[1])
    launch = launch_row(rank, rd, joined, th)
    launch["max_queue_depth"] = int(queue["max_depth"].max()) if len(queue) else 0
    return {"short": short_kernel_row(rank, rd, th.short_kernel_ns), "launch": launch,
            "queue": queue, "per_step": kernels_per_step(rank, rd),
            "kernel_totals": kernel_totals(rank, rd), "op_totals": op_totals(rd),
            "ngrams": rank_ngrams(rd, th.short_kernel_ns).assign(rank=rank),
            "n_steps": len(rd.steps), "slow_calls": slow_call_facts(rank, rd, launch, th, used)}


def combine_kernels(parts: list[dict], th: Thresholds, *, top_n: int = 50) -> Result:
    """:func:`analyze_kernels` from the GPU ranks' :func:`rank_kernel_parts`, in rank order."""
    if not parts:
        return no_gpu_result(TABLES, "kernel analysis")
    short = pd.DataFrame([p["short"] for p in parts], columns=list(SHORT_COLUMNS))
    launches = pd.DataFrame([p["launch"] for p in parts], columns=list(LAUNCH_COLUMNS))
    fusion = fusion_candidates([p["ngrams"] for p in parts],
                               sum(p["n_steps"] for p in parts), top_n)
    tables = {
        "top_kernels": top_kernels([p["kernel_totals"] for p in parts], len(parts), top_n),
        "top_ops": top_ops([p["op_totals"] for p in parts], top_n), "short_kernels": short,
        "kernels_per_step": pd.concat([p["per_step"] for p in parts], ignore_index=True),
        "launches": launches,
        "queue_depth": pd.concat([p["queue"] for p in parts], ignore_index=True),
        "fusion_candidates": fusion,
    }
    return Result(tables=tables, facts={"topic": "kernels", "thresholds": th, "slow_calls": [
        p["slow_calls"] for p in parts if p["slow_calls"]]})
