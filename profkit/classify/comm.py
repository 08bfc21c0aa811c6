"""Communication kernels known by what they are, not only by their name.

Kernels of communication libraries that name them like any other kernel (DeepEP builds,
custom all-to-all kernels) or carry no collective arguments are found from the trace around
them, in this order (``profkit/classify/events.py`` has the full precedence):

1. collective arguments on the kernel: communication, unless a user rule says otherwise;
2. for kernels whose name says nothing (compute/"other"): launched by a communication CPU op
   (``record_param_comms``, ``nccl:*``, ``c10d::*``), or launched inside a CPU range or
   user annotation whose name says dispatch, combine, all_reduce, all_to_all, all_gather or
   reduce_scatter (DualPipe's "dispatch(F)", "combine(B)"); the sub-class follows the
   innermost such range;
3. for kernels still unknown: on a stream where communication kernels take at least half
   the kernel time and no kernel has a known compute name (a dedicated communication
   stream), they take the stream's main collective.

A kernel with a known compute name keeps it against 2 and 3: a range is coarse (the gating
GEMM runs inside "dispatch(F)"), a kernel name says what ran.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify import events as classify
from profkit.classify.folded import FoldedPattern
from profkit.columns import category_mask, sorted_lookup, values_in

# Names of CPU ranges whose launches are communication (word-start: not "redispatch"), in
# any case (searched folded, per distinct name: _RANGE).
COMM_RANGE_RE = re.compile(r"(?<![a-z])(?:dispatch|combine|all_?reduce|all_?to_?all|"
                           r"all_?gather|reduce_?scatter)", re.IGNORECASE)
_RANGE = FoldedPattern(COMM_RANGE_RE.pattern)
COMM_STREAM_MIN_FRAC = 0.5  # communication share of a stream's kernel time (rule 3)


def upgrade(ev: pd.DataFrame, is_gpu: np.ndarray, args, cls: np.ndarray, sub: np.ndarray,
            strength: np.ndarray) -> None:
    """Apply rules 1-3 (module doc) to ``cls`` / ``sub`` / ``strength``: those of the GPU
    events alone, the rows ``np.flatnonzero(is_gpu)`` of ``ev`` in order (a tenth of a rank:
    no array of every row to fill, nor to read the GPU rows back from)."""
    gpu_rows = np.flatnonzero(is_gpu)
    kernel = values_in(ev[S.KIND], (S.KIND_KERNEL,))[gpu_rows]
    if args:
        rows = np.fromiter(args.keys(), np.int64, len(args))
        for j, a in zip(sorted_lookup(gpu_rows, rows).tolist(), args.values()):
            if j >= 0 and kernel[j] and a.collective is not None \
                    and strength[j] < classify.RULED:
                cls[j], sub[j] = S.CLS_COMMUNICATION, classify.collective_kind(a.collective)
    unknown = _still_compute(kernel & (strength == classify.UNKNOWN), cls)
    _launched_by_comm_ops(ev, is_gpu, gpu_rows, unknown, cls, sub)
    _launched_in_comm_ranges(ev, gpu_rows, _still_compute(unknown, cls), cls, sub)
    _on_comm_streams(ev, gpu_rows, kernel, _still_compute(unknown, cls), strength, cls, sub)


def _still_compute(rows: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """``rows & (cls == compute)``, the class compared on those rows only (a tenth of a
    rank's events: an object array compared whole costs ~3 ms a 200k-event rank)."""
    out = rows.copy()
    out[rows] = cls[rows] == S.CLS_COMPUTE
    return out


def _launched_by_comm_ops(ev, is_gpu, gpu_rows, unknown, cls, sub) -> None:
    """Kernels whose External id is a communication CPU op's (``unknown``, ``cls``, ``sub``:
    of the GPU rows ``gpu_rows``, as in the functions below)."""
    comm_ops = ~is_gpu & category_mask(ev[S.NAME], classify.COMM_OP_RE)
    if not comm_ops.any() or not unknown.any():
        return
    ext = ev[S.EXTERNAL_ID].to_numpy()
    comm_ids = np.setdiff1d(np.unique(ext[comm_ops]), [-1])
    rows = np.flatnonzero(unknown)
    launched = rows[np.isin(ext[gpu_rows[rows]], comm_ids)]
    cls[launched], sub[launched] = S.CLS_COMMUNICATION, "other"


def _launched_in_comm_ranges(ev, gpu_rows, unknown, cls, sub) -> None:
    """Kernels whose launch call lies inside a communication-named CPU range (rule 2)."""
    if not unknown.any():
        return
    kind, names = ev[S.KIND], ev[S.NAME]
    named = category_mask(names, _RANGE) | category_mask(names, classify.COMM_OP_RE)
    ranges = values_in(kind, (S.KIND_ANNOTATION, S.KIND_CPU_OP)) & named
    launch = values_in(kind, (S.KIND_RUNTIME, S.KIND_DRIVER)) & (ev[S.CORRELATION] >= 0).to_numpy()
    if not ranges.any() or not launch.any():
        return
    corr, collective = _launch_collectives(ev, np.flatnonzero(ranges), np.flatnonzero(launch))
    rows = np.flatnonzero(unknown)
    if not len(corr):
        return
    wanted = ev[S.CORRELATION].to_numpy()[gpu_rows[rows]]
    pos = sorted_lookup(corr, wanted)
    hit = pos >= 0
    cls[rows[hit]], sub[rows[hit]] = S.CLS_COMMUNICATION, collective[pos[hit]]


def _launch_collectives(ev: pd.DataFrame, ranges: np.ndarray,
                        launches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(correlations, in order, and the collective kind of each) of the launches inside a
    range on the same thread: the kind of the innermost range holding the launch call, of
    the last such call of a correlation."""
    ts, dur = ev[S.TS_NS].to_numpy(), ev[S.DUR_NS].to_numpy()
    pid, tid = ev[S.PID].to_numpy(), ev[S.TID].to_numpy()
    names = ev[S.NAME]
    codes = names.cat.codes.to_numpy()[ranges]
    distinct = np.unique(codes)
    categories = np.asarray(names.cat.categories, dtype=object)
    kinds = np.array([classify.collective_kind(n) for n in categories[distinct].tolist()],
                     dtype=object)
    r_kind = kinds[np.searchsorted(distinct, codes)]
    l_thread = pid[launches] * (1 << 32) + tid[launches]  # one key per thread
    order = np.lexsort((ts[launches], l_thread))
    l_rows, l_thread, l_ts = launches[order], l_thread[order], ts[launches][order]
    kind = np.full(len(l_rows), None, dtype=object)
    by_start = np.argsort(ts[ranges], kind="stable")  # outer ranges first: inner ones win
    r_rows = ranges[by_start]
    first, last = _launches_inside(l_thread, l_ts, pid[r_rows] * (1 << 32) + tid[r_rows],
                                   ts[r_rows], ts[r_rows] + dur[r_rows])
    for a, b, collective in zip(first.tolist(), last.tolist(), r_kind[by_start]):
        kind[a:b] = collective
    inside = kind != None  # noqa: E711 (elementwise comparison)
    corr = ev[S.CORRELATION].to_numpy()[l_rows[inside]]
    order = np.argsort(corr, kind="stable")  # a correlation's calls in launch order
    corr, kind = corr[order], kind[inside][order]
    last = np.ones(len(corr), dtype=bool)
    last[:-1] = corr[1:] != corr[:-1]
    return corr[last], kind[last]


def _launches_inside(l_thread: np.ndarray, l_ts: np.ndarray, r_thread: np.ndarray,
                     r_start: np.ndarray, r_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For launches sorted by (thread, time) and ranges: the slice [first, last) of the
    launches on each range's thread inside [start, end] (both ends included). All ranges at
    once, by one key per launch (thread rank, time) where the times leave room for it; else
    range by range."""
    if not len(l_thread) or not len(r_thread):
        zeros = np.zeros(len(r_thread), dtype=np.int64)
        return zeros, zeros
    threads = np.unique(l_thread)
    t_min = min(int(l_ts.min()), int(r_start.min()))
    width = max(int(l_ts.max()), int(r_end.max())) - t_min + 2
    if width * (len(threads) + 1) < 1 << 62:
        at = np.searchsorted(threads, r_thread)
        known = (at < len(threads)) & (threads[np.minimum(at, len(threads) - 1)] == r_thread)
        keys = np.searchsorted(threads, l_thread) * width + (l_ts - t_min)
        first = np.searchsorted(keys, at * width + (r_start - t_min), side="left")
        last = np.searchsorted(keys, at * width + (r_end - t_min), side="right")
        return np.where(known, first, 0), np.where(known, last, 0)
    first = np.zeros(len(r_thread), dtype=np.int64)
    last = np.zeros(len(r_thread), dtype=np.int64)
    for i, (key, start, end) in enumerate(zip(r_thread.tolist(), r_start.tolist(), r_end.tolist())):
        lo, hi = np.searchsorted(l_thread, key, "left"), np.searchsorted(l_thread, key, "right")
        first[i] = lo + np.searchsorted(l_ts[lo:hi], start, side="left")
        last[i] = lo + np.searchsorted(l_ts[lo:hi], end, side="right")
    return first, last


def _on_comm_streams(ev, gpu_rows, kernel, unknown, strength, cls, sub) -> None:
    """Unknown kernels on a stream whose kernel time is mostly communication and where no
    kernel has a known compute name (rule 3)."""
    rows = np.flatnonzero(kernel)
    comm = cls[rows] == S.CLS_COMMUNICATION
    if not unknown.any() or not comm.any():
        return
    at = gpu_rows[rows]
    stream = ev[S.DEVICE].to_numpy()[at] * (1 << 32) + ev[S.STREAM].to_numpy()[at]
    codes, streams = pd.factorize(stream)
    dur = ev[S.DUR_NS].to_numpy()[at].astype(float)
    total = np.bincount(codes, weights=dur, minlength=len(streams))
    comm_ns = np.bincount(codes, weights=dur * comm, minlength=len(streams))
    named = (cls[rows] == S.CLS_COMPUTE) & (strength[rows] > classify.UNKNOWN)
    chosen = ((comm_ns >= COMM_STREAM_MIN_FRAC * total) & (comm_ns > 0)
              & (np.bincount(codes, weights=named, minlength=len(streams)) == 0))
    for code in np.flatnonzero(chosen):
        mine = codes == code
        main = pd.Series(dur[mine & comm]).groupby(sub[rows][mine & comm]).sum().idxmax()
        target = rows[mine & unknown[rows]]
        cls[target], sub[target] = S.CLS_COMMUNICATION, main
