"""The FLOPs one rank's ops account for, which kernel time they cover, and in what precision.

FLOPs sit on CPU ops (the trace's own counts, else ``profkit.classify.flops`` from recorded shapes).
Wrappers and the ops they call can both carry FLOPs (``aten::linear`` holds ``aten::addmm``),
so only the outermost op carrying FLOPs on each thread counts: nothing is counted twice.

The kernels an op ran are the ones whose launch call (matched by correlation) lies inside it
on its thread, which also reaches kernels launched by ops nested in it. That gives:

- **coverage**: the share of the compute-kernel time that could carry FLOPs which was
  launched inside counted ops: covered time / (covered time + uncovered GEMM, convolution,
  attention and unclassified kernel time). Elementwise and reduction kernels (a few FLOPs
  per byte moved: negligible next to the matmuls) count only where covered, so a
  well-recorded trace dominated by them (LLM decode) is not mistaken for a badly covered
  one, while GEMMs of ops without a formula (custom ops, CUDA-graph replays) lower it. MFU
  from a poorly covered trace is only a lower bound: the analyzer says so instead of
  judging it.
- **precision** of each counted op: its GEMM / conv / attention kernels' names say what ran
  (duration-weighted when they differ; an fp32 op running TF32 kernels is tf32); without
  such a kernel, its inputs' recorded dtype; else the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify.flops import kernel_precision, refine_precision
from profkit.columns import as_text, name_values, row_groups, sorted_lookup, values_in
from profkit.model import RankData

MATMUL_SUBCLASSES = ("gemm", "conv", "attention")  # the kernels that carry an op's FLOPs
# what is read of the counted ops (their threads and times, step, FLOPs and inputs' dtype)
OP_COLUMNS = (S.PID, S.TID, S.TS_NS, S.DUR_NS, S.STEP, S.FLOPS, S.FLOPS_DTYPE)
LOW_FLOP_SUBCLASSES = ("elementwise", "reduction")  # O(1) FLOPs per element moved


@dataclass(frozen=True)
class FlopCount:
    """FLOPs counted on one rank over its profiled steps."""

    flops: float = 0.0
    by_precision: dict[str, float] = field(default_factory=dict)  # precision -> FLOPs
    covered_ns: int = 0  # compute-kernel time launched inside counted ops
    uncovered_ns: int = 0  # other compute-kernel time that may carry FLOPs (module doc)

    @property
    def coverage(self) -> float:
        total = self.covered_ns + self.uncovered_ns
        return self.covered_ns / total if total else math.nan


def outer_ops(rd: RankData) -> pd.DataFrame:
    """CPU ops carrying FLOPs in the steps that no earlier op on their thread contains."""
    ev = rd.events
    ops = ev.loc[values_in(ev[S.KIND], (S.KIND_CPU_OP,)) & (ev[S.FLOPS] > 0).to_numpy(),
                 list(OP_COLUMNS)]
    ops = ops[ops[S.STEP] >= 0] if len(rd.steps) else ops
    ops = ops.assign(end=ops[S.TS_NS] + ops[S.DUR_NS])
    pid, tid = ops[S.PID].to_numpy(), ops[S.TID].to_numpy()
    start, dur = ops[S.TS_NS].to_numpy(), ops[S.DUR_NS].to_numpy()
    # by thread, start, the longer first (a stable sort: sort_values' order)
    order = np.lexsort((-dur, start, tid, pid))
    ops = ops.iloc[order]
    end, pid, tid = ops["end"].to_numpy(), pid[order], tid[order]
    keep = np.ones(len(ops), dtype=bool)
    new = np.flatnonzero(np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])]) \
        if len(ops) else np.zeros(0, np.intp)
    for lo, hi in zip(new.tolist(), [*new[1:].tolist(), len(ops)]):  # each thread
        reach = np.maximum.accumulate(end[lo:hi])  # else inside an earlier op
        keep[lo + 1:hi] = end[lo + 1:hi] > reach[:-1]
    return ops[keep].reset_index(drop=True)


def kernel_owners(rd: RankData, ops: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """Row of ``ops`` whose time on the launching thread holds each kernel's launch call
    (matched by correlation), -1 where none does or the kernel has no launch: per thread,
    the last op starting at or before the call (what ``merge_asof`` backward by thread
    gives), if it still runs then."""
    owner = np.full(len(kernels), -1, dtype=np.int64)
    if ops.empty or kernels.empty:
        return owner
    columns = (S.CORRELATION, S.TS_NS, S.PID, S.TID)
    calls = rd.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), columns)  # shared with other readers
    corr, ts, pid, tid = (calls[c].to_numpy()[(calls[S.CORRELATION] >= 0).to_numpy()]
                          for c in columns)
    first = np.sort(np.unique(corr, return_index=True)[1])  # each correlation's first call
    corr, ts, pid, tid = corr[first], ts[first], pid[first], tid[first]
    start, end = ops[S.TS_NS].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    op_pid, op_tid = ops[S.PID].to_numpy(), ops[S.TID].to_numpy()
    held_by = np.full(len(corr), -1, dtype=np.int64)
    for rows in row_groups([op_pid, op_tid]):  # each thread's ops
        rows = rows[np.argsort(start[rows], kind="stable")]
        mine = np.flatnonzero((pid == op_pid[rows[0]]) & (tid == op_tid[rows[0]]))
        at = np.searchsorted(start[rows], ts[mine], side="right") - 1
        found = at >= 0
        op = rows[at[found]]
        inside = ts[mine][found] <= end[op]
        held_by[mine[found][inside]] = op[inside]
    at = sorted_lookup(corr, kernels[S.CORRELATION].to_numpy(), np.argsort(corr, kind="stable"))
    hit = at >= 0
    owner[hit] = held_by[at[hit]]
    return owner


def op_precisions(ops: pd.DataFrame, kernels: pd.DataFrame, owner: np.ndarray,
                  default: str) -> np.ndarray:
    """Precision of each counted op (module doc): its matmul kernels' names by duration,
    else its inputs' dtype, else ``default``."""
    out = as_text(ops[S.FLOPS_DTYPE]).to_numpy(dtype=object).copy()
    mm = (owner >= 0) & kernels[S.SUBCLASS].isin(MATMUL_SUBCLASSES).to_numpy()
    votes = pd.DataFrame({"op": owner[mm], "dur": kernels[S.DUR_NS].to_numpy()[mm],
                          "precision": name_values(kernels[S.NAME][mm], kernel_precision)})
    votes = votes[votes["precision"] != ""]
    if len(votes):
        best = (votes.groupby(["op", "precision"])["dur"].sum().reset_index()
                .sort_values("dur", kind="stable").drop_duplicates("op", keep="last"))
        ids = best["op"].to_numpy()
        out[ids] = [refine_precision(p, d) for p, d in zip(best["precision"], out[ids])]
    out[out == ""] = default
    return out


def never_ran(ops: pd.DataFrame, kernels: pd.DataFrame, owner: np.ndarray) -> np.ndarray:
    """Ops that launched kernels, all of them elementwise or reductions (an autocast cast):
    their product never ran. A non-reentrant checkpoint stops its recompute as soon as the
    saved tensors are back, inside the last ``aten::linear``, after it cast its weight and
    before its GEMM (H200 GPT: the MLP's second linear of every block)."""
    launched, carrying = np.zeros(len(ops), bool), np.zeros(len(ops), bool)
    has = owner >= 0
    launched[owner[has]] = True
    low = kernels[S.SUBCLASS].isin(LOW_FLOP_SUBCLASSES).to_numpy()
    carrying[owner[has & ~low]] = True
    return launched & ~carrying


def counted_ops(rd: RankData, kernels: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The outer ops carrying FLOPs (:func:`outer_ops`) with the FLOPs of those whose product
    never ran (:func:`never_ran`) at 0, and the owner of each kernel of ``kernels``."""
    ops = outer_ops(rd)
    owner = kernel_owners(rd, ops, kernels)
    gone = never_ran(ops, kernels, owner)
    if gone.any():
        ops[S.FLOPS] = np.where(gone, 0.0, ops[S.FLOPS].to_numpy(dtype=float))
    return ops, owner


def count_flops(rd: RankData, kernels: pd.DataFrame, default: str) -> FlopCount:
    """The rank's counted FLOPs, their precision and coverage (``kernels``: the window's)."""
    ops, owner = counted_ops(rd, kernels)
    compute = (kernels[S.CLASS] == S.CLS_COMPUTE).to_numpy()
    may_carry = ~kernels[S.SUBCLASS].isin(LOW_FLOP_SUBCLASSES).to_numpy()
    dur = kernels[S.DUR_NS].to_numpy()
    precision = op_precisions(ops, kernels, owner, default)
    by_precision = ops.groupby(precision)[S.FLOPS].sum() if len(ops) else pd.Series(dtype=float)
    return FlopCount(float(ops[S.FLOPS].sum()),
                     {str(p): float(f) for p, f in by_precision.items() if f > 0},
                     int(dur[compute & (owner >= 0)].sum()),
                     int(dur[compute & may_carry & (owner < 0)].sum()))


def kernel_time_mix(kernels: pd.DataFrame) -> dict[str, float]:
    """Matmul-kernel time per precision their names show, for a mix without counted FLOPs."""
    mm = kernels[kernels[S.SUBCLASS].isin(MATMUL_SUBCLASSES)]
    precision = name_values(mm[S.NAME], kernel_precision)
    keep = precision != ""
    if not keep.any():
        return {}
    time = mm[S.DUR_NS].to_numpy()[keep]
    return {str(p): float(t) for p, t in pd.Series(time).groupby(precision[keep]).sum().items()}
