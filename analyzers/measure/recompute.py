"""Activation recompute: forward ops that run again inside the backward pass.

Activation checkpointing (``torch.utils.checkpoint``, DeepSpeed's and Megatron's
``CheckpointFunction``) drops a block's activations in the forward pass and recomputes them
when the backward pass needs them. In a Kineto trace the backward pass is the autograd
engine's ``autograd::engine::evaluate_function: <Node>`` ranges (on its own thread for CUDA
work). Backward formulas call backward ops (``aten::mm``, ``aten::gelu_backward``,
``aten::native_layer_norm_backward`` ...), never the forward-only ops of
:data:`FORWARD_OPS` (``aten::linear``, ``aten::layer_norm``, a forward attention, ``aten::gelu``):
those inside a backward range are the recompute.

- Non-reentrant checkpoint (``use_reentrant=False``, the default now): the block's forward
  runs inside the backward node that first unpacks one of its saved tensors.
- Reentrant checkpoint (``CheckpointFunctionBackward``, DeepSpeed, Megatron): the forward
  runs inside that node, then a nested backward (nested evaluate_function ranges).

A **recompute region** is, per innermost backward range holding forward ops, the span from
its first forward op's start to its last one's end (the elementwise ops between them, such
as residual adds, are part of it); Python frames recorded with ``with_stack`` whose name
says ``recompute`` inside a backward range are regions too (``checkpoint.py: recompute_fn``,
Megatron's). The recompute's GPU work is the kernels launched (matched by correlation) from
the region's thread inside it; its FLOPs are those of the counted ops
(analyzers/measure/flopcount.py) inside it. User annotations (``record_function``) are not
read: a workload's own label stays an independent check.

Not seen: recompute inside a compiled backward graph (``CompiledFunctionBackward`` runs
Triton kernels, no aten forward ops), and a custom autograd Function whose backward calls
forward ops is read as recompute.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.result import Result

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, distinct, values_in
from profkit.model import RankData

BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
FORWARD_OPS = frozenset((
    "aten::linear", "aten::matmul", "aten::addmm", "aten::_addmm_activation", "aten::_scaled_mm",
    "aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm",
    "aten::group_norm", "aten::batch_norm", "aten::embedding", "aten::conv1d", "aten::conv2d",
    "aten::conv3d", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward", "aten::gelu", "aten::silu", "aten::relu",
    "aten::dropout", "aten::native_dropout", "aten::softmax", "aten::_softmax",
))
RECOMPUTE_WORD = "recompute"  # in a Python frame's name (with_stack)
RECOMPUTE_RE = re.compile(RECOMPUTE_WORD, re.IGNORECASE)
BACKWARD_RE = re.compile("^" + re.escape(BACKWARD_PREFIX))
REGION_COLUMNS = (S.PID, S.TID, "start_ns", "end_ns", S.STEP)


def backward_ranges(rd: RankData) -> pd.DataFrame:
    """The autograd engine's evaluate_function ranges: pid, tid, ts_ns, end_ns."""
    ops = rd.of_kinds((S.KIND_CPU_OP,), (S.NAME, S.PID, S.TID, S.TS_NS, S.DUR_NS))
    rng = ops[category_mask(ops[S.NAME], BACKWARD_RE)]
    return pd.DataFrame({S.PID: rng[S.PID].to_numpy(), S.TID: rng[S.TID].to_numpy(),
                         S.TS_NS: rng[S.TS_NS].to_numpy(np.int64),
                         "end_ns": (rng[S.TS_NS] + rng[S.DUR_NS]).to_numpy(np.int64)})


def thread_ranges(ranges: pd.DataFrame) -> dict[tuple, iv.Nesting]:
    """Per (pid, tid): its ranges (which nest) as :func:`profkit.intervals.nesting` reads
    them."""
    return {key: iv.nesting(g[S.TS_NS].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            for key, g in ranges.groupby([S.PID, S.TID], sort=False)}


def recompute_regions(rd: RankData) -> pd.DataFrame:
    """The recompute regions of one rank (module doc): pid, tid, start_ns, end_ns and the
    step each lies in (-1 outside steps), in time order (found once per rank: the
    recompute and efficiency measurements both read them)."""
    return rd.derived(_recompute_regions)


def _recompute_regions(rd: RankData) -> pd.DataFrame:
    trees = thread_ranges(backward_ranges(rd))
    if not trees:
        return pd.DataFrame(columns=list(REGION_COLUMNS))
    ops = rd.of_kinds((S.KIND_CPU_OP, S.KIND_PYTHON),
                      (S.KIND, S.NAME, S.PID, S.TID, S.TS_NS, S.DUR_NS, S.STEP))
    forward = values_in(ops[S.KIND], (S.KIND_CPU_OP,)) & values_in(ops[S.NAME], FORWARD_OPS)
    frames = values_in(ops[S.KIND], (S.KIND_PYTHON,)) & category_mask(ops[S.NAME], RECOMPUTE_RE)
    pick = forward | frames
    cand = ops[pick]
    spans: dict[tuple, list[int]] = {}
    regions = []
    ts_all, dur_all = cand[S.TS_NS].to_numpy(np.int64), cand[S.DUR_NS].to_numpy(np.int64)
    is_frame_all = frames[pick]
    for (pid, tid), rows in cand.groupby([S.PID, S.TID], sort=False).indices.items():
        tree = trees.get((pid, tid))
        if tree is None:
            continue
        ts, end = ts_all[rows], ts_all[rows] + dur_all[rows]
        holder = iv.innermost(tree, ts, end)  # the innermost backward range, -1: none
        for at, lo, hi, step, is_frame in zip(holder.tolist(), ts.tolist(), end.tolist(),
                                              cand[S.STEP].to_numpy()[rows].tolist(),
                                              is_frame_all[rows].tolist()):
            if at < 0:
                continue
            if is_frame:
                regions.append((pid, tid, lo, hi, int(step)))
                continue
            span = spans.setdefault((pid, tid, at), [lo, hi, int(step)])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
    regions += [(pid, tid, lo, hi, step) for (pid, tid, _), (lo, hi, step) in spans.items()]
    return merged(pd.DataFrame(regions, columns=list(REGION_COLUMNS)))


def merged(regions: pd.DataFrame) -> pd.DataFrame:
    """Regions of one thread that overlap as one (a ``recompute_fn`` frame and the forward
    ops inside it, nested backward ranges of a reentrant checkpoint), in time order."""
    out = []
    for (pid, tid), g in regions.sort_values("start_ns", kind="stable").groupby(
            [S.PID, S.TID], sort=False):
        reach = -1
        for lo, hi, step in zip(g["start_ns"], g["end_ns"], g[S.STEP]):
            if out and lo <= reach and out[-1][:2] == [pid, tid]:
                out[-1][3] = reach = max(reach, int(hi))
            else:
                out.append([pid, tid, int(lo), int(hi), int(step)])
                reach = int(hi)
    frame = pd.DataFrame(out, columns=list(REGION_COLUMNS))
    return frame.sort_values("start_ns", kind="stable").reset_index(drop=True)


def in_regions(regions: pd.DataFrame, pid: np.ndarray, tid: np.ndarray,
               ts: np.ndarray) -> np.ndarray:
    """Whether each (pid, tid, ts) lies in a region of its own thread."""
    inside = np.zeros(len(ts), dtype=bool)
    for (p, t), g in regions.groupby([S.PID, S.TID]):
        merged = iv.union(g["start_ns"], g["end_ns"])
        on = (pid == p) & (tid == t)
        k = np.searchsorted(merged[0], ts[on], side="right") - 1
        ok = k >= 0
        hit = np.zeros(on.sum(), dtype=bool)
        hit[ok] = ts[on][ok] <= merged[1][k[ok]]
        inside[np.flatnonzero(on)[hit]] = True
    return inside


def recompute_kernels(rd: RankData, regions: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """Whether each kernel of ``kernels`` was launched from inside a recompute region."""
    if regions.empty or kernels.empty:
        return np.zeros(len(kernels), dtype=bool)
    launches = rd.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), (S.CORRELATION, S.PID, S.TID, S.TS_NS))
    launches = launches[launches[S.CORRELATION] >= 0]
    hit = in_regions(regions, launches[S.PID].to_numpy(), launches[S.TID].to_numpy(),
                     launches[S.TS_NS].to_numpy(np.int64))
    corr = distinct(launches[S.CORRELATION].to_numpy()[hit])
    return np.isin(kernels[S.CORRELATION].to_numpy(), corr)


def recompute_op_mask(regions: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Whether each op of ``ops`` (CPU ops) starts inside a recompute region."""
    if regions.empty or ops.empty:
        return np.zeros(len(ops), dtype=bool)
    return in_regions(regions, ops[S.PID].to_numpy(), ops[S.TID].to_numpy(),
                      ops[S.TS_NS].to_numpy(np.int64))


def allocated_at(memory: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """The allocator's GPU ``Total Allocated`` just after the last event at or before each
    ``ts`` (NaN before the first, or without GPU memory events)."""
    mem = memory[(memory[S.DEVICE_TYPE] == S.DEVICE_TYPE_CUDA).to_numpy()] \
        if len(memory) else memory
    if mem is None or mem.empty:
        return np.full(len(ts), np.nan)
    t = mem[S.TS_NS].to_numpy(np.int64)
    order = np.argsort(t, kind="stable")
    values = mem[S.ALLOCATED_BYTES].to_numpy(np.float64)[order]
    k = np.searchsorted(t[order], ts, side="right") - 1
    return np.where(k >= 0, values[np.maximum(k, 0)], np.nan)


def rank_recompute(rd: RankData, used: dict[int, int] | None) -> dict | None:
    """One rank's recompute over the steps the verdict uses (every step >= 0 without that
    list, the whole window without steps), per step: GPU time of all kernels and of the
    recompute's (interval unions), the GPU idle time while the host runs the recompute
    (inside its regions: launch-bound recompute costs that too), its counted FLOPs, its regions (forward
    passes run again) and the bytes they leave allocated (their activations, kept until
    the block's backward ends); None without a recompute region."""
    from profkit.analyzers.measure.flopcount import counted_ops
    from profkit.analyzers.measure.tables import in_steps, kernels_of, window_ns

    regions = recompute_regions(rd)
    steps = list(used) if used else None
    if steps is not None:
        regions = regions[regions[S.STEP].isin(steps)]
    elif len(rd.steps):
        regions = regions[regions[S.STEP] >= 0]
    if regions.empty:
        return None
    k = kernels_of(rd)
    k = k[k[S.STEP].isin(steps)] if steps is not None else in_steps(k, rd)
    n = len(steps) if steps else max(len(rd.steps), 1)
    step_ns = sum(used.values()) / n if used else window_ns(rd) / n
    mine = recompute_kernels(rd, regions, k)
    ops = counted_ops(rd, k)[0]
    ops = ops[ops[S.STEP].isin(steps)] if steps is not None else ops
    re_ops = recompute_op_mask(regions, ops)
    start = allocated_at(rd.table("memory"), regions["start_ns"].to_numpy(np.int64))
    end = allocated_at(rd.table("memory"), regions["end_ns"].to_numpy(np.int64))
    kept = np.nansum(np.clip(end - start, 0, None)) if np.isfinite(start + end).any() else np.nan
    ts, stop = k[S.TS_NS].to_numpy(np.int64), (k[S.TS_NS] + k[S.DUR_NS]).to_numpy(np.int64)
    busy, spans = iv.union(ts, stop), iv.union(regions["start_ns"], regions["end_ns"])
    return {"rank": rd.rank, "steps": n, "step_ns": float(step_ns),
            "kernel_ns": iv.total(busy) / n,
            "recompute_ns": iv.total(iv.union(ts[mine], stop[mine])) / n,
            "idle_ns": (iv.total(spans) - iv.total(iv.intersect(busy, spans))) / n,
            "recompute_kernels": int(mine.sum()) / n,
            "regions": len(regions) / n,
            "recompute_flops": float(ops[S.FLOPS].to_numpy()[re_ops].sum()) / n,
            "executed_flops": float(ops[S.FLOPS].sum()) / n,
            "activation_bytes": float(kept) / n}


RECOMPUTE_COLUMNS = ("rank", "steps", "step_ns", "kernel_ns", "recompute_ns", "idle_ns",
                     "saving_ns", "gpu_frac", "step_frac", "regions", "recompute_kernels", "recompute_flops",
                     "executed_flops", "flop_frac", "activation_bytes",
                     "peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes",
                     "peak_without_bytes", "fits_without")


def combine_recompute(values: list[dict | None], memory_ranks: pd.DataFrame | None) -> Result:
    """The ``recompute`` table (per rank, per used step: :func:`rank_recompute`, with its
    shares of GPU time, of the step and of the executed FLOPs) and, from the allocator's
    peaks (``memory_ranks`` of analyzers/measure/allocations.py, read only), the peak
    without checkpointing (the peak allocated plus the recomputed activations: on H200,
    5.56 GB predicted, 5.30 GB measured without checkpointing) and whether it fits the
    device. Names the topic only when some rank recomputes."""
    rows = [dict(v) for v in values if v]
    if not rows:
        return Result(tables={"recompute": pd.DataFrame(columns=list(RECOMPUTE_COLUMNS))})
    mem = memory_ranks if memory_ranks is not None and len(memory_ranks) else None
    for row in rows:
        row["gpu_frac"] = row["recompute_ns"] / row["kernel_ns"] if row["kernel_ns"] else np.nan
        row["step_frac"] = row["recompute_ns"] / row["step_ns"] if row["step_ns"] else np.nan
        row["saving_ns"] = row["recompute_ns"] + row["idle_ns"]
        row["flop_frac"] = (row["recompute_flops"] / row["executed_flops"]
                            if row["executed_flops"] else np.nan)
        peak = mem[mem["rank"] == row["rank"]] if mem is not None else None
        row.update({c: float(peak[c].max()) if peak is not None and len(peak) else np.nan
                    for c in ("peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes")})
        row["peak_without_bytes"] = row["peak_allocated_bytes"] + row["activation_bytes"]
        row["fits_without"] = (bool(row["peak_without_bytes"] <= row["capacity_bytes"])
                               if np.isfinite(row["peak_without_bytes"])
                               and np.isfinite(row["capacity_bytes"]) else None)
    table = pd.DataFrame(rows, columns=list(RECOMPUTE_COLUMNS))
    return Result(tables={"recompute": table}, facts={"topic": "recompute", "rows": rows})
