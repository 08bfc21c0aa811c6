"""Attention written by hand: what its kernels cost, and what a fused attention kernel would.

A model that computes attention itself (``scores = q @ k.transpose(-2, -1) * scale``, a mask,
``softmax``, ``@ v``) materialises a ``[..., T, T]`` score matrix per head and runs a
matmul, several elementwise kernels, a softmax and a second matmul over it, each way. The
trace shows it in the ops' shapes:

- a **softmax over square scores**: ``aten::_softmax`` / ``aten::softmax`` whose input has at
  least three dimensions, the last two equal (T >= :data:`MIN_SEQ`): B·H score rows of T;
- no ``scaled_dot_product_attention`` op anywhere in the profiled steps (a model on SDPA,
  whatever its backend, is not hand-written attention);
- the **attention kernels**: those whose launching op (by External id) has an input of at
  least three dimensions ending in (T, T) (the mask, scale, softmax, its backward and the
  products with the scores), or multiplies a ``[..., T, d]`` by a ``[..., d, T]`` (the
  product that makes the scores, and its backward twin).

Their kernel time is what the hand-written attention costs. A fused kernel
(``F.scaled_dot_product_attention``: FlashAttention, memory-efficient, cuDNN) never writes
the scores: it costs the attention's matmul FLOPs at a flash kernel's achievable rate,
4·(B·H)·T²·d per forward (QKᵀ and PV, counted unmasked), and 2.5 times that again for the
backward where the step has one (FlashAttention-2's backward runs five matmuls to the
forward's two, one of them recomputing QKᵀ), at :data:`ACHIEVABLE_FLASH_FRAC` of the device's
16-bit dense peak. Measured on an H200 (samples/runs/issue40/attention_flash_h200: bf16,
B·H = 128, T = 2048, d = 64, causal, 2 layers, forward and backward): 962 GFLOP counted
unmasked in 2.18 ms of ``pytorch_flash`` kernels per step, 441 TFLOP/s, 45% of 989.
The memory freed is at least the score matrices autograd keeps for the backward, one per
softmax (B·H·T² elements each).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import lookup_device
from profkit.analyzers.measure.efficiency import rank_device
from profkit.analyzers.measure.kernelcost import launching_ops
from profkit.analyzers.measure.tables import in_steps, kernels_of, window_ns
from profkit.analyzers.result import Result

from profkit import schema as S
from profkit.classify.flops import kernel_precision
from profkit.columns import name_values
from profkit.model import RankData

MIN_SEQ = 128  # a softmax over rows shorter than this is no attention worth a kernel swap
ACHIEVABLE_FLASH_FRAC = 0.40  # of the 16-bit dense peak, on unmasked attention FLOPs (doc)
BACKWARD_FLOPS = 2.5  # a flash backward's matmul FLOPs per forward FLOP
SDPA_RE = r"scaled_dot_product|flash_attention|efficient_attention|cudnn_attention"
ATTENTION_COLUMNS = ("rank", "device_model", "steps", "step_ns", "attention_ns", "kernels",
                     "softmax_calls", "heads_x_batch", "seq", "head_dim", "training",
                     "attention_flops", "flash_estimate_ns", "score_bytes")


def _shapes(text: str) -> list[list[int]]:
    """The tensor shapes of an ``Input Dims`` text (``[[8, 16, 2048, 2048], [], []]``)."""
    return [[int(x) for x in re.findall(r"\d+", inner)]
            for inner in re.findall(r"\[([\d,\s]*)\]", str(text))]


def score_shapes(ops: pd.DataFrame) -> tuple[int, int, int]:
    """(softmax calls over square scores, B·H, T) of the most common such shape; (0, 0, 0)
    without one."""
    names = name_values(ops[S.NAME], str)
    inner = "aten::_softmax" if (names == "aten::_softmax").any() else "aten::softmax"
    soft = ops[names == inner]  # aten::softmax holds aten::_softmax: one call each
    found = []
    for text in soft[S.INPUT_DIMS].astype(str):
        shapes = _shapes(text)
        if shapes and len(shapes[0]) >= 3 and shapes[0][-1] == shapes[0][-2] >= MIN_SEQ:
            found.append((int(np.prod(shapes[0][:-2])), shapes[0][-1]))
    if not found:
        return 0, 0, 0
    (bh, t), n = pd.Series(found).value_counts().index[0], len(found)
    return n, bh, t


def _attention_op(text: str, t: int) -> tuple[bool, int]:
    """Whether an op with these input dims works on T x T scores, and the head dim d of a
    ``[..., T, d] @ [..., d, T]`` product (0 otherwise)."""
    shapes = _shapes(text)
    if any(len(s) >= 3 and s[-2:] == [t, t] for s in shapes):
        return True, 0
    for a, b in zip(shapes, shapes[1:]):
        if len(a) >= 3 and len(b) >= 3 and a[-2] == t and b[-1] == t and a[-1] == b[-2] != t:
            return True, a[-1]
    return False, 0


def rank_attention(rd: RankData, used: dict[int, int] | None, run_meta: dict) -> dict | None:
    """One rank's hand-written attention per used step (:data:`ATTENTION_COLUMNS`); None
    where there is none (module doc)."""
    steps = list(used) if used else None
    ops = rd.of_kinds((S.KIND_CPU_OP,), (S.STEP, S.NAME, S.INPUT_DIMS, S.EXTERNAL_ID))
    ops = ops[ops[S.STEP].isin(steps)] if steps is not None else ops[ops[S.STEP] >= -1]
    if name_values(ops[S.NAME], lambda n: bool(re.search(SDPA_RE, n))).any():
        return None
    calls, bh, t = score_shapes(ops)
    if not calls:
        return None
    k = kernels_of(rd)
    k = k[k[S.STEP].isin(steps)] if steps is not None else in_steps(k, rd)
    launching = launching_ops(rd, k)
    dims = ops.set_index([S.EXTERNAL_ID, S.STEP])[S.INPUT_DIMS].astype(str)
    dims = dims[~dims.index.duplicated()]
    keys = pd.MultiIndex.from_arrays([launching[S.EXTERNAL_ID], launching[S.STEP]])
    texts = dims.reindex(keys).fillna("").to_numpy(dtype=object)
    judged = {x: _attention_op(x, t) for x in set(texts)}
    mine = np.array([judged[x][0] for x in texts], bool)
    head_dims = [judged[x][1] for x in texts if judged[x][1]]
    attention = pd.MultiIndex.from_arrays([launching[S.EXTERNAL_ID].to_numpy()[mine],
                                           launching[S.STEP].to_numpy()[mine]])
    kk = pd.MultiIndex.from_arrays([k[S.EXTERNAL_ID].to_numpy(), k[S.STEP].to_numpy()])
    in_attention = kk.isin(attention)
    n = len(steps) if steps else max(len(rd.steps), 1)
    d = int(pd.Series(head_dims).mode().iloc[0]) if head_dims else 0
    training = bool(name_values(ops[S.NAME], lambda n: "softmax_backward" in n).any())
    flops = 4.0 * bh * t * t * d * (1 + BACKWARD_FLOPS * training) * calls / n
    peak = lookup_device(rd.meta, run_meta, rank_device(rd))[1]
    sixteen = peak.bf16_tflops if peak else np.nan
    estimate = flops / (ACHIEVABLE_FLASH_FRAC * sixteen * 1e3) if d and peak else np.nan
    precision = set(name_values(k[S.NAME][in_attention], kernel_precision)) - {""}
    elem_bytes = 4 if precision == {"fp32"} else 2
    return {"rank": rd.rank, "device_model": peak.key if peak else "", "steps": n,
            "step_ns": (sum(used.values()) if used else window_ns(rd)) / n,
            "attention_ns": float(k[S.DUR_NS].to_numpy()[in_attention].sum()) / n,
            "kernels": int(in_attention.sum()) / n, "softmax_calls": calls / n,
            "heads_x_batch": bh, "seq": t, "head_dim": d, "training": training,
            "attention_flops": flops, "flash_estimate_ns": estimate,
            "score_bytes": float(bh) * t * t * elem_bytes * calls / n if training else np.nan}


def combine_attention(values: list[dict | None]) -> Result:
    """The ``attention`` table over the ranks with hand-written attention; rows as facts."""
    rows = [v for v in values if v]
    table = pd.DataFrame(rows, columns=list(ATTENTION_COLUMNS))
    return Result(tables={"attention": table},
                  facts={"topic": "attention", "rows": rows} if rows else {})
