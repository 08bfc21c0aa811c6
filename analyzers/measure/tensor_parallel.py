"""Tensor (and sequence) parallelism: the collectives inside the layers, and how much of the
step they hold the GPU up for their own transfer (not for a late peer).

A collective is tensor-parallel when it is issued inside a DTensor redistribution
(``Redistribute`` / ``RedistributeBackward``, or the backward of ``DTensor.from_local`` /
``to_local``: ``ColwiseParallel`` / ``RowwiseParallel``'s all-reduces, ``SequenceParallel``'s
all-gather and reduce-scatter), in a DTensor op's own dispatch (``PythonSubclass``: an
optimizer step reducing a sequence-parallel norm's partial gradients), or inside a compiled
graph (``CompiledFunction``, ``## Call CompiledFxGraph``: Inductor's functional collectives,
and async TP's symmetric-memory kernels, found by their launch), but never inside FSDP's hook
ranges (FSDP2's own collectives run on DTensors too) (:func:`issued_by_model`); or in a
process group whose description names the tensor dimension (DeviceMesh's ``mesh_tp``,
``tp``, ``tensor``). A 1-D DeviceMesh over every rank runs on the default group, whose name
says nothing. A data-parallel gradient all-reduce in the same run (``mesh_dp``, DDP) is
neither.

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
from profkit.analyzers.measure.charge import spans
from profkit.analyzers.measure.comms import COLLECTIVE_WAITS, EXPOSED_WAIT_NS, START_NS
from profkit.analyzers.result import Result

from profkit import intervals
from profkit import schema as S
from profkit.columns import category_mask, values_in
from profkit.model import RankData

TOPIC = "tensor_parallel"
TP_TABLE = "tp_ranks"
# ranges inside which a collective is the model's own (DTensor, compiled graphs), and the
# sharding frameworks' hook ranges, inside which it is theirs
MODEL_COLLECTIVE_RE = (r"^(?:Redistribute|RedistributeBackward|_FromTorchTensor|"
                       r"_ToTorchTensor|_FromTorchTensorBackward|_ToTorchTensorBackward)$|"
                       r"^CompiledFunction|^## Call CompiledFxGraph|^Torch-Compiled Region|"
                       r"^PythonSubclass$")  # a DTensor op's own dispatch (optimizer steps)
SHARDING_HOOK_RE = r"^FSDP::|^FullyShardedDataParallel\."
SPLIT_KINDS = ("all_gather", "reduce_scatter")  # sequence parallel's halves of an all-reduce
SPAN = [S.TS_NS, S.DUR_NS]  # the columns charge.spans reads
TP_GROUP = re.compile(r"(?:^|[_\W])(?:tp|tensor)(?:$|[_\W])", re.IGNORECASE)


def issued_by_model(data: RankData, c: pd.DataFrame) -> np.ndarray:
    """Per collective: issued by the model's own layers (inside a DTensor redistribution or a
    compiled graph: tensor and sequence parallelism's activations, whatever the group is
    called), not by a sharding framework's hooks (FSDP's ranges, which hold FSDP2's
    DTensor all-gathers too)."""
    ev = data.events
    host = values_in(ev[S.KIND], (S.KIND_CPU_OP, S.KIND_ANNOTATION))
    cpu = c[S.CPU_TS_NS].to_numpy(np.int64).copy()
    unrecorded = cpu < 0  # a kernel with no c10d record (symmetric memory's): its launch
    if unrecorded.any():
        rt = ev[(ev[S.KIND] == S.KIND_RUNTIME) & (ev[S.CORRELATION] >= 0)]
        launch = pd.Series(rt[S.TS_NS].to_numpy(np.int64), index=rt[S.CORRELATION].to_numpy())
        launch = launch[~launch.index.duplicated()]
        got = launch.reindex(c[S.CORRELATION].to_numpy()[unrecorded]).to_numpy()
        cpu[unrecorded] = np.where(np.isnan(got), -1, got).astype(np.int64)
    model = spans(ev.loc[host & category_mask(ev[S.NAME], MODEL_COLLECTIVE_RE), SPAN])
    hooks = spans(ev.loc[host & category_mask(ev[S.NAME], SHARDING_HOOK_RE), SPAN])
    return intervals.holds(model, cpu) & ~intervals.holds(hooks, cpu)


def tp_collectives(data: RankData, used: dict[int, int] | None) -> pd.DataFrame:
    """This rank's tensor-parallel collectives in the used steps (module doc): start (the
    collectives table's ts_ns), step, bytes, and exposed ns (no compute kernel running)."""
    coll = data.collectives
    if used is not None:
        coll = coll[coll[S.STEP].isin(list(used))]
    inside = issued_by_model(data, coll)
    cpu = coll[S.CPU_TS_NS].to_numpy(np.int64)
    named = coll[S.PG_DESC].astype(str).str.contains(TP_GROUP).to_numpy()
    tp = coll[(inside | named) & (cpu >= 0) & coll[S.ON_GPU].astype(bool)]
    if tp.empty:
        return pd.DataFrame(columns=[START_NS, S.STEP, S.MSG_BYTES, "exposed_ns", "kind",
                                     "group_size", "async_tp"])
    # kernels with no c10d record issued by the model: async TP's symmetric-memory transfers
    symm = bool((inside & (cpu < 0)).any())
    return exposed_collectives(data, tp).assign(
        kind=tp[S.COLL_NAME].astype(str).to_numpy(),
        group_size=tp[S.GROUP_SIZE].to_numpy(np.int64), async_tp=symm)


def exposed_collectives(data: RankData, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of the collectives table as (start ns, step, bytes, exposed ns): the part of
    each one's kernel in which no compute kernel runs."""
    ev = data.events
    compute = spans(ev.loc[(ev[S.KIND] == S.KIND_KERNEL) & (ev[S.CLASS] == S.CLS_COMPUTE), SPAN])
    start, dur = rows[S.TS_NS].to_numpy(np.int64), rows[S.DUR_NS].to_numpy(np.int64)
    return pd.DataFrame({START_NS: start, S.STEP: rows[S.STEP].to_numpy(np.int64),
                         S.MSG_BYTES: rows[S.MSG_BYTES].to_numpy(float),
                         "exposed_ns": dur - intervals.covered_each(compute, start, start + dur)})


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
        split = tp["kind"].isin(SPLIT_KINDS).to_numpy()
        split_ms = float((tp["exposed_ns"].to_numpy(float) - waited)[split].sum()) / n_steps / 1e6
        rows.append({"rank": rank, "collectives_per_step": len(tp) / n_steps,
                     "median_mib": float(tp[S.MSG_BYTES].median()) / 2**20,
                     "max_mib": float(tp[S.MSG_BYTES].max()) / 2**20,
                     "group_size": int(tp["group_size"].max()),
                     "sequence_parallel": bool(split.any()),
                     "async_tp": bool(tp["async_tp"].any()),
                     "split_transfer_ms_per_step": split_ms,
                     "exposed_ms_per_step": float(tp["exposed_ns"].sum()) / n_steps / 1e6,
                     "waiting_ms_per_step": float(waited.sum()) / n_steps / 1e6,
                     "transfer_ms_per_step": transfer, "step_ms": step,
                     "transfer_share": transfer / step if step and step > 0 else np.nan})
    if not rows:
        return Result()
    return Result(tables={TP_TABLE: pd.DataFrame(rows)}, facts={"topic": TOPIC})
