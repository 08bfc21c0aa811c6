"""fp8 GEMMs, the quantisation around them, and what fp8 would give a bf16 step.

An fp8 GEMM is a GEMM kernel whose precision (``profkit.classify.flops.kernel_precision``:
``e4m3`` / ``e5m2`` / ``fp8`` in CUTLASS, xmma and Transformer Engine names, cuBLASLt's
``nvjet_sm90_qq...``; else its op's operand dtypes, ``aten::_scaled_mm`` on Float8 inputs)
is fp8.

**Quantisation overhead**: an fp8 GEMM needs its inputs scaled and cast. Done eagerly it is a
chain of kernels per input: the amax (``aten::abs`` + ``aten::amax`` / ``max``), the scale
(``clamp``, ``div``, ``reciprocal``), the scaling and the cast (``mul``, ``clamp``,
``to`` / ``_to_copy`` / ``copy_``). Those ops (:data:`QUANT_OPS`) that run on the GEMM's
thread after the previous matrix product ended and before the fp8 GEMM's op started are its
**quantisation window**; their kernels are its quantisation kernels. Kernels named for
quantisation (:data:`QUANT_KERNEL_RE`: Transformer Engine's ``cast_transpose``,
``quantize``, ``amax``, names with a float8 type) count too, wherever they run. A fused
quantisation reads the input once for the amax and once for the cast (one pass with delayed
scaling); no saving is estimated for it (no measured fused run to check one against).

**fp8 what-if** (ranks without fp8 GEMMs, on devices with an fp8 peak: Hopper, Ada,
Blackwell, MI300): the bf16 GEMMs whose FLOPs are known would take, in fp8, the slower of
their FLOPs at :data:`ACHIEVABLE_TENSOR_FRAC` of the fp8 dense peak and half their bytes at
:data:`ACHIEVABLE_HBM_FRAC` of HBM bandwidth, plus the dynamic per-tensor quantisation of
their inputs at that bandwidth: eager (abs, amax, scale, cast as four kernels: 13 bytes per
element, 6.5x their bf16 bytes), the estimate the saving is given from, and fused (read
twice, written once in fp8: 2.5x). An estimate: fp8's accuracy and the scaling recipe decide
whether it is usable. On H200 (samples/runs/memory/bf16_gemm -> fp8_gemm, eager) it gives
11% where the fp8 run measured 12%.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import DevicePeak, lookup_device
from profkit.analyzers.measure.efficiency import rank_device
from profkit.analyzers.measure.kernelcost import kernel_costs
from profkit.analyzers.measure.recompute import recompute_kernels
from profkit.analyzers.measure.tables import in_steps_mask, kernels_of, window_ns
from profkit.analyzers.result import Result

from profkit import intervals as iv
from profkit import schema as S
from profkit.classify.flops import SIXTEEN_BIT
from profkit.classify.opfamilies import MATMUL
from profkit.columns import name_values, values_in
from profkit.model import RankData

ACHIEVABLE_TENSOR_FRAC = 0.70  # as findings/savings.py: cuBLAS reaches 70-85% of a dense peak
ACHIEVABLE_HBM_FRAC = 0.80
EAGER_QUANT_PASSES = 6.5  # bytes an eager dynamic quantisation moves, per bf16 input byte
FUSED_QUANT_PASSES = 2.5  # the same fused: read twice (amax, cast), written once in fp8
FP8_GEMM_OPS = frozenset(("aten::_scaled_mm", "aten::_scaled_grouped_mm", "aten::_scaled_mm_v2"))
QUANT_OPS = frozenset(f"aten::{n}" for n in (
    "abs", "amax", "max", "clamp", "clamp_", "clamp_min", "clamp_max", "reciprocal", "div",
    "div_", "mul", "mul_", "to", "_to_copy", "copy_", "_amp_foreach_non_finite_check_and_unscale_"))
QUANT_KERNEL_RE = re.compile(r"cast_transpose|quantize|amax|float8|e4m3|e5m2|fp8", re.I)
GEMM_SUBCLASSES = ("gemm",)
FP8_COLUMNS = ("rank", "device_model", "steps", "step_ns", "fp8_gemm_ns", "quant_ns",
               "quant_kernels", "bf16_gemm_ns", "bf16_gemm_known_ns", "bf16_gemm_flops",
               "bf16_gemm_bytes", "fp8_estimate_ns", "fp8_fused_estimate_ns")


def quant_windows(rd: RankData, steps: list[int] | None) -> pd.DataFrame:
    """The quantisation ops of each fp8 GEMM op (module doc): pid, tid, start_ns, end_ns and
    the window (its fp8 GEMM op's row) each belongs to."""
    ops = rd.of_kinds((S.KIND_CPU_OP,), (S.STEP, S.NAME, S.PID, S.TID, S.TS_NS, S.DUR_NS))
    ops = ops[ops[S.STEP].isin(steps)] if steps is not None else ops[ops[S.STEP] >= -1]
    names = name_values(ops[S.NAME], str)
    base = name_values(ops[S.NAME], lambda n: n.split("::", 1)[-1].split(".")[0])
    is_mm = np.isin(base, list(MATMUL)) | np.isin(names, list(FP8_GEMM_OPS))
    is_q = np.isin(names, list(QUANT_OPS))
    keep = is_mm | is_q
    sel = pd.DataFrame({S.PID: ops[S.PID].to_numpy()[keep], S.TID: ops[S.TID].to_numpy()[keep],
                        "start_ns": ops[S.TS_NS].to_numpy(np.int64)[keep],
                        "end_ns": (ops[S.TS_NS] + ops[S.DUR_NS]).to_numpy(np.int64)[keep],
                        "fp8": np.isin(names[keep], list(FP8_GEMM_OPS)), "mm": is_mm[keep]})
    rows = []
    for _, g in sel.sort_values("start_ns", kind="stable").groupby([S.PID, S.TID], sort=False):
        last_mm_end, pending = -1, []
        for r in g.itertuples(index=False):
            if r.mm:
                if r.start_ns < last_mm_end:  # nested in a product (linear holds mm)
                    continue
                if r.fp8:
                    rows += [(*q, r.start_ns) for q in pending if q[2] >= last_mm_end]
                pending, last_mm_end = [], max(last_mm_end, r.end_ns)
            else:
                pending.append((getattr(r, S.PID), getattr(r, S.TID), r.start_ns, r.end_ns))
    return pd.DataFrame(rows, columns=[S.PID, S.TID, "start_ns", "end_ns", "window"])


def rank_fp8(rd: RankData, used: dict[int, int] | None, run_meta: dict) -> dict | None:
    """One rank's fp8 facts per used step (:data:`FP8_COLUMNS`); None without GEMMs."""
    steps = list(used) if used else None
    k = kernels_of(rd)
    k = k[~values_in(k[S.CLASS], (S.CLS_COMMUNICATION,))  # one selection of the rows
          & (k[S.STEP].isin(steps).to_numpy() if steps is not None else in_steps_mask(k, rd))]
    costs = kernel_costs(rd, k)
    gemm = (costs[S.SUBCLASS].astype(str) == "gemm").to_numpy()
    if not gemm.any():
        return None
    n = len(steps) if steps else max(len(rd.steps), 1)
    peak: DevicePeak | None = lookup_device(rd.meta, run_meta, rank_device(rd))[1]
    precision = costs["precision"].to_numpy(dtype=object)
    dur = costs[S.DUR_NS].to_numpy(np.int64)
    fp8 = gemm & (precision == "fp8")
    row = {"rank": rd.rank, "device_model": peak.key if peak else "", "steps": n,
           "step_ns": (sum(used.values()) if used else window_ns(rd)) / n,
           "fp8_gemm_ns": float(dur[fp8].sum()) / n}
    row.update(quant_time(rd, steps, k, fp8.any()))
    row.update({c: v / n for c, v in row.items() if c in ("quant_ns", "quant_kernels")})
    bf16 = gemm & np.isin(precision, SIXTEEN_BIT)  # the 16-bit GEMMs, bf16 or fp16
    flops = costs["flops"].to_numpy(dtype=float)
    nbytes = (costs["read_bytes"] + costs["write_bytes"]).to_numpy(dtype=float)
    reads = costs["read_bytes"].to_numpy(dtype=float)
    known = bf16 & np.isfinite(flops) & (flops > 0)
    work = (float(flops[known].sum()) / n, float(np.nansum(nbytes[known])) / n,
            float(np.nansum(reads[known])) / n)
    row.update(bf16_gemm_ns=float(dur[bf16].sum()) / n,
               bf16_gemm_known_ns=float(dur[known].sum()) / n,
               bf16_gemm_flops=work[0], bf16_gemm_bytes=work[1],
               fp8_estimate_ns=fp8_estimate_ns(*work, peak, EAGER_QUANT_PASSES),
               fp8_fused_estimate_ns=fp8_estimate_ns(*work, peak, FUSED_QUANT_PASSES))
    return row


def quant_time(rd: RankData, steps: list[int] | None, k: pd.DataFrame, has_fp8: bool) -> dict:
    """Quantisation kernels' time (union) and count (module doc)."""
    if not has_fp8:
        return {"quant_ns": 0.0, "quant_kernels": 0}
    mine = recompute_kernels(rd, quant_windows(rd, steps), k)
    named = k[S.NAME].astype(str).str.contains(QUANT_KERNEL_RE).to_numpy() & \
        ~k[S.SUBCLASS].astype(str).isin(GEMM_SUBCLASSES + ("attention",)).to_numpy()
    mine |= named
    ts, dur = k[S.TS_NS].to_numpy(np.int64), k[S.DUR_NS].to_numpy(np.int64)
    return {"quant_ns": float(iv.total(iv.union(ts[mine], ts[mine] + dur[mine]))),
            "quant_kernels": int(mine.sum())}


def fp8_estimate_ns(flops: float, nbytes: float, read_bytes: float, peak: DevicePeak | None,
                    quant_passes: float) -> float:
    """ns that bf16 GEMMs of ``flops`` moving ``nbytes`` (``read_bytes`` of their inputs)
    would take in fp8 on ``peak``, a quantisation of their inputs moving ``quant_passes``
    times their bf16 bytes included (module doc); NaN without an fp8 peak or FLOPs."""
    if peak is None or not np.isfinite(peak.fp8_tflops) or not flops > 0:
        return np.nan
    bw = ACHIEVABLE_HBM_FRAC * peak.mem_bw_tbps * 1e3  # bytes per ns
    math_ns = flops / (ACHIEVABLE_TENSOR_FRAC * peak.fp8_tflops * 1e3)
    return max(math_ns, 0.5 * nbytes / bw) + quant_passes * read_bytes / bw


def combine_fp8(values: list[dict | None]) -> Result:
    """The ``fp8`` table over the GPU ranks with GEMMs; its rows as facts."""
    rows = [v for v in values if v]
    table = pd.DataFrame(rows, columns=list(FP8_COLUMNS))
    return Result(tables={"fp8": table}, facts={"topic": "fp8", "rows": rows} if rows else {})
