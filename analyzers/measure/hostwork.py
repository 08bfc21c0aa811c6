"""Where a rank's host work falls: before its step's first GPU op, or among the step's launches.

Host work (``charge.host_work``: the GPU idles while the host works without launching) has
different causes that need different advice, and the timeline tells them apart:

- ``head_ns``: host work between a step's start (its ``ProfilerStep`` range) and the step's
  first call that put work on the GPU, outside any named range: the GPU gets nothing to do
  until the host is done. ``input_ns``, the part of it in steps whose first GPU op is a
  host-to-device copy: the host prepared the step's input, then sent it (decoding,
  transforms, collation on the main thread; issue 40: why/preprocess, TimeSformer). Only this
  is work a DataLoader's workers could take over; a step that opens with a kernel (a sleep,
  Python, a batch made on the GPU) does not wait for its input.
- ``optimizer_ns``: host work inside an ``Optimizer.step#`` / ``Optimizer.zero_grad#`` range:
  the optimizer's own host time (a CPU optimizer, or a per-parameter loop of small ops).
- ``annotated_ns``: host work inside another user range (``record_function``; the step's
  own range and the DataLoader's aside): code the user named.
- the rest, among the step's launches: Python between ops, PyTorch dispatch and autograd
  bookkeeping of ops that launch nothing, tensor-subclass (DTensor) redistribution, hooks.

One row per rank, ns summed over the used steps (``by_thread`` is already cut to them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import LAUNCH_KINDS

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, values_in
from profkit.model import RankData

OPTIMIZER_RE = r"^Optimizer\.(?:step|zero_grad)#"
UNNAMED_RE = r"^ProfilerStep#|DataLoader|_DataLoaderIter"  # ranges that name no host code
COLUMNS = ("rank", "host_work_ns", "head_ns", "input_ns", "optimizer_ns", "annotated_ns")
INPUT_COPY = "HtoD"  # the sub-class of a host-to-device copy


def host_work_where(data: RankData, by_thread: dict) -> pd.DataFrame:
    """One row (:data:`COLUMNS`): the rank's host work split by where it falls (module doc)."""
    events, rank = data.events, data.rank
    work = {thread: ivs for (thread, part), ivs in by_thread.items()
            if part == "host_work" and len(ivs[0])}
    row = dict.fromkeys(COLUMNS, 0)
    row["rank"] = rank
    if not work:
        return pd.DataFrame([row], columns=list(COLUMNS))
    heads, inputs = _heads(events, data.gpu_events, data.steps)
    names = events[S.NAME]
    annotation = values_in(events[S.KIND], (S.KIND_ANNOTATION,))
    optimizer = annotation & category_mask(names, OPTIMIZER_RE)
    named = annotation & ~optimizer & ~category_mask(names, UNNAMED_RE)
    tid = events[S.TID].to_numpy()
    start = events[S.TS_NS].to_numpy(np.int64)
    end = start + events[S.DUR_NS].to_numpy(np.int64)

    def spans(rows: np.ndarray) -> iv.Intervals:  # the union of the rows' ranges
        return iv.union(start[rows], end[rows])

    for thread, ivs in work.items():
        mine = tid == thread
        opt = iv.intersect(ivs, spans(optimizer & mine))
        rest = iv.subtract(ivs, opt)
        ann = iv.intersect(rest, spans(named & mine))
        row["host_work_ns"] += iv.total(ivs)
        row["optimizer_ns"] += iv.total(opt)
        row["annotated_ns"] += iv.total(ann)
        head = iv.intersect(iv.subtract(rest, ann), heads)
        row["head_ns"] += iv.total(head)
        row["input_ns"] += iv.total(iv.intersect(head, inputs))
    return pd.DataFrame([row], columns=list(COLUMNS))


def _heads(events: pd.DataFrame, gpu: pd.DataFrame,
           steps: pd.DataFrame) -> tuple[iv.Intervals, iv.Intervals]:
    """Per recorded step, [its start, its first call that put work on the GPU): all of them,
    and those whose first GPU op is a host-to-device copy (none without steps). A call counts
    when a GPU record has its correlation id (a ``cudaDeviceSynchronize`` launches nothing)."""
    none = (np.empty(0, np.int64), np.empty(0, np.int64))
    if steps is None or not len(steps):
        return none, none
    start = np.sort(steps[S.TS_NS].to_numpy(np.int64))
    corr = events[S.CORRELATION].to_numpy()
    rows = np.flatnonzero(values_in(events[S.KIND], LAUNCH_KINDS) & (corr >= 0)
                          & np.isin(corr, gpu[S.CORRELATION].to_numpy()))
    if not len(rows):
        return none, none
    launch = events[S.TS_NS].to_numpy()[rows]
    rows = rows[np.argsort(launch, kind="quicksort")]  # as sort_values(ts) orders them
    launch = events[S.TS_NS].to_numpy(np.int64)[rows]
    copies = gpu[S.CORRELATION].to_numpy()[values_in(gpu[S.SUBCLASS], (INPUT_COPY,))]
    is_copy = np.isin(corr[rows], copies)
    k = np.minimum(np.searchsorted(launch, start, side="left"), len(launch) - 1)
    nxt = np.concatenate([start[1:], [np.iinfo(np.int64).max]])
    end = np.where(launch[k] >= start, np.minimum(launch[k], nxt), start)
    first_copy = is_copy[k] & (launch[k] >= start)
    return iv.union(start, end), iv.union(start[first_copy], end[first_copy])

