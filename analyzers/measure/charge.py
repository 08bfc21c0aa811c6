"""The charged-time model: every instant of a rank's timeline charged to exactly one cause.

GPU-busy instants go to the work running, in priority order:

1. ``compute``: compute kernels and memsets (device work);
2. ``memcpy`` (transfer): copies whose own call did not block the host (pinned async
   copies, device-to-device, peer-to-peer), also when the host later waited for them in a
   ``synchronize()``: that wait is transfer time;
3. ``pipeline_bubble``: the part of point-to-point kernels (``send`` / ``recv``) that waits
   for the peer stage (``p2p.py``: all but the rank's shortest such kernel's length), the
   stage idle while its neighbour computes; ``communication``: the rest of the collectives
   and other communication kernels;
4. ``host_sync``: copies whose own call blocked the host (``cudaMemcpy``, or an async copy
   from or to pageable memory: the trace's memcpy name says ``Pageable``).

GPU-idle instants are charged per instant, from what the thread that launches the next GPU
op was doing at that instant (its CPU ranges on the same thread):

- inside a synchronising call or a blocking copy call -> ``host_sync``;
- inside a DataLoader ``__next__`` -> ``data_loading``;
- otherwise, before that launch call returned, the host is either launching or working:
  ``cpu_launch`` (launch overhead) while it is inside a launch call or an op that launches GPU
  work, or in a short stretch (under ``HOST_WORK_MIN_NS``) between such launches (Python and
  dispatch of a loop that launches back to back), and so is the short wait (at most
  ``LAUNCH_LATENCY_NS``) between a launch that came late and its kernel starting;
  ``host_work`` in longer stretches that launch nothing: CPU ops on CPU tensors (a CPU
  optimizer, preprocessing), Python, compilation, a sleep, work on a result read back;
- the rest of the wait after the launch returned (the work was queued but held back by
  another stream, an event, or a graph's own scheduling) -> ``idle_other``.

The parts are disjoint and cover the window they are computed for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.p2p import p2p_kernels, wait_intervals
from profkit.analyzers.parts import PARTS  # noqa: F401 (re-exported)

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, distinct, row_groups, sorted_lookup, values_in
from profkit.model import RankData

SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "cuMemcpyDtoH", "cuMemcpyHtoD", "hipStreamSynchronize", "hipDeviceSynchronize",
    "hipEventSynchronize", "hipMemcpy", "aten::item", "aten::_local_scalar_dense",
})
COPY_CALLS_RE = r"^(?:cuda|hip|cu)Memcpy"
DATALOADER_RE = r"DataLoader|_DataLoaderIter|dataloader"
PAGEABLE_RE = "Pageable"
HOST_KINDS = (S.KIND_CPU_OP, S.KIND_ANNOTATION, S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_PYTHON,
              S.KIND_SYNC)
LAUNCH_KINDS = (S.KIND_RUNTIME, S.KIND_DRIVER)
LAUNCH_LATENCY_NS = 50_000  # a launched kernel on an idle GPU starts within this (typically 5-20 us)
# Host time between launching ranges longer than this is host work, shorter is the Python and
# dispatch of a loop launching back to back (a tiny eager op costs 5-30 us of host time).
HOST_WORK_MIN_NS = 100_000
OVERLAP = "comm_overlap_ns"  # communication hidden under compute: a view, not a part
BLOCKING_COPY = "blocking_copy_ns"  # GPU time of host-blocking copies (inside host_sync)
AFTER_SYNC = "after_sync_ns"  # cpu_launch time after a sync returned in the same gap (round trips)
Intervals = iv.Intervals
RANGE = [S.TID, S.TS_NS, S.DUR_NS]  # the columns of a thread's time range
LAUNCH_CALL_COLUMNS = (S.NAME, S.CORRELATION, *RANGE, S.EXTERNAL_ID)  # what the model reads
EMPTY: Intervals = (np.empty(0, np.int64), np.empty(0, np.int64))


def spans(frame: pd.DataFrame) -> Intervals:
    """The union of a frame's [ts, ts + dur) ranges."""
    start = frame[S.TS_NS].to_numpy(np.int64)
    return iv.union(start, start + frame[S.DUR_NS].to_numpy(np.int64))


def launch_calls(data: RankData) -> pd.DataFrame:
    """The runtime and driver calls with a correlation id (those that enqueued GPU work):
    :data:`LAUNCH_CALL_COLUMNS` of them, in event order; what the charged-time model reads
    of them, selected once."""
    calls = data.of_kinds(LAUNCH_KINDS, LAUNCH_CALL_COLUMNS)
    return calls[(calls[S.CORRELATION] >= 0).to_numpy()]


def blocking_copies(launch: pd.DataFrame, copies: pd.DataFrame
                    ) -> tuple[np.ndarray, pd.DataFrame]:
    """(mask over ``copies`` of copies whose own call blocked the host, those calls): pageable
    copies and copies issued by a synchronous memcpy API (``launch``: :func:`launch_calls`)."""
    calls = launch.loc[category_mask(launch[S.NAME], COPY_CALLS_RE),
                       [S.NAME, S.CORRELATION, *RANGE]]
    sync_api = calls[~category_mask(calls[S.NAME], "Async")]
    pageable = category_mask(copies[S.NAME], PAGEABLE_RE) if len(copies) else np.zeros(0, bool)
    by_api = copies[S.CORRELATION].isin(sync_api[S.CORRELATION]).to_numpy()
    blocking = pageable | by_api
    blocked_calls = calls[calls[S.CORRELATION].isin(copies.loc[blocking, S.CORRELATION])]
    return blocking, blocked_calls


def host_ranges(ev: pd.DataFrame, blocked_calls: pd.DataFrame, launch: pd.DataFrame
                ) -> dict[str, dict[int, Intervals]]:
    """Per thread: ``sync`` (blocked in a synchronising call or a blocking copy call),
    ``loader`` (inside a DataLoader ``__next__``) and ``launching`` (inside a launch call, or
    an op that launched GPU work: the op the launch call's External id names) time ranges
    (``launch``: :func:`launch_calls`)."""
    # Masks over all events, then the rows' numpy columns: no frame selected, concatenated
    # and grouped
    host, kind, names = values_in(ev[S.KIND], HOST_KINDS), ev[S.KIND], ev[S.NAME]
    tid, ts, dur = (ev[c].to_numpy() for c in RANGE)
    ext = ev[S.EXTERNAL_ID].to_numpy()
    sync = np.flatnonzero(host & values_in(names, SYNC_CALLS))
    loader = np.flatnonzero(host & category_mask(names, DATALOADER_RE))
    ops = np.flatnonzero(values_in(kind, (S.KIND_CPU_OP,)) & (ext >= 0)
                         & np.isin(ext, launch[S.EXTERNAL_ID].to_numpy()))

    def by_thread(rows: np.ndarray, *frames: pd.DataFrame) -> dict[int, Intervals]:
        parts = [(tid[rows], ts[rows], dur[rows]), *((f[c].to_numpy() for c in RANGE)
                                                     for f in frames)]
        return _by_thread(*(np.concatenate(c) for c in zip(*parts)))

    return {"sync": by_thread(sync, blocked_calls), "loader": by_thread(loader),
            "launching": by_thread(ops, launch)}


def _by_thread(tid: np.ndarray, start: np.ndarray, dur: np.ndarray) -> dict[int, Intervals]:
    """{thread: the union of its [start, start + dur) ranges}."""
    start, end = start.astype(np.int64), start.astype(np.int64) + dur.astype(np.int64)
    return {int(tid[rows[0]]): iv.union(start[rows], end[rows]) for rows in row_groups([tid])}


def charged_intervals(data: RankData, lo: int, hi: int,
                      by_thread: dict | None = None) -> dict[str, Intervals]:
    """Disjoint interval sets, one per part of :data:`PARTS`, covering [lo, hi); plus two
    views that are not parts: ``comm_overlap_ns`` (communication hidden under compute),
    ``blocking_copy_ns`` (the GPU-busy share of host_sync) and ``after_sync_ns`` (the share of
    cpu_launch in which the host works after returning from a synchronisation in the same
    idle gap: a round trip, GPU result -> host work -> next launch). ``by_thread``, when
    given, is filled with {(thread, part): intervals} of the host-side idle parts."""
    ev = data.events
    gpu = data.gpu_events
    launch = launch_calls(data)
    copies = gpu.loc[values_in(gpu[S.CLASS], (S.CLS_MEMCPY,)),
                     [S.NAME, S.CORRELATION, S.TS_NS, S.DUR_NS]]  # what is read of them
    blocking, blocked_calls = blocking_copies(launch, copies)
    start = gpu[S.TS_NS].to_numpy(np.int64)
    end = start + gpu[S.DUR_NS].to_numpy(np.int64)

    def of_class(*classes: str) -> Intervals:  # the union of the GPU ops of these classes
        rows = values_in(gpu[S.CLASS], classes)
        return iv.union(start[rows], end[rows])

    compute = of_class(S.CLS_COMPUTE, S.CLS_MEMSET)
    transfer = iv.subtract(spans(copies[~blocking]), compute)
    taken = iv.union_of(compute, transfer)
    comm_all = of_class(S.CLS_COMMUNICATION)
    comm = iv.subtract(comm_all, taken)
    taken = iv.union_of(taken, comm)
    bubble = iv.intersect(comm, wait_intervals(p2p_kernels(data)))
    comm = iv.subtract(comm, bubble)
    blocked_copy = iv.subtract(spans(copies[blocking]), taken)
    busy = iv.union_of(taken, blocked_copy)
    idle = idle_parts(launch, gpu, iv.complement(busy, lo, hi),
                      host_ranges(ev, blocked_calls, launch), by_thread)
    parts = {"compute": compute, "memcpy": transfer, "communication": comm,
             "pipeline_bubble": bubble, **idle}
    parts["host_sync"] = iv.union_of(parts["host_sync"], blocked_copy)
    parts[BLOCKING_COPY] = blocked_copy
    parts[OVERLAP] = iv.intersect(comm_all, compute)
    return {k: iv.clip(v, lo, hi) for k, v in parts.items()}


def idle_parts(launch: pd.DataFrame, gpu: pd.DataFrame, gaps: Intervals,
               ranges: dict[str, dict[int, Intervals]],
               by_thread: dict | None = None) -> dict[str, Intervals]:
    """The GPU-idle ``gaps`` split per instant into host_sync, data_loading, cpu_launch and
    idle_other (see module doc; ``launch``: :func:`launch_calls`); ``by_thread`` as in
    :func:`charged_intervals`."""
    out = {p: EMPTY for p in ("host_sync", "data_loading", "cpu_launch", "host_work",
                              "idle_other", AFTER_SYNC)}
    if len(gaps[0]) == 0:
        return out
    launch_start, launch_end, tid = next_launches(launch, gpu, gaps)
    host_end = np.minimum(gaps[1], np.maximum(gaps[0], launch_end))
    # After the launch returned: a late launch's latency is launch overhead; any longer wait,
    # or a wait for work queued before the gap began, is the work held back on the GPU side.
    late = launch_end > gaps[0]
    latency_end = np.where(late, np.minimum(gaps[1], host_end + LAUNCH_LATENCY_NS), host_end)
    out["cpu_launch"] = iv.union(host_end, latency_end)
    out["idle_other"] = iv.union(latency_end, gaps[1])
    # the latency after a late launch stays launch overhead: only host time can be host work
    for thread in distinct(tid):
        mine = tid == thread
        host = iv.union(gaps[0][mine], host_end[mine])
        thread_sync = ranges["sync"].get(int(thread), EMPTY)
        sync = iv.intersect(host, thread_sync)
        rest = iv.subtract(host, sync)
        loading = iv.intersect(rest, ranges["loader"].get(int(thread), EMPTY))
        launch_part = iv.subtract(rest, loading)
        after = iv.intersect(launch_part, _after_sync(gaps[0][mine], host_end[mine], thread_sync))
        out[AFTER_SYNC] = iv.union_of(out[AFTER_SYNC], after)
        work = host_work(launch_part, ranges["launching"].get(int(thread), EMPTY))
        mine = {"host_sync": sync, "data_loading": loading,
                "cpu_launch": iv.subtract(launch_part, work), "host_work": work}
        for part, ivs in mine.items():
            out[part] = iv.union_of(out[part], ivs)
            if by_thread is not None:
                by_thread[(int(thread), part)] = ivs
    return out


def host_work(host: Intervals, launching: Intervals) -> Intervals:
    """The ``host`` instants that fall in a stretch of at least :data:`HOST_WORK_MIN_NS`
    between two ``launching`` ranges of the thread: host work, as opposed to the launch
    overhead of launching back to back."""
    if len(host[0]) == 0:
        return EMPTY
    lo, hi = int(host[0][0]), int(host[1][-1])
    if len(launching[0]):
        lo, hi = min(lo, int(launching[0][0])), max(hi, int(launching[1][-1]))
    free = iv.complement(launching, lo, hi)
    long = (free[1] - free[0]) >= HOST_WORK_MIN_NS
    return iv.intersect(host, (free[0][long], free[1][long]))


def _after_sync(start: np.ndarray, end: np.ndarray, sync: Intervals) -> Intervals:
    """Per host segment [start, end) (a GPU-idle gap's host time): from the end of the first
    sync range that overlaps it to its end, where that sync began before the gap did, while
    the GPU still worked: the host waited for GPU results, then worked on them. A sync begun
    inside the gap waited for nothing (the GPU was idle): what follows it is no round trip
    (issue 40: a 14 us cudaDeviceSynchronize at a step's start, then 218 ms of video
    preprocessing before the step's first kernel). Empty where no such sync is."""
    if len(sync[0]) == 0 or len(start) == 0:
        return EMPTY
    k = np.searchsorted(sync[1], start, side="right")
    ok = k < len(sync[1])
    ok[ok] = (sync[0][k[ok]] < end[ok]) & (sync[0][k[ok]] < start[ok])
    return iv.union(np.minimum(sync[1][k[ok]], end[ok]), end[ok])


def next_launches(launch: pd.DataFrame, gpu: pd.DataFrame, gaps: Intervals
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each gap, the launch call of the GPU op that ends it: (start ns, end ns, thread)
    (``launch``: :func:`launch_calls`). A gap with no next op, or whose op has no launch
    call in the trace, gets the main launching thread with a launch at the gap's end (the
    host never launched in time)."""
    n = len(gaps[0])
    start, end = gaps[1].copy(), gaps[1].copy()
    tid = np.full(n, main_launch_thread(launch), dtype=np.int64)
    # each correlation's first launch call, by a search of the sorted correlations
    calls, first = np.unique(launch[S.CORRELATION].to_numpy(), return_index=True)
    order = np.argsort(gpu[S.TS_NS].to_numpy(), kind="stable")
    op_start = gpu[S.TS_NS].to_numpy()[order]
    op_corr = gpu[S.CORRELATION].to_numpy()[order]
    nxt = np.searchsorted(op_start, gaps[1], side="left")
    has = np.flatnonzero(nxt < len(op_start))
    corr = op_corr[nxt[has]]
    pos = sorted_lookup(calls, corr)
    found = pos >= 0
    rows, hit = has[found], first[pos[found]]
    start[rows] = launch[S.TS_NS].to_numpy()[hit]
    end[rows] = start[rows] + launch[S.DUR_NS].to_numpy()[hit]
    tid[rows] = launch[S.TID].to_numpy()[hit]
    return start, end, tid


def main_launch_thread(launch: pd.DataFrame) -> int:
    """The thread that issued the most launch calls (``launch``: :func:`launch_calls`; -1
    if none)."""
    return int(launch[S.TID].value_counts().idxmax()) if len(launch) else -1
