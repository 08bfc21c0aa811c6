"""Tensor (and sequence) parallelism: the collectives inside the layers, and how much of the
step they hold the GPU up for their own transfer (not for a late peer).

A collective is tensor-parallel when it is issued inside a DTensor redistribution
(``Redistribute`` / ``RedistributeBackward``, or the backward of ``DTensor.from_local`` /
``to_local``: ``ColwiseParallel`` / ``RowwiseParallel``'s all-reduces, ``SequenceParallel``'s
all-gather and reduce-scatter) or in a process group whose
description names the tensor dimension (DeviceMesh's ``mesh_tp``, ``tp``, ``tensor``). A
data-parallel gradient all-reduce in the same run (``mesh_dp``, DDP) is neither.

Per rank and used step: how many, their median size, their exposed time (the kernel while
no compute kernel runs), the part of that spent waiting for the last peer (comms'
``collective_waits``: a straggler's peers wait in their TP all-reduce, which no TP setting
would fix), and the rest, the exposed transfer, with its share of the step. The exposed
transfer is what overlapping the collectives with the matmuls (async TP) would hide at most;
fewer, larger collectives per sample (a larger microbatch) shrink its fixed-latency part.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.comms import COLLECTIVE_WAITS, EXPOSED_WAIT_NS, START_NS
from profkit.analyzers.result import Result

from profkit import intervals
from profkit import schema as S
from profkit.model import RankData

TOPIC = "tensor_parallel"
TP_TABLE = "tp_ranks"
DTENSOR_OPS = ("Redistribute", "RedistributeBackward", "_FromTorchTensor",
               "_FromTorchTensorBackward", "_ToTorchTensor", "_ToTorchTensorBackward")
TP_GROUP = re.compile(r"(?:^|[_\W])(?:tp|tensor)(?:$|[_\W])", re.IGNORECASE)


def _spans(df: pd.DataFrame) -> intervals.Intervals:
    return intervals.union(df[S.TS_NS].to_numpy(np.int64),
                           (df[S.TS_NS] + df[S.DUR_NS]).to_numpy(np.int64))


def tp_collectives(data: RankData, used: dict[int, int] | None) -> pd.DataFrame:
    """This rank's tensor-parallel collectives in the used steps (module doc): start (the
    collectives table's ts_ns), step, bytes, and exposed ns (no compute kernel running)."""
    coll = data.collectives
    if used is not None:
        coll = coll[coll[S.STEP].isin(list(used))]
    ev = data.events
    ops = ev[(ev[S.KIND] == S.KIND_CPU_OP) & ev[S.NAME].isin(DTENSOR_OPS)]
    cpu = coll[S.CPU_TS_NS].to_numpy(np.int64)
    inside = np.zeros(len(coll), bool)
    if len(ops) and len(coll):
        starts, ends = _spans(ops)
        idx = np.searchsorted(starts, cpu, side="right") - 1
        ok = idx >= 0
        inside[ok] = cpu[ok] <= ends[idx[ok]]
    named = coll[S.PG_DESC].astype(str).str.contains(TP_GROUP).to_numpy()
    tp = coll[(inside | named) & (cpu >= 0) & coll[S.ON_GPU].astype(bool)]
    if tp.empty:
        return pd.DataFrame(columns=[START_NS, S.STEP, S.MSG_BYTES, "exposed_ns"])
    return exposed_collectives(data, tp)


def exposed_collectives(data: RankData, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of the collectives table as (start ns, step, bytes, exposed ns): the part of
    each one's kernel in which no compute kernel runs."""
    ev = data.events
    compute = _spans(ev[(ev[S.KIND] == S.KIND_KERNEL) & (ev[S.CLASS] == S.CLS_COMPUTE)])
    exposed = [intervals.total(intervals.subtract(
        (np.array([s], np.int64), np.array([s + d], np.int64)), compute))
        for s, d in zip(rows[S.TS_NS].to_numpy(np.int64), rows[S.DUR_NS].to_numpy(np.int64))]
    return pd.DataFrame({START_NS: rows[S.TS_NS].to_numpy(np.int64),
                         S.STEP: rows[S.STEP].to_numpy(np.int64),
                         S.MSG_BYTES: rows[S.MSG_BYTES].to_numpy(float),
                         "exposed_ns": np.asarray(exposed, np.int64)})


def waited_ns(rows: pd.DataFrame, collectives: Result, rank: int) -> np.ndarray:
    """Per row of :func:`exposed_collectives`, the part of its exposed time spent waiting for
    the last peer (the matched collectives' exposed wait; 0 where unmatched)."""
    waits = collectives.tables.get(COLLECTIVE_WAITS, pd.DataFrame())
    if waits.empty or rows.empty:
        return np.zeros(len(rows))
    mine = waits[waits["rank"] == rank].drop_duplicates(START_NS).set_index(START_NS)
    got = mine[EXPOSED_WAIT_NS].reindex(rows[START_NS].to_numpy()).fillna(0).to_numpy(float)
    return np.minimum(got, rows["exposed_ns"].to_numpy(float))


def combine_tp(values: dict[int, pd.DataFrame | None], collectives: Result,
               step_ms: dict[int, float]) -> Result:
    """One row per rank with tensor-parallel collectives (module doc); no topic without."""
    rows = []
    for rank, tp in sorted(values.items()):
        if tp is None or tp.empty:
            continue
        n_steps = max(tp[S.STEP].nunique(), 1)
        waited = waited_ns(tp, collectives, rank)
        transfer = float((tp["exposed_ns"].to_numpy(float) - waited).sum()) / n_steps / 1e6
        step = step_ms.get(rank, np.nan)
        rows.append({"rank": rank, "collectives_per_step": len(tp) / n_steps,
                     "median_mib": float(tp[S.MSG_BYTES].median()) / 2**20,
                     "exposed_ms_per_step": float(tp["exposed_ns"].sum()) / n_steps / 1e6,
                     "waiting_ms_per_step": float(waited.sum()) / n_steps / 1e6,
                     "transfer_ms_per_step": transfer, "step_ms": step,
                     "transfer_share": transfer / step if step and step > 0 else np.nan})
    if not rows:
        return Result()
    return Result(tables={TP_TABLE: pd.DataFrame(rows)}, facts={"topic": TOPIC})
