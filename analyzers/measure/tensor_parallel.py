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
    k = ev[(ev[S.KIND] == S.KIND_KERNEL) & (ev[S.CLASS] == S.CLS_COMPUTE)]
    compute = _spans(k)
    exposed = [intervals.total(intervals.subtract(
        (np.array([s], np.int64), np.array([s + d], np.int64)), compute))
        for s, d in zip(tp[S.TS_NS].to_numpy(np.int64), tp[S.DUR_NS].to_numpy(np.int64))]
    return pd.DataFrame({START_NS: tp[S.TS_NS].to_numpy(np.int64),
                         S.STEP: tp[S.STEP].to_numpy(np.int64),
                         S.MSG_BYTES: tp[S.MSG_BYTES].to_numpy(float),
                         "exposed_ns": np.asarray(exposed, np.int64)})


def combine_tp(values: dict[int, pd.DataFrame | None], collectives: Result,
               step_ms: dict[int, float]) -> Result:
    """One row per rank with tensor-parallel collectives (module doc); no topic without."""
    waits = collectives.tables.get(COLLECTIVE_WAITS, pd.DataFrame())
    rows = []
    for rank, tp in sorted(values.items()):
        if tp is None or tp.empty:
            continue
        n_steps = max(tp[S.STEP].nunique(), 1)
        mine = waits[waits["rank"] == rank][[START_NS, EXPOSED_WAIT_NS]] if len(waits) else \
            pd.DataFrame(columns=[START_NS, EXPOSED_WAIT_NS])
        joined = tp.merge(mine, on=START_NS, how="left").fillna({EXPOSED_WAIT_NS: 0})
        waited = np.minimum(joined[EXPOSED_WAIT_NS].to_numpy(float), joined["exposed_ns"])
        transfer = float((joined["exposed_ns"] - waited).sum()) / n_steps / 1e6
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
