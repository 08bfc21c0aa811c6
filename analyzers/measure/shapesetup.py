"""Setup for new input shapes: CPU ops whose first call with a shape costs far more host
time than their later calls with the same shape.

Some ops prepare per input shape and cache what they prepared: cuDNN's attention builds
an execution plan for each new shape (50-80 ms a call on H200, 0.1-0.2 ms once built),
cuBLASLt chooses a GEMM algorithm for each new problem size (4-20 ms), ``cudnn.benchmark``
times every convolution algorithm. With a fixed shape this is paid once, before the steps
that matter; when the shapes keep changing (a new sequence length every step) it is paid
every step, while the GPU waits: the charged-time model calls that wait launch overhead
(the host is inside an op that launches work), but CUDA graphs cannot remove it.

A *setup call* is the first call on its thread of an op name with a given ``Input Dims``
(at least one dimension recorded) whose host time exceeds the median of the later calls
with the same name and shape by at least :data:`SETUP_MIN_NS` and :data:`SETUP_RATIO`
times. Of nested setup calls (``aten::linear`` > ``aten::matmul`` > ``aten::mm``) only the
innermost counts. A shape first seen before the trace starts is not seen here, and an op
called once per shape (no later call to compare with) is never a setup call: the count is
a lower bound.

:func:`shape_setup` gives one row per rank and op name (:data:`COLUMNS`) over the used
steps: the setup calls, the host time beyond their repeats, and the GPU-idle time of the
host side's parts inside them (``idle_ns``; per part ``cpu_launch_ns`` and ``host_work_ns``,
from the charged-time model's intervals).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import EMPTY
from profkit.analyzers.parts import HOST_SIDE

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, unique_rows, values_in
from profkit.model import RankData

SETUP_MIN_NS = 1_000_000  # the first call's excess over its repeats, at least
SETUP_RATIO = 10.0  # the first call at least this times its repeats' median
SHAPED_RE = r"\d"  # an Input Dims text with at least one dimension
COLUMNS = ("rank", "name", "calls", "steps", "rank_steps", "setup_ns", "idle_ns",
           *(f"{p}_ns" for p in HOST_SIDE), "first_ns", "repeat_ns", "dims")


def setup_calls(events: pd.DataFrame) -> pd.DataFrame:
    """The innermost setup calls of ``events`` (module doc): their rows, with ``repeat_ns``
    (the median host time of the later calls with the same name and shape on the thread)."""
    ops = values_in(events[S.KIND], (S.KIND_CPU_OP,)) & category_mask(events[S.INPUT_DIMS],
                                                                       SHAPED_RE)
    dur = events[S.DUR_NS].to_numpy(np.int64)
    rows = np.flatnonzero(ops)
    long = dur[rows] >= SETUP_MIN_NS  # only these can be a setup call
    if not long.any():
        return events.iloc[:0].assign(repeat_ns=np.empty(0, np.int64))
    # the calls of the long calls' names and shapes (a lookup per code), then of their pairs
    names, dims = events[S.NAME].array.codes, events[S.INPUT_DIMS].array.codes
    rows = rows[_present(names, rows[long])[names[rows]] & _present(dims, rows[long])[dims[rows]]]
    key = unique_rows([events[S.TID].to_numpy(np.int64)[rows], names[rows], dims[rows]])[1]
    keep = np.isin(key, key[dur[rows] >= SETUP_MIN_NS])
    mine, mkey = rows[keep], key[keep]
    ts = events[S.TS_NS].to_numpy(np.int64)[mine]
    order = np.lexsort((ts, mkey))
    mine, mkey = mine[order], mkey[order]
    first = np.r_[True, mkey[1:] != mkey[:-1]]
    group = np.cumsum(first) - 1
    count = np.bincount(group)
    # the median of the later calls: sorted by duration within the group, the middle one
    later = ~first
    by_dur = np.lexsort((dur[mine[later]], group[later]))
    later_dur, later_group = dur[mine[later]][by_dur], group[later][by_dur]
    start = np.searchsorted(later_group, np.arange(len(count)))
    n_later = count - 1
    repeat = np.full(len(count), -1, np.int64)
    has = n_later > 0
    lo = later_dur[start[has] + (n_later[has] - 1) // 2]
    hi = later_dur[start[has] + n_later[has] // 2]
    repeat[has] = (lo + hi) // 2
    first_rows = mine[first]
    first_dur = dur[first_rows]
    setup = has & (first_dur - repeat >= SETUP_MIN_NS) & (first_dur >= SETUP_RATIO * repeat)
    at, in_order = first_rows[setup], np.argsort(first_rows[setup])  # in event order
    found = events.iloc[at[in_order]].assign(repeat_ns=repeat[setup][in_order])
    return found[~_holds_another(found)]


def _present(codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A lookup by code: whether ``rows`` use the code."""
    out = np.zeros(int(codes.max(initial=0)) + 1, bool)
    out[codes[rows]] = True
    return out


def _holds_another(calls: pd.DataFrame) -> np.ndarray:
    """Per call: whether another of ``calls`` on its thread lies inside it (then the inner
    one is the setup, the outer only waits for it). By start (of equal starts the longer
    first), a call holds another when a later one ends no later than it does."""
    start = calls[S.TS_NS].to_numpy(np.int64)
    end = start + calls[S.DUR_NS].to_numpy(np.int64)
    tid = calls[S.TID].to_numpy()
    out = np.zeros(len(calls), bool)
    for t in np.unique(tid).tolist():
        idx = np.flatnonzero(tid == t)
        order = idx[np.lexsort((-end[idx], start[idx]))]
        later_end = np.minimum.accumulate(end[order][::-1])[::-1]  # the least end from here on
        out[order[:-1]] = later_end[1:] <= end[order[:-1]]
    return out


def shape_setup(data: RankData, by_thread: dict, steps: pd.DataFrame) -> pd.DataFrame:
    """Per op name, the rank's setup calls in its used steps (module doc; ``by_thread``:
    the charged-time model's intervals per (thread, part), cut to the used steps)."""
    used = set() if steps is None or steps.empty else set(
        steps.loc[steps["used"].astype(bool), S.STEP].tolist())
    if not used:
        return pd.DataFrame(columns=list(COLUMNS))
    calls = setup_calls(data.events)
    calls = calls[calls[S.STEP].isin(used).to_numpy()]
    if calls.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    start = calls[S.TS_NS].to_numpy(np.int64)
    end = start + calls[S.DUR_NS].to_numpy(np.int64)
    tid = calls[S.TID].to_numpy()
    idle = {p: np.zeros(len(calls), np.int64) for p in HOST_SIDE}
    for t in np.unique(tid).tolist():
        mine = tid == t
        for part in HOST_SIDE:
            waits = by_thread.get((int(t), part), EMPTY)
            idle[part][mine] = iv.covered_each(waits, start[mine], end[mine])
    names, dims = calls[S.NAME].astype(str).tolist(), calls[S.INPUT_DIMS].astype(str).tolist()
    step, dur = calls[S.STEP].tolist(), calls[S.DUR_NS].tolist()
    repeat = calls["repeat_ns"].tolist()
    per: dict[str, list] = {}  # a few calls: summed in Python, in order of first appearance
    for i, name in enumerate(names):
        per.setdefault(name, []).append(i)
    rows = []
    for name, idx in per.items():
        waits = [int(idle[p][idx].sum()) for p in HOST_SIDE]
        rows.append((data.rank, name, len(idx), len({step[i] for i in idx}), len(set(step)),
                     sum(dur[i] - repeat[i] for i in idx), sum(waits), *waits,
                     int(np.median([dur[i] for i in idx])),
                     int(np.median([repeat[i] for i in idx])), dims[idx[0]]))
    rows.sort(key=lambda r: (-r[6], r[1]))
    return pd.DataFrame(rows, columns=list(COLUMNS))
