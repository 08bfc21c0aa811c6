"""Where each step's time goes: every instant of a step charged to exactly one part.

GPU time is charged in priority order compute > memcpy/memset > communication > copies a
host synchronisation waited on (host_sync). Idle GPU time is charged to its cause: the host
inside a DataLoader ``__next__`` (data_loading); the GPU drained while the host was blocked in
a synchronisation (host_sync: ``.item()``, ``.cpu()``, ``cudaStreamSynchronize`` ...); the
next GPU op launched only after the GPU went idle (cpu_launch: launch overhead, Python, any
CPU work between launches); else idle_other (work was queued but did not run: cross-stream
waits). The parts of a step sum to its time (``profkit.model.step_times_ns`` windows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.findings import Result

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask
from profkit.model import RankData, Run, step_spans

PARTS = ("compute", "communication", "memcpy", "cpu_launch", "data_loading", "host_sync",
         "idle_other")
VERDICT_CLASSES = ("compute", "communication", "cpu_launch", "data_loading", "host_sync")
SYNC_CALLS = {
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "hipStreamSynchronize",
    "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy", "aten::item",
    "aten::_local_scalar_dense",
}
COPY_CALLS_RE = r"^(?:cuda|hip|cu)Memcpy"
DATALOADER_RE = r"DataLoader|_DataLoaderIter|dataloader"
HOST_SYNC_COPY = "host_sync_copy_ns"
OVERLAP = "comm_overlap_ns"
BLOCKING_COPY_SLACK_NS = 2_000  # a copy whose launch call ends this close to its end blocked


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


def _intervals(frame: pd.DataFrame) -> iv.Intervals:
    start = frame[S.TS_NS].to_numpy()
    return iv.union(start, start + frame[S.DUR_NS].to_numpy())


def _host_sync_ranges(ev: pd.DataFrame, copies: pd.DataFrame) -> iv.Intervals:
    """Host time blocked in synchronisation: sync calls, and copy calls that waited for
    their copy to finish (pageable device-to-host copies)."""
    cpu = ev[~ev[S.KIND].isin(S.GPU_KINDS)]
    sync = cpu[cpu[S.NAME].isin(SYNC_CALLS)]
    calls = cpu[category_mask(cpu[S.NAME], COPY_CALLS_RE) & (cpu[S.CORRELATION] >= 0).to_numpy()]
    joined = calls.merge(copies[[S.CORRELATION, S.TS_NS, S.DUR_NS]], on=S.CORRELATION,
                         suffixes=("", "_gpu"))
    waited = (joined[S.TS_NS] + joined[S.DUR_NS]
              >= joined[f"{S.TS_NS}_gpu"] + joined[f"{S.DUR_NS}_gpu"] - BLOCKING_COPY_SLACK_NS)
    blocking = joined[waited]
    starts = np.concatenate([sync[S.TS_NS].to_numpy(), blocking[S.TS_NS].to_numpy()])
    ends = np.concatenate([(sync[S.TS_NS] + sync[S.DUR_NS]).to_numpy(),
                           (blocking[S.TS_NS] + blocking[S.DUR_NS]).to_numpy()])
    return iv.union(starts, ends)


def _inside(points: np.ndarray, ranges: iv.Intervals) -> np.ndarray:
    """Whether each point lies inside a disjoint sorted interval set."""
    if len(ranges[0]) == 0:
        return np.zeros(len(points), dtype=bool)
    pos = np.searchsorted(ranges[0], points, side="right") - 1
    ok = pos >= 0
    return ok & (points < ranges[1][np.clip(pos, 0, None)])


def charged_intervals(data: RankData, lo: int, hi: int) -> dict[str, iv.Intervals]:
    """Disjoint interval sets, one per part, that together cover [lo, hi); plus two views
    that are not parts: ``host_sync_copy_ns`` (copies a sync waited on, inside host_sync)
    and ``comm_overlap_ns`` (communication hidden under compute)."""
    ev = data.events
    gpu = ev[ev[S.KIND].isin(S.GPU_KINDS)]
    copies = gpu[gpu[S.CLASS].isin((S.CLS_MEMCPY, S.CLS_MEMSET))]
    sync = _host_sync_ranges(ev, copies)
    copy_end = (copies[S.TS_NS] + copies[S.DUR_NS]).to_numpy()
    waited_copy = _inside(copy_end - 1, sync)
    compute = _intervals(gpu[gpu[S.CLASS] == S.CLS_COMPUTE])
    plain_copy = iv.subtract(_intervals(copies[~waited_copy]), compute)
    taken = iv.union_of(compute, plain_copy)
    comm = iv.subtract(_intervals(gpu[gpu[S.CLASS] == S.CLS_COMMUNICATION]), taken)
    taken = iv.union_of(taken, comm)
    sync_copy = iv.subtract(_intervals(copies[waited_copy]), taken)
    busy = iv.union_of(taken, sync_copy)
    parts = {"compute": compute, "memcpy": plain_copy, "communication": comm}
    parts.update(_idle_parts(ev, gpu, iv.complement(busy, lo, hi), sync))
    parts["host_sync"] = iv.union_of(parts["host_sync"], sync_copy)
    parts[HOST_SYNC_COPY] = sync_copy  # the GPU-busy share of host_sync (not a part of its own)
    parts[OVERLAP] = iv.intersect(_intervals(gpu[gpu[S.CLASS] == S.CLS_COMMUNICATION]), compute)
    return {k: iv.clip(v, lo, hi) for k, v in parts.items()}


def _idle_parts(ev: pd.DataFrame, gpu: pd.DataFrame, gaps: iv.Intervals,
                sync: iv.Intervals) -> dict[str, iv.Intervals]:
    cpu = ev[~ev[S.KIND].isin(S.GPU_KINDS)]
    loader = _intervals(cpu[category_mask(cpu[S.NAME], DATALOADER_RE)])
    loading = iv.intersect(gaps, loader)
    rest = iv.subtract(gaps, loader)
    cause = _gap_causes(ev, gpu, gaps, sync)
    owner = np.searchsorted(gaps[0], rest[0], side="right") - 1
    out = {"data_loading": loading}
    for part in ("host_sync", "cpu_launch", "idle_other"):
        pick = cause[owner] == part if len(owner) else np.zeros(0, bool)
        out[part] = (rest[0][pick], rest[1][pick])
    return out


def _gap_causes(ev: pd.DataFrame, gpu: pd.DataFrame, gaps: iv.Intervals,
                sync: iv.Intervals) -> np.ndarray:
    """host_sync if the host was blocked in a sync when the GPU went idle; cpu_launch if the
    GPU op that ends the gap was launched after the gap began; else idle_other."""
    cause = np.full(len(gaps[0]), "idle_other", dtype=object)
    if len(gaps[0]) == 0:
        return cause
    launch = ev[ev[S.KIND].isin((S.KIND_RUNTIME, S.KIND_DRIVER)) & (ev[S.CORRELATION] >= 0)]
    launch_ts = launch.drop_duplicates(S.CORRELATION).set_index(S.CORRELATION)[S.TS_NS]
    order = np.argsort(gpu[S.TS_NS].to_numpy(), kind="stable")
    starts = gpu[S.TS_NS].to_numpy()[order]
    corr = gpu[S.CORRELATION].to_numpy()[order]
    nxt = np.searchsorted(starts, gaps[1], side="left")
    has_next = nxt < len(starts)
    next_launch = np.full(len(gaps[0]), np.iinfo(np.int64).min, dtype=np.int64)
    found = pd.Series(corr[nxt[has_next]]).map(launch_ts)
    next_launch[np.flatnonzero(has_next)] = found.fillna(np.iinfo(np.int64).min).to_numpy(np.int64)
    # No next op in the trace: the host never launched more work, so the GPU starved.
    late = (next_launch >= gaps[0]) | ~has_next
    cause[late] = "cpu_launch"
    cause[_inside(gaps[0], sync)] = "host_sync"
    return cause


def rank_steps(data: RankData) -> pd.DataFrame:
    """One row per step: step_ns and the ns charged to each part (summing to step_ns)."""
    gpu = data.events[data.events[S.KIND].isin(S.GPU_KINDS)]
    if gpu.empty:  # a CPU-only trace: there is no GPU time to break down
        return pd.DataFrame(columns=["rank", S.STEP, "step_ns", *PARTS, HOST_SYNC_COPY, OVERLAP])
    if len(data.steps):
        starts, ends, numbers = step_windows(data.steps)
    else:
        starts = np.array([gpu[S.TS_NS].min()])
        ends = np.array([(gpu[S.TS_NS] + gpu[S.DUR_NS]).max()])
        numbers = np.array([-1])
    parts = charged_intervals(data, int(starts.min()), int(ends.max()))
    table = pd.DataFrame({"rank": data.rank, S.STEP: numbers, "step_ns": ends - starts})
    for part in (*PARTS, HOST_SYNC_COPY, OVERLAP):
        table[part] = iv.per_window(parts[part], starts, ends)
    return table


def stream_table(data: RankData) -> pd.DataFrame:
    """Per stream of one rank: GPU time by class in the profiled steps (ns) and op count."""
    gpu = data.events[data.events[S.KIND].isin(S.GPU_KINDS)]
    if len(data.steps):
        gpu = gpu[gpu[S.STEP] >= 0]
    table = gpu.pivot_table(index=S.STREAM, columns=S.CLASS, values=S.DUR_NS, aggfunc="sum",
                            observed=True, fill_value=0)
    table.columns = [f"{c}_ns" for c in table.columns]
    table["ops"] = gpu.groupby(S.STREAM).size()
    table["busy_ns"] = table.filter(like="_ns").sum(axis=1)
    return table.reset_index().assign(rank=data.rank)


def compute_subclasses(data: RankData) -> pd.DataFrame:
    """Compute kernel time in the profiled steps by sub-class (gemm, attention, ...), ns, and
    its share of all compute kernel time (kernels summed, overlaps not merged)."""
    ev = data.events
    comp = ev[(ev[S.CLASS] == S.CLS_COMPUTE) & ((ev[S.STEP] >= 0) | (not len(data.steps)))]
    table = comp.groupby(S.SUBCLASS, observed=True)[S.DUR_NS].agg(["sum", "count"])
    table.columns = ["kernel_ns", "kernels"]
    table["share"] = table["kernel_ns"] / table["kernel_ns"].sum() if len(table) else []
    return table.reset_index().assign(rank=data.rank)


def rank_parts(data: RankData) -> dict[str, pd.DataFrame | None]:
    """The breakdown tables of one rank (the per-rank half of :func:`analyze_breakdown`)."""
    gpu = data.has_gpu
    return {"step_breakdown": rank_steps(data),
            "stream_breakdown": stream_table(data) if gpu else None,
            "compute_subclasses": compute_subclasses(data) if gpu else None}


def analyze_breakdown(run: Run) -> Result:
    """Tables ``step_breakdown`` (rank, step, step_ns, one ns column per part, plus
    host_sync_copy_ns and comm_overlap_ns), ``rank_breakdown`` (rank, steps, step_time_ms
    median, one fraction column per part, comm_overlap_frac, primary),
    ``stream_breakdown`` (rank, stream, ns per class, ops, busy_ns) and
    ``compute_subclasses`` (rank, subcls, kernel_ns, kernels, share)."""
    return combine_breakdown([rank_parts(d) for d in run.ranks.values()])


def combine_breakdown(parts: list[dict[str, pd.DataFrame | None]]) -> Result:
    """:func:`analyze_breakdown` from every rank's :func:`rank_parts`."""
    steps = pd.concat([p["step_breakdown"] for p in parts], ignore_index=True)
    streams = [p["stream_breakdown"] for p in parts if p["stream_breakdown"] is not None]
    subclasses = [p["compute_subclasses"] for p in parts if p["compute_subclasses"] is not None]
    rows = []
    for rank, group in steps.groupby("rank"):
        total = group[list(PARTS)].sum()
        fractions = total / total.sum() if total.sum() > 0 else total * 0.0
        primary = max(VERDICT_CLASSES, key=lambda c: fractions[c])
        comm = float(total["communication"] + group[OVERLAP].sum())
        rows.append({"rank": int(rank), "steps": int((group[S.STEP] >= 0).sum()),
                     "step_time_ms": float(group["step_ns"].median() / 1e6),
                     **{p: float(fractions[p]) for p in PARTS},
                     "comm_overlap_frac": float(group[OVERLAP].sum()) / comm if comm else np.nan,
                     "primary": primary})
    ranks = pd.DataFrame(rows, columns=["rank", "steps", "step_time_ms", *PARTS,
                                        "comm_overlap_frac", "primary"])
    return Result(tables={"step_breakdown": steps, "rank_breakdown": ranks,
                          "stream_breakdown": pd.concat(streams, ignore_index=True)
                          if streams else pd.DataFrame(),
                          "compute_subclasses": pd.concat(subclasses, ignore_index=True)
                          if subclasses else pd.DataFrame()})
